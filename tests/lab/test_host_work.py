"""Step 7 on the real FlashInferMetadataBuilder (wrappers are doubles): draft builds that never wait for the GPU,
no build for metadata nobody reads."""

from itertools import accumulate

import pytest

from dflash_fi.lab.batches import STANDARD_BATCHES, common_metadata
from dflash_fi.lab.host_work import draft_build_reads_gpu_lengths, runner_builds_for_draft_layers
from dflash_fi.lab.routing import RoutingLab
from dflash_fi.vocabulary import DRAFT_BLOCK_SIZE, KV_PAGE_SIZE

pytestmark = pytest.mark.step7
DRAFT = STANDARD_BATCHES[0]


def pages(lengths):
    return [-(-n // KV_PAGE_SIZE) for n in lengths]


def test_a_draft_build_plans_from_host_bounds_and_leaves_the_exact_page_table_to_the_kernel():
    before, after = draft_build_reads_gpu_lengths(6), draft_build_reads_gpu_lengths(7)
    assert before["copied_from_gpu"] is True and after["copied_from_gpu"] is False
    exact, bounds = after["exact_seq_lens"], after["upper_bounds"]
    assert all(b >= e for b, e in zip(bounds, exact)) and pages(bounds) != pages(exact)  # one crosses a page
    assert after["planned_indptr"][1:] == list(accumulate(pages(bounds)))
    assert after["kernel_indptr"][1:] == list(accumulate(pages(exact)))
    assert after["kernel_indptr"] == before["kernel_indptr"] and after["kernel_last_page_len"] == before["kernel_last_page_len"]
    assert after["kernel_last_page_len"] == [(n - 1) % KV_PAGE_SIZE + 1 for n in exact]
    assert after["kernel_kv_lens"] == exact
    assert after["max_token_per_sequence"] == DRAFT_BLOCK_SIZE and before["max_token_per_sequence"] is None
    assert after["disable_split_kv"] is True and before["disable_split_kv"] is False


def test_a_batch_with_host_lengths_still_plans_from_them():
    from vllm.config import set_current_vllm_config

    with RoutingLab(7) as lab:
        builder, _, config = lab.builders["draft"]
        cad = common_metadata(DRAFT)
        cad._seq_lens_cpu = cad.seq_lens.clone()  # a non-causal batch whose host lengths are known exactly
        with set_current_vllm_config(config):
            md = builder.build(0, cad)
    assert builder.paged_kv_indptr.cpu[1:5].tolist() == list(accumulate(pages(cad.seq_lens.tolist())))
    # plan()'s own copy is what the kernel reads
    assert md.prefill.wrapper._paged_kv_indptr_buf.data_ptr() != builder.paged_kv_indptr.gpu.data_ptr()


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_the_runner_plans_nothing_for_the_draft_layers_on_target_steps(cuda_graphs):
    assert all(row["planned"] for row in runner_builds_for_draft_layers(6, cuda_graphs))
    rows = runner_builds_for_draft_layers(7, cuda_graphs)
    assert len(rows) == 4 and not any(row["planned"] or row["plans_so_far"] for row in rows)


def test_unread_metadata_fails_loudly_if_a_forward_ever_reads_it():
    """The draft layers' real forward() (vLLM's FlashInferImpl, patched), handed the metadata of a target step that
    step 7 never plans: it stops at the wrapper, with the reason, before any kernel would run."""
    import torch
    from vllm.config import set_current_vllm_config

    with RoutingLab(7) as lab:
        builder, _, config = lab.builders["draft"]
        with set_current_vllm_config(config):
            md = builder.build(0, common_metadata(STANDARD_BATCHES[4]))  # a target verify batch
        assert md.prefill.wrapper is None and md.num_prefill_tokens == md.num_actual_tokens > 0
        target_builder = lab.builders["target"][0]
        assert target_builder._draft_layers_only is False and builder._draft_layers_only is True
        layer = lab.layers["draft"][0]
        heads, kv_heads, head_dim = builder.num_qo_heads, builder.num_kv_heads, builder.head_dim
        q = torch.zeros(md.num_actual_tokens, heads, head_dim, dtype=torch.bfloat16)
        kv = torch.zeros(md.num_actual_tokens, kv_heads, head_dim, dtype=torch.bfloat16)
        cache = torch.zeros(8, 2, 16, kv_heads, head_dim, dtype=torch.bfloat16)
        with set_current_vllm_config(config), pytest.raises(AssertionError, match="is never planned and must not be read"):
            layer.impl.forward(layer, q, kv, kv, cache, md, torch.empty_like(q))


@pytest.mark.step8
def test_over_a_decodes_draft_steps_only_step_8_plans_once_until_a_request_joins():
    from dflash_fi.lab.host_work import PLAN_REUSE_STEPS, plans_over_draft_steps

    six, seven, eight = (plans_over_draft_steps(step) for step in (6, 7, 8))
    assert all(r["plans"] == 1 for r in six + seven)
    assert [r["plans"] for r in eight] == [int(s.expects_plan) for s in PLAN_REUSE_STEPS]
    assert not any(r["empty_rows"] for r in six + seven)
    assert {r["empty_rows"] for r in eight} == {0, 1, 2, 3}  # one, two and three requests gone from a plan
    assert all(r["empty_rows_read_nothing"] for r in eight if r["empty_rows"])
    assert all(r["copied_from_gpu"] for r in six) and not any(r["copied_from_gpu"] for r in seven + eight)
    assert [r["page_table_launches"] for r in eight] == [1] * len(PLAN_REUSE_STEPS)
    assert all(r["page_table_launches"] is None for r in six + seven)
    assert all(r["reads_exact_page_table"] for r in six + seven + eight)


def test_the_host_work_tables_show_what_the_lab_returned():
    from dflash_fi.lab.host_tables import (bound_planning_table, draft_build_table, plan_reuse_table, plans_table,
                                           runner_table)

    built = {6: {"copied_from_gpu": True, "planned_indptr": [0, 4], "kernel_indptr": [0, 4], "max_token_per_sequence":
                 None, "disable_split_kv": False},
             7: {"copied_from_gpu": False, "planned_indptr": [0, 5], "kernel_indptr": [0, 4], "max_token_per_sequence":
                 16, "disable_split_kv": True}}
    assert "| `seq_lens` copied from the GPU (waits for it) | True | False |" in draft_build_table(built)
    runner = {s: [{"batch": "decode", "planned": s == 6}, {"batch": "verify", "planned": s == 6}] for s in (6, 7)}
    assert runner_table(runner).splitlines()[2:] == ["| decode | True | False |", "| verify | True | False |"]
    over = {8: [{"plans": 1, "copied_from_gpu": False, "page_table_launches": 1, "reads_exact_page_table": True,
                 "empty_rows": 0, "empty_rows_read_nothing": True},
                {"plans": 0, "copied_from_gpu": False, "page_table_launches": 1, "reads_exact_page_table": True,
                 "empty_rows": 2, "empty_rows_read_nothing": False}]}
    lines = plans_table(over).splitlines()
    assert "| `plan()` calls | 1 |" in lines and "| launches of step 8's page-table kernel | 2 |" in lines
    assert lines[-2:] == ["| steps that keep rows of requests that left | 1 |",
                          "| ... whose rows read no query and no page | 0 |"]
    bounded = [{"batch": b, "kv_dtype": kv, "copied_from_gpu": False, "bounds_vs_exact": e, "bounds_vs_reference": 2e-3,
                "exact_vs_reference": 2e-3} for kv in ("auto", "fp8") for b, e in (("a", 1e-4), ("b", 3e-4))]
    assert bound_planning_table(bounded).splitlines()[2:] == ["| auto | 2 | 0 | 3.0e-04 | 2.0e-03 | 2.0e-03 |",
                                                              "| fp8 | 2 | 0 | 3.0e-04 | 2.0e-03 | 2.0e-03 |"]
    reused = {"auto": [{"planned": p, "expects_plan": p, "page_table_exact": True, "empty_rows": e,
                        "writes_past_output": False, "reused_vs_fresh_unsplit": 0.0, "reused_vs_reference": 1e-3,
                        "fresh_vs_reference": 2e-3} for p, e in ((1, 0), (0, 0), (0, 1))]}
    assert plan_reuse_table(reused).splitlines()[2] == "| auto | 3 | 1 (1) | 3 | 1 | 0 | 0.0e+00 | 1.0e-03 | 2.0e-03 |"
