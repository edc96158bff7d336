"""The real FlashInferMetadataBuilder.build() of every step, on the embedded pair (FlashInfer wrappers are doubles)."""

import copy
from dataclasses import replace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_fi.lab.batches import DRAFT, MIXED, PREFILL, VERIFY, Batch, common_metadata
from dflash_fi.lab.routes import Decode, Prefill
from dflash_fi.lab.routing import RoutingLab, routing_report
from dflash_fi.steps import STEPS, step_module
from dflash_fi.vocabulary import BLACKWELL, DRAFT_BLOCK_SIZE, HOPPER, RTX_4090


def draft_row(report):
    return next(r for r in report.routes if r.batch == DRAFT)


def target_rows(report):
    return [replace(r, metadata_causal=None) for r in report.routes if r.role == "target"]


@pytest.fixture(scope="module")
def reports():
    return {(step, trtllm): routing_report(step, trtllm=trtllm) for step in STEPS for trtllm in (False, True)}


@pytest.mark.step0
def test_step0_rejects_flashinfer_for_the_draft(reports):
    row = draft_row(reports[0, False])
    assert row.selection_refused.cls is ValueError  # vLLM's selector, at engine start
    assert all(r.selection_refused is None for r in reports[0, False].routes if r.role == "target")
    # Forced onto stock FlashInfer anyway, the draft is planned causal and fails DFlash's check.
    assert row.plan_causal is True and row.dflash_check_passed is False


@pytest.mark.step1
def test_step1_accepts_flashinfer_but_fails_dflash_check(reports):
    row = draft_row(reports[1, False])
    assert row.selection_refused is None
    assert row.metadata_causal is None  # no causal field yet
    assert row.dflash_check.cls is AssertionError and row.dflash_check_passed is False


@pytest.mark.step2
@pytest.mark.parametrize("trtllm", [False, True])
def test_step2_all_prefill_check_passes_but_planned_causal(reports, trtllm):
    row = draft_row(reports[2, trtllm])
    assert (row.num_decodes, row.num_prefills) == (0, len(DRAFT.query_lens))
    assert row.metadata_causal is False and row.dflash_check_passed is True
    if trtllm:  # Blackwell: stock treats the 16-token draft as a spec decode; now it is prefill, on TRTLLM (causal)
        assert row.prefill is Prefill.TRTLLM
        assert draft_row(reports[1, True]).decode is Decode.TRTLLM
    else:
        assert row.prefill is Prefill.SHARED_CAUSAL and row.plan_causal is True


@pytest.mark.step3
def test_step3_separate_wrapper_planned_non_causal(reports):
    row = draft_row(reports[3, False])
    assert row.prefill is Prefill.NON_CAUSAL and row.plan_causal is False
    assert row.dflash_check_passed is True and row.prefill_kernel == "auto"
    # ...but without the gating of step 4, Blackwell still sends the draft to (causal) TRTLLM prefill.
    assert draft_row(reports[3, True]).prefill is Prefill.TRTLLM


@pytest.mark.step4
def test_step4_gates_trtllm_for_non_causal_and_warns_once(reports):
    row = draft_row(reports[4, True])
    assert row.prefill is Prefill.NON_CAUSAL and row.decode is None
    assert row.plan_causal is False and row.dflash_check_passed is True
    # Two draft batches were built, one warning: logged by step 4's own hunk, from build().
    [warning] = reports[4, True].step_warnings
    assert warning.hunk in step_module(4).HUNKS and warning.hunk not in step_module(3).HUNKS
    assert warning.function == "build"
    assert all([w.hunk for w in r.step_warnings] == [warning.hunk] for (s, t), r in reports.items() if s >= 4 and t)
    assert reports[4, False].warnings == ()
    assert all(r.warnings == () for (s, _), r in reports.items() if s < 4)


@pytest.mark.step5
@pytest.mark.parametrize("trtllm", [False, True])
def test_step5_draft_runs_fa2_and_nothing_else_moves(reports, trtllm):
    five, four = draft_row(reports[5, trtllm]), draft_row(reports[4, trtllm])
    assert five.prefill_kernel == "fa2" and four.prefill_kernel == "auto"
    assert replace(five, prefill_kernel=None) == replace(four, prefill_kernel=None)


