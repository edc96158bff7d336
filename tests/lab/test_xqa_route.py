"""Step 9's route rule, `use_xqa_for_draft`: derived from the committed kernel rows (XQA against the kept-plan FA2
kernel at every measured shape), no condition of it idle, and the real builder routing each draft step as it says,
across the switch between the two paths within one decode."""

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from dflash_fi.lab.batches import Batch, common_metadata
from dflash_fi.lab.draft_route import ShapeRoute, final_draft_route, route_by_shape
from dflash_fi.lab.routes import Prefill
from dflash_fi.lab.routing import RoutingLab
from dflash_fi.reference.paged_attention import paged_attention_reference
from dflash_fi.steps import backend_module
from dflash_fi.vocabulary import BLACKWELL, DRAFT_BLOCK_SIZE, HOPPER, KV_PAGE_SIZE, RTX_4090

pytestmark = pytest.mark.step9
Q = DRAFT_BLOCK_SIZE
ROWS = Path(__file__).parents[2] / "evidence" / "nvidia-h200.rows.json.gz"
MIN_REQS = backend_module(9).XQA_DRAFT_MIN_REQS


def committed_kernels() -> tuple[tuple[int, int], list[dict]]:
    kernels = json.loads(gzip.decompress(ROWS.read_bytes()))["bench-kernels"]
    return tuple(map(int, kernels["compute_capability"].split("."))), kernels["rows"]


def test_at_every_measured_shape_the_rule_picks_the_faster_kernel_or_one_level_with_it():
    """The committed `bench kernels` rows (an H200): wherever both XQA and FA2 were timed, the rule's pick took no
    longer, or no more than the tie band longer (`draft_route.TIE_MS`/`TIE_SHARE`, the resolution #39 asks of the
    benchmark); FP8 caches, where XQA was not built, keep FA2. Both paths are picked somewhere."""
    capability, rows = committed_kernels()
    shapes = route_by_shape(rows, capability)
    assert capability == HOPPER and len(shapes) >= 30 and all(s.fa2_ms > 0 for s in shapes)
    wrong = [s for s in shapes if not (s.faster or s.level)]
    assert not wrong, "the rule picks the slower kernel at:\n" + "\n".join(map(str, wrong))
    assert {s.route for s in shapes} == {Prefill.XQA, Prefill.NON_CAUSAL}
    assert all(s.route is Prefill.NON_CAUSAL for s in shapes if s.xqa_ms is None)
    assert sum(s.level for s in shapes) <= 2, [s for s in shapes if s.level]  # the band excuses a tie, not a trend


@pytest.mark.parametrize("dropped", ["head ratio", "batch"])
def test_each_condition_of_the_rule_is_needed(dropped):
    """Without the head-ratio bound or the batch bound the rule would pick the slower kernel, past the tie band, at
    some measured shape: neither condition is idle."""
    capability, rows = committed_kernels()
    module = backend_module(9)
    loosened = {"head ratio": ("XQA_DRAFT_MAX_HEAD_RATIO", 1 << 10), "batch": ("XQA_DRAFT_MIN_REQS", 1)}[dropped]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, *loosened)
        shapes = route_by_shape(rows, capability)
    assert any(not (s.faster or s.level) for s in shapes), f"the rule without its {dropped} bound still holds"


def test_the_tie_band_is_measured_against_the_other_kernel():
    tie = ShapeRoute("bf16", 4, 2, 8, 512, xqa_ms=0.0113, fa2_ms=0.0101, route=Prefill.XQA)
    assert not tie.faster and tie.level
    slow = replace(tie, xqa_ms=0.0101 + 0.0051)
    assert not slow.faster and not slow.level
    assert replace(tie, route=Prefill.NON_CAUSAL).faster


@pytest.mark.parametrize("capability, kv_cache_dtype, heads, num_reqs, route", [
    (HOPPER, "auto", (4, 2), 32, Prefill.XQA), (HOPPER, "bf16", (4, 2), 40, Prefill.XQA),
    (HOPPER, "auto", (4, 2), 31, Prefill.NON_CAUSAL), (HOPPER, "auto", (4, 2), 8, Prefill.NON_CAUSAL),
    (HOPPER, "auto", (32, 8), 32, Prefill.NON_CAUSAL), (HOPPER, "auto", (16, 8), 32, Prefill.XQA),
    (HOPPER, "fp8", (4, 2), 32, Prefill.NON_CAUSAL), (HOPPER, "fp8-e4m3", (4, 2), 32, Prefill.NON_CAUSAL),
    (RTX_4090, "auto", (4, 2), 32, Prefill.NON_CAUSAL), (BLACKWELL, "auto", (4, 2), 32, Prefill.NON_CAUSAL)])
