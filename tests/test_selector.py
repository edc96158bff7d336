"""vLLM 0.22.1's real selector, per step, compute capability, KV cache dtype and role."""

import pytest

from dflash_fi.selector_matrix import feature_table, selector_matrix


@pytest.fixture(scope="module")
def matrix():
    return {(r["step"], r["capability"], r["kv_cache_dtype"], r["role"]): r for r in selector_matrix()}


def test_stock_rejects_flashinfer_for_every_draft(matrix):
    drafts = [r for (step, *_, role), r in matrix.items() if step == 0 and role == "draft"]
    assert len(drafts) == 10
    assert all("Reason: ['non-causal attention not supported']" in r["flashinfer"] for r in drafts)


def test_rtx_4090_with_fp8_kv_has_no_backend_for_the_stock_draft(matrix):
    row = matrix[0, "8.9", "fp8_e4m3", "draft"]
    assert row["auto_backend"] is None and "No valid attention backend found" in row["auto_error"]
    assert matrix[1, "8.9", "fp8_e4m3", "draft"]["auto_backend"] == "FLASHINFER"


def test_from_step_one_flashinfer_is_accepted_for_the_draft(matrix):
    assert all(r["flashinfer"] == "accepted" for (step, *_, role), r in matrix.items() if step >= 1 and role == "draft")


def test_target_selection_never_changes(matrix):
    for (step, cap, kv, role), row in matrix.items():
        if role == "target":
            assert row == {**matrix[0, cap, kv, role], "step": step}


def test_feature_table_non_causal_column():
    assert "| `FLASHINFER` | ❌ |" in feature_table(0)
    assert "| `FLASHINFER` | ✅ |" in feature_table(4)
    assert "| `FLASH_ATTN` | ✅ |" in feature_table(0) and "| `TRITON_ATTN` | ❌ |" in feature_table(4)