@pytest.mark.parametrize("trtllm", [False, True])
def test_causal_target_batches_routed_exactly_as_stock(reports, trtllm):
    for step in STEPS:
        assert target_rows(reports[step, trtllm]) == target_rows(reports[0, trtllm]), step


@pytest.mark.step6
@pytest.mark.parametrize("step", [s for s in STEPS if s >= 6])
def test_step6_with_cuda_graphs_gives_causal_uniform_batches_graph_wrappers(step):
    report = routing_report(step, cuda_graphs=True)
    rows = {r.batch: r for r in report.routes}
    verify = rows[VERIFY]
    assert verify.prefill is Prefill.CUDA_GRAPH and verify.graph_batch_size == len(VERIFY.query_lens)
    assert verify.plan_causal is True and verify.prefill_kernel == "auto"
    # A DFlash draft block keeps the plain non-causal wrapper: no full graph replays it in vLLM 0.22.1. From step 9
    # SM 9.0 runs it on XQA, unplanned (tests/lab/test_xqa.py).
    draft = rows[DRAFT]
    if step >= 9:
        assert draft.prefill is Prefill.XQA and draft.plan_causal is None
    else:
        assert draft.prefill is Prefill.NON_CAUSAL
        assert draft.plan_causal is False and draft.prefill_kernel == "fa2"
    assert draft.dflash_check_passed is True
    # Batches a full graph never holds keep the shared wrappers: prompts, mixed batches.
    assert rows[PREFILL].prefill is rows[MIXED].prefill is Prefill.SHARED_CAUSAL


@pytest.mark.step6
def test_step6_without_graphs_routes_as_step5():
    assert draft_row(routing_report(6)) == draft_row(routing_report(5))
    assert target_rows(routing_report(6)) == target_rows(routing_report(5))


@pytest.mark.step6
def test_step6_graph_wrappers_are_one_per_batch_size_for_causal_batches_only():
    with RoutingLab(6, HOPPER, cuda_graphs=True) as lab:
        draft_builder, target_builder = lab.builders["draft"][0], lab.builders["target"][0]
        for n in (1, 3, 1, 2):
            lab.route(Batch("draft", (DRAFT_BLOCK_SIZE,) * n, (40,) * n, False))
            lab.route(Batch("verify", (DRAFT_BLOCK_SIZE,) * n, (40,) * n, True))
        lab.route(Batch("padded verify", (DRAFT_BLOCK_SIZE, DRAFT_BLOCK_SIZE, 0), (40, 50, 0), True))
        assert draft_builder._prefill_wrappers_cudagraph == {}
        assert sorted(target_builder._prefill_wrappers_cudagraph) == [1, 2, 3]  # padding request included
        big = Batch("too big for a graph", (DRAFT_BLOCK_SIZE,) * 40, (40,) * 40, True)
        assert lab.route(big).prefill is Prefill.SHARED_CAUSAL


@pytest.mark.step1
@pytest.mark.step6
def test_the_rtx_4090_with_fp8_kv_routes_the_draft_non_causal():
    report = routing_report(6, capability=RTX_4090, kv_cache_dtype="fp8")
    draft = draft_row(report)
    assert draft.selection_refused is None and draft.plan_causal is False
    assert draft.prefill_kernel == "fa2" and draft.dflash_check_passed is True


def _metadata_snapshot(cad):
    return {k: (v.clone() if torch.is_tensor(v) else copy.copy(v)) for k, v in vars(cad).items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) if torch.is_tensor(a[k]) else a[k] == b[k] for k in a)


@pytest.mark.step3
@pytest.mark.parametrize("step", [s for s in STEPS if s >= 3])
@pytest.mark.parametrize("case", ["draft batch", "shared prefix", "empty batch"])
def test_dcp_refuses_a_non_causal_batch_before_touching_anything(step, case):
    batch = Batch("empty", (), (), False) if case == "empty batch" else DRAFT
    prefix = 16 if case == "shared prefix" else 0
    with RoutingLab(step, BLACKWELL, trtllm=True, dcp=True) as lab:
        builder, _, config = lab.builders["draft"]
        cad = common_metadata(batch)
        before_cad, before_buffers = _metadata_snapshot(cad), [b.np.copy() for b in (
            builder.paged_kv_indptr, builder.paged_kv_indices, builder.paged_kv_last_page_len)]
        from vllm.config import set_current_vllm_config

        with set_current_vllm_config(config), pytest.raises(NotImplementedError, match="decode context parallelism"):
            builder.build(prefix, cad)
        assert _same(_metadata_snapshot(cad), before_cad)  # the caller's metadata (seq_lens_cpu too) unchanged
        assert all((b.np == saved).all() for b, saved in zip(
            (builder.paged_kv_indptr, builder.paged_kv_indices, builder.paged_kv_last_page_len), before_buffers))
        assert lab.warnings.records == [] and builder._noncausal_prefill_wrapper is None