def test_final_draft_route_asks_step9s_rule(capability, kv_cache_dtype, heads, num_reqs, route):
    assert final_draft_route(capability, kv_cache_dtype, *heads, num_reqs) is route


def _batch(num_reqs: int, grown: int = 0) -> Batch:
    contexts = tuple((37, 90, 150, 301, 15, 600, 1, 222, 480, 64)[r % 10] + r + grown for r in range(num_reqs))
    return Batch(f"DFlash draft: {num_reqs} requests", (Q,) * num_reqs, contexts, False,
                 tuple(3 * r % Q for r in range(num_reqs)))


@pytest.mark.parametrize("heads", [None, (32, 8)], ids=["embedded pair", "Qwen3-4B heads"])
def test_the_builder_routes_each_draft_step_as_the_rule_says(heads):
    """The real builder on SM 9.0, batch sizes around the rule's bound: XQA exactly where use_xqa_for_draft says so,
    for the embedded pair's heads (4/2) and with the Qwen3-4B shape's ratio (32/8) set on the same builder."""
    from vllm.config import set_current_vllm_config

    with RoutingLab(9) as lab:
        builder, _, config = lab.builders["draft"]
        if heads:
            builder.num_qo_heads, builder.num_kv_heads = heads
        routes = {}
        for n in (1, 8, MIN_REQS - 1, MIN_REQS, MIN_REQS + 3):
            with set_current_vllm_config(config):
                md = builder.build(0, common_metadata(_batch(n)))
            routes[n] = Prefill.XQA if type(md.prefill).__name__ == "XQADraft" else Prefill.NON_CAUSAL
        expected = {n: final_draft_route(HOPPER, "auto", builder.num_qo_heads, builder.num_kv_heads, n)
                    for n in routes}
    assert routes == expected
    assert set(routes.values()) == ({Prefill.NON_CAUSAL} if heads else {Prefill.XQA, Prefill.NON_CAUSAL})


def test_one_decode_switches_between_the_paths_and_every_step_attends_right():
    """Requests join and leave across the rule's batch bound: the XQA steps touch no wrapper, the FA2 steps keep the
    plan where step 8 would (fewer requests: rows emptied), and every step's output is the reference's."""
    from vllm.config import set_current_vllm_config

    torch.manual_seed(0)
    m = MIN_REQS
    plan = [(m + 2, 0, Prefill.XQA, 0), (m - 6, Q, Prefill.NON_CAUSAL, 1), (m - 6, 2 * Q, Prefill.NON_CAUSAL, 0),
            (m + 1, 3 * Q, Prefill.XQA, 0), (m - 8, 4 * Q, Prefill.NON_CAUSAL, 0), (m, 5 * Q, Prefill.XQA, 0),
            (m - 5, 6 * Q, Prefill.NON_CAUSAL, 1)]
    cads = [common_metadata(_batch(n, grown)) for n, grown, _, _ in plan]
    with RoutingLab(9) as lab:
        builder, _, config = lab.builders["draft"]
        layer = lab.layers["draft"][0]
        hq, hkv, d = builder.num_qo_heads, builder.num_kv_heads, builder.head_dim
        kv = torch.randn(max(int(c.block_table_tensor.max()) for c in cads) + 1, 2, KV_PAGE_SIZE, hkv, d,
                         dtype=torch.bfloat16)
        for index, ((n, _, route, plans), cad) in enumerate(zip(plan, cads)):
            wrapper = builder._noncausal_prefill_wrapper
            before = len(wrapper.plans) if wrapper else 0
            with set_current_vllm_config(config):
                md = builder.build(0, cad)
                q = torch.randn(cad.num_actual_tokens, hq, d, dtype=torch.bfloat16)
                out = torch.full_like(q, float("nan"))
                key = torch.zeros(q.shape[0], hkv, d, dtype=q.dtype)
                layer.impl.forward(layer, q, key, key, kv, md, out)
            took = Prefill.XQA if type(md.prefill).__name__ == "XQADraft" else Prefill.NON_CAUSAL
            wrapper = builder._noncausal_prefill_wrapper
            assert (took, (len(wrapper.plans) if wrapper else 0) - before) == (route, plans), index
            ref = paged_attention_reference(q, kv.float(), cad.block_table_tensor, cad.seq_lens,
                                            cad.query_start_loc_cpu, causal=False)
            torch.testing.assert_close(out, ref, msg=f"draft step {index} ({n} requests, {route.name})")
