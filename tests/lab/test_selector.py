"""vLLM 0.22.1's real selector, per step, compute capability, KV cache dtype and role."""

import pytest

from dflash_fi.lab.selector import backend_verdicts, feature_table, selector_matrix
from dflash_fi.steps import STEPS
from dflash_fi.vocabulary import CAPABILITIES, KV_CACHE_DTYPES, RTX_4090


@pytest.fixture(scope="module")
def matrix():
    return {(r["step"], r["capability"], r["kv_cache_dtype"], r["role"]): r for r in selector_matrix()}


@pytest.mark.step0
def test_stock_rejects_flashinfer_for_every_draft(matrix):
    drafts = {key: r for key, r in matrix.items() if key[0] == 0 and key[-1] == "draft"}
    assert len(drafts) == len(CAPABILITIES) * len(KV_CACHE_DTYPES)
    for (_, cap, kv, _), row in drafts.items():  # refused for non-causal attention: the target, causal, is accepted
        assert row["flashinfer_reasons"] and matrix[0, cap, kv, "target"]["flashinfer_reasons"] == []
        assert row["flashinfer_reasons"] == drafts[0, "9.0", "auto", "draft"]["flashinfer_reasons"]


@pytest.mark.step0
@pytest.mark.step1
def test_rtx_4090_with_fp8_kv_has_no_backend_for_the_stock_draft(matrix):
    row = matrix[0, "8.9", "fp8", "draft"]
    assert row["auto_backend"] is None and type(row["auto_error"]) is ValueError
    assert matrix[1, "8.9", "fp8", "draft"]["auto_backend"] == "FLASHINFER"


@pytest.mark.step0
def test_every_backend_says_why_it_refuses_the_4090_fp8_draft():
    verdicts = backend_verdicts(0, RTX_4090, "fp8", "draft")
    assert verdicts and all(v["reasons"] for v in verdicts)  # nothing accepted
    reasons = {v["backend"]: v["reasons"] for v in verdicts}
    # FLASHINFER for non-causal attention (the target, causal, is accepted); FLASH_ATTN for the FP8 cache, as for the
    # target (bf16 is accepted).
    target = {v["backend"]: v["reasons"] for v in backend_verdicts(0, RTX_4090, "fp8", "target")}
    assert target["FLASHINFER"] == [] and reasons["FLASH_ATTN"] == target["FLASH_ATTN"] != []
    assert {v["backend"]: v["reasons"] for v in backend_verdicts(0, RTX_4090, "auto", "target")}["FLASH_ATTN"] == []
    assert [v["priority"] for v in verdicts] == sorted(v["priority"] for v in verdicts)
    after = {v["backend"]: v["reasons"] for v in backend_verdicts(1, RTX_4090, "fp8", "draft")}
    assert after["FLASHINFER"] == []


@pytest.mark.parametrize("step", [s for s in STEPS if s >= 1])
def test_from_step_one_flashinfer_is_accepted_for_the_draft(matrix, step):
    assert all(r["flashinfer_reasons"] == [] for (s, *_, role), r in matrix.items() if s == step and role == "draft")


def test_target_selection_never_changes(matrix):
    for (step, cap, kv, role), row in matrix.items():
        if role == "target":
            assert row == {**matrix[0, cap, kv, role], "step": step}


@pytest.mark.step1
def test_feature_table_non_causal_column():
    assert "| `FLASHINFER` | ❌ |" in feature_table(0)
    assert "| `FLASHINFER` | ✅ |" in feature_table(1)
    assert "| `FLASH_ATTN` | ✅ |" in feature_table(0) and "| `TRITON_ATTN` | ❌ |" in feature_table(1)