@pytest.mark.step3
def test_nvfp4_refuses_a_non_causal_batch_but_not_a_causal_one():
    # An NVFP4 FlashInferImpl allocates CUDA buffers when constructed, so the builder is made for a bf16
    # cache and then given the one flag its NVFP4 branch reads.
    from vllm.config import set_current_vllm_config

    with RoutingLab(3, BLACKWELL) as lab:
        builder, _, config = lab.builders["draft"]
        builder.is_kvcache_nvfp4 = True
        with set_current_vllm_config(config):
            with pytest.raises(NotImplementedError, match="no non-causal prefill for an NVFP4 KV cache"):
                builder.build(0, common_metadata(DRAFT))
            assert builder._get_prefill_wrapper(causal=True) is not None  # causal batches unaffected


def test_a_pretended_blackwell_leaves_no_kv_layout_behind():
    """vLLM's selector sets the KV layout a backend requires (HND for FlashInfer on SM 10.x) for the whole process;
    a lab on a pretended Blackwell must not hand it to the next lab (whose forward() would permute the cache so)."""
    from vllm.v1.attention.backends import utils

    before = utils._KV_CACHE_LAYOUT_OVERRIDE
    with RoutingLab(8, BLACKWELL, trtllm=True):
        assert utils._KV_CACHE_LAYOUT_OVERRIDE == "HND"
    assert utils._KV_CACHE_LAYOUT_OVERRIDE == before


def test_a_failing_lab_leaves_nothing_installed():
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.registry import _ATTN_OVERRIDES, AttentionBackendEnum

    platform_class, override = type(current_platform), _ATTN_OVERRIDES.get(AttentionBackendEnum.FLASHINFER)
    with pytest.raises(Exception):
        with RoutingLab(4, HOPPER, kv_cache_dtype="not-a-dtype"):
            pass
    assert type(current_platform) is platform_class
    assert _ATTN_OVERRIDES.get(AttentionBackendEnum.FLASHINFER) == override


batches = st.lists(
    st.tuples(st.booleans(), st.integers(1, 40), st.integers(0, 700)), min_size=1, max_size=8,
).map(lambda reqs: sorted(reqs, key=lambda r: (not r[0], r[1])))  # runner order: decodes first


@pytest.fixture(scope="module")
def labs():
    with RoutingLab(4, BLACKWELL, trtllm=True) as step4, RoutingLab(0, BLACKWELL, trtllm=True) as stock:
        yield step4, stock


@pytest.mark.step4
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=batches, draft_reqs=st.integers(1, 8), draft_ctx=st.lists(st.integers(1, 900), min_size=8, max_size=8))
def test_property_step4_non_causal_never_decode_trtllm_or_cascade(labs, requests, draft_reqs, draft_ctx):
    step4, stock = labs
    draft = Batch("draft", (DRAFT_BLOCK_SIZE,) * draft_reqs, tuple(draft_ctx[:draft_reqs]), False)
    row = step4.route(draft)
    assert row.num_decodes == 0 and row.decode is None and row.cascade is False
    assert row.prefill is Prefill.NON_CAUSAL and row.plan_causal is False
    assert row.metadata_causal is False and row.dflash_check_passed is True

    target = Batch("target", tuple(1 if is_decode else q for is_decode, q, _ in requests),
                   tuple(c for _, _, c in requests), True)
    ours, theirs = step4.route(target), stock.route(target)
    assert ours.metadata_causal is True and theirs.metadata_causal is None
    assert replace(ours, metadata_causal=None) == theirs


def test_routing_cli_prints_clean_json():
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "dflash_fi.cli", "routing", "--step", "4", "--trtllm", "--json"],
                         capture_output=True, text=True, check=True).stdout
    report = json.loads(out)  # vLLM's own logging goes to a log file
    assert report["capability"] == "10.0" and len(report["step_warnings"]) == 1
    assert report["routes"][0]["prefill"] == Prefill.NON_CAUSAL.name
