"""GPU-only (an SM 9.0 GPU for XQA): step 9's draft on FlashInfer's real XQA kernel against the fp32 reference and
against step 8's FA2 path, draft step by draft step as batch sizes and contexts change; the packed mask as the kernel
reads it; and FlashInfer's plan race in isolation (docs/plan-race.md). Runs alone: `pytest tests/gpu/test_xqa.py`.
The first XQA call JIT-compiles FlashInfer's XQA module (minutes without a cached build)."""

import json
import subprocess
import sys

import pytest
import torch

from dflash_fi.lab.batches import Batch, common_metadata
from dflash_fi.reference.paged_attention import paged_attention_reference
from dflash_fi.vocabulary import DRAFT_BLOCK_SIZE, HOPPER, KV_PAGE_SIZE

pytestmark = pytest.mark.gpu
Q = DRAFT_BLOCK_SIZE
_SENTINEL = 3.0  # fills the output past the batch's rows: nothing may be written there


def _sm90():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == HOPPER


needs_sm90 = pytest.mark.skipif(not _sm90(), reason="XQA serves DFlash drafts on SM 9.0 only (step 9)")


def _forward(lab, md, q, kv, rows_past: int):
    """The draft's first vLLM Attention layer: FlashInferImpl.forward() on this metadata, into an output with
    `rows_past` sentinel rows past the batch."""
    from vllm.config import set_current_vllm_config

    layer = lab.layers["draft"][0]
    builder, _, config = lab.builders["draft"]
    tokens = q.shape[0]
    out = torch.full((tokens + rows_past, *q.shape[1:]), _SENTINEL, dtype=q.dtype, device=q.device)
    key = torch.zeros(tokens, builder.num_kv_heads, q.shape[2], dtype=q.dtype, device=q.device)
    with set_current_vllm_config(config):
        layer.impl.forward(layer, q, key, key, kv, md, out)
    return out[:tokens].float(), bool((out[tokens:] != _SENTINEL).any())


def _outputs(step: int, cads, queries, kv, build_check=None):
    from vllm.config import set_current_vllm_config

    from dflash_fi.lab.routing import RoutingLab

    outputs = []
    with RoutingLab(step, on_gpu=True) as lab:
        builder, _, config = lab.builders["draft"]
        for index, (cad, q) in enumerate(zip(cads, queries)):
            with set_current_vllm_config(config):
                md = builder.build(0, cad)
            if build_check is not None:
                build_check(lab, builder, md, index)
            outputs.append(_forward(lab, md, q, kv, Q))
        torch.cuda.synchronize()
    return outputs


@needs_sm90
@pytest.mark.step9
def test_xqa_draft_steps_match_the_reference_and_step8():
    """One decode's draft steps (tests/gpu's shared PLAN_REUSE_STEPS: contexts growing a block per step, requests
    leaving and joining, short contexts and 4000-8200-token ones, bounds above the exact lengths) through step 9's
    real builder and FlashInferImpl.forward() on XQA, then step 8's on FA2, on the same queries and cache. Step 9
    plans nothing and writes nothing past the batch; each step's output is the fp32 reference's, as close as
    step 8's is, and step 8's up to bf16 rounding."""
    from dflash_fi.lab.host_work import PLAN_REUSE_STEPS
    from dflash_fi.lab.routing import RoutingLab

    torch.manual_seed(0)
    cads = [common_metadata(s.batch, device="cuda", first_page=3) for s in PLAN_REUSE_STEPS]

    def on_xqa(lab, builder, md, index):
        assert type(md.prefill).__name__ == "XQADraft", (
            f"draft step {index} did not take XQA on this SM 9.0 GPU: {type(md.prefill).__name__}")
        assert builder._noncausal_prefill_wrapper is None, f"draft step {index}: step 9 made a FlashInfer wrapper"

    with RoutingLab(9, on_gpu=True) as lab:
        builder = lab.builders["draft"][0]
        hq, hkv, d = builder.num_qo_heads, builder.num_kv_heads, builder.head_dim
    kv = torch.randn(max(int(c.block_table_tensor.max()) for c in cads) + 8, 2, KV_PAGE_SIZE, hkv, d,
                     dtype=torch.bfloat16, device="cuda")
    queries = [torch.randn(c.num_actual_tokens, hq, d, dtype=torch.bfloat16, device="cuda") for c in cads]
    nine = _outputs(9, cads, queries, kv, on_xqa)
    eight = _outputs(8, cads, queries, kv)
    rows = []
    for index, (cad, q, (x, x_past), (f, f_past)) in enumerate(zip(cads, queries, nine, eight)):
        ref = paged_attention_reference(q, kv.float(), cad.block_table_tensor, cad.seq_lens.cpu(),
                                        cad.query_start_loc_cpu, causal=False).float()
        rows.append({"step": index, "batch": PLAN_REUSE_STEPS[index].batch.name, "xqa_writes_past": x_past,
                     "fa2_writes_past": f_past, "xqa_vs_fa2": (x - f).abs().max().item(),
                     "xqa_vs_reference": (x - ref).abs().max().item(),
                     "fa2_vs_reference": (f - ref).abs().max().item()})
    table = "\n".join(map(str, rows))
    assert not any(r["xqa_writes_past"] or r["fa2_writes_past"] for r in rows), (
        "a kernel wrote past the batch's rows of the output:\n" + table)
    for r in rows:  # outputs ~1e-2 here (as tests/gpu/test_kernels.py): bf16 rounding ~1e-3, a wrong key set ~3e-2
        assert r["xqa_vs_reference"] <= 2 * r["fa2_vs_reference"] + 1e-3, (
            f"draft step {r['step']} on XQA is further from the reference than step 8's FA2 is:\n" + table)
        assert r["xqa_vs_fa2"] < 5e-3, f"draft step {r['step']}: XQA and step 8's FA2 differ past rounding:\n" + table


def _xqa(q, kv, cad, mask):
    from flashinfer.decode import xqa_batch_decode_with_kv_cache

    from dflash_fi.steps import backend_module

    out = torch.empty_like(q)
    xqa_batch_decode_with_kv_cache(q, kv, backend_module(9)._get_trtllm_gen_workspace_buffer(),
                                   cad.block_table_tensor, cad.seq_lens, cad.max_seq_len,
                                   bmm1_scale=q.shape[-1] ** -0.5, out=out, kv_layout="NHD", q_len_per_req=Q,
                                   mask=mask)
    return out.float()


@needs_sm90
@pytest.mark.step9
@pytest.mark.parametrize("heads", [(4, 2), (32, 8)], ids=["embedded pair", "Qwen3-4B shape"])
@pytest.mark.parametrize("num_reqs", [1, 8, 32])
def test_xqa_reads_the_packed_mask_as_step9_packs_it(heads, num_reqs):
    """FlashInfer's XQA directly, on blocks of 16 queries: with step 9's mask it computes the non-causal
    reference; with a causal mask packed the same way, the causal one (so the kernel reads the bits where step 9
    puts them). Contexts short and long, one across a page boundary."""
    from dflash_fi.steps import backend_module

    torch.manual_seed(num_reqs)
    hq, hkv = heads
    d = 128
    contexts = tuple((37, 4000, 150, 1023, 8174, 15, 600, 2047)[r % 8] + r for r in range(num_reqs))
    cad = common_metadata(Batch("xqa", (Q,) * num_reqs, contexts, False), device="cuda", first_page=1)
    kv = torch.randn(int(cad.block_table_tensor.max()) + 1, 2, KV_PAGE_SIZE, hkv, d, dtype=torch.bfloat16,
                     device="cuda")
    q = torch.randn(cad.num_actual_tokens, hq, d, dtype=torch.bfloat16, device="cuda")
    mask = backend_module(9)._xqa_non_causal_block_mask(num_reqs, Q, torch.device("cuda"))
    causal_bits = torch.tril(torch.ones(Q, Q, dtype=torch.int64)) * (1 << torch.arange(Q))
    causal_row = torch.stack([causal_bits.sum(-1), torch.zeros(Q, dtype=torch.int64)], -1).to(torch.int16)
    causal = causal_row.expand(num_reqs, Q, 2).contiguous().cuda().view(torch.uint16)
    refs = {c: paged_attention_reference(q, kv.float(), cad.block_table_tensor, cad.seq_lens.cpu(),
                                         cad.query_start_loc_cpu, causal=c).float() for c in (False, True)}
    non_causal, as_causal = _xqa(q, kv, cad, mask), _xqa(q, kv, cad, causal)
    errors = {"non-causal mask vs non-causal reference": (non_causal - refs[False]).abs().max().item(),
              "causal mask vs causal reference": (as_causal - refs[True]).abs().max().item(),
              "non-causal vs causal reference": (refs[False] - refs[True]).abs().max().item()}
    assert errors["non-causal mask vs non-causal reference"] < 2e-2, errors
    assert errors["causal mask vs causal reference"] < 2e-2, errors
    assert errors["non-causal vs causal reference"] > 2 * errors["non-causal mask vs non-causal reference"], (
        "the two answers are too close to tell the masks apart", errors)


def _race(case: str) -> tuple[int | None, dict | None, str]:
    """The case's exit status (None: it hung past the limit and was killed), its result and its stderr's tail."""
    try:
        child = subprocess.run([sys.executable, "-m", "dflash_fi.lab.plan_race", case], capture_output=True,
                               text=True, timeout=180)
    except subprocess.TimeoutExpired:  # a run on the wrong schedule may spin instead of faulting
        return None, None, "killed after 180 s"
    found = [line for line in child.stdout.splitlines() if line.startswith("{")]
    try:
        result = json.loads(found[-1]) if child.returncode == 0 and found else None
    except json.JSONDecodeError:
        result = None
    return child.returncode, result, child.stderr[-3000:]


@pytest.mark.step4
@pytest.mark.step8
def test_flashinfers_plan_race_in_isolation():
    """A wrapper planned again before its queued work has executed hands that work the new plan; planned again after
    the GPU finished, the run keeps its own (dflash_fi/lab/plan_race.py, each case in a child process: a run that
    read the wrong schedule may fault). This shows the mechanism only; whether vLLM's engines reach it is
    docs/plan-race.md."""
    rc, probe, err = _race("probe")
    assert rc == 0 and probe, f"the probe-only experiment failed (rc {rc}): {err}"
    assert probe["gpu_was_busy_at_second_plan"], (
        "the GPU had finished sleeping before the second plan(): SLEEP_CYCLES is too short here, or plan() waited "
        f"for the GPU; the experiment shows nothing: {probe}")
    assert probe["bytes_where_plans_differ"] > 0, f"the two plans wrote the same schedule: {probe}"
    assert probe["run_read_second_plan"], (
        "work queued after plan A read A's schedule although the wrapper was planned again before it executed: "
        f"FlashInfer no longer shares the pinned buffer across plans, and docs/plan-race.md must say so: {probe}")
    rc, control, err = _race("control")
    assert rc == 0 and control, f"the control failed (rc {rc}): {err}"
    assert control["run_read_first_plan"] and control["rows_not_written"] == 0 and control["max_abs_err"] < 2e-2, (
        f"planned again only after the GPU finished, the run should keep its plan and be right: {control}")
    rc, raced, err = _race("run")  # A's run with B's schedule: a fault or hang (rc != 0) or a wrong answer, never A's
    assert rc != 0 or (raced is not None and (raced["rows_not_written"] > 0 or raced["max_abs_err"] >= 2e-2)), (
        f"A's run, queued before plan B, computed A's answer: the race did not reach the run: {raced} {err}")


@pytest.mark.step8
def test_the_engines_plan_watch_sees_a_plan_made_while_the_last_ones_copy_is_queued():
    """`instruments.plan_watch`, which the walkthrough's engines run (the race checks), on a real wrapper: two plans
    behind a sleeping GPU, for two batches, count as pending and changed; after a synchronize, as neither."""
    from types import SimpleNamespace

    from flashinfer import BatchDecodeWithPagedKVCacheWrapper, BatchPrefillWithPagedKVCacheWrapper

    from dflash_fi.engine import instruments
    from dflash_fi.lab import plan_race

    worker = SimpleNamespace(model_runner=SimpleNamespace())
    originals = {cls: cls.plan for cls in (BatchPrefillWithPagedKVCacheWrapper, BatchDecodeWithPagedKVCacheWrapper)}
    try:
        instruments.plan_watch(worker, install=True)
        heads = (4, 2, 128)
        contexts = (37, 90, 150, 304)
        a, b = (plan_race._plan_args(plan_race._batch(n, contexts)) for n in (4, 2))
        wrapper = BatchPrefillWithPagedKVCacheWrapper(torch.empty(128 << 20, dtype=torch.uint8, device="cuda"),
                                                      "NHD", backend="fa2")
        plan_race._plan(wrapper, a, heads)  # JIT-loads outside what is counted
        torch.cuda.synchronize()
        instruments.plan_watch(worker)
        torch.cuda._sleep(plan_race.SLEEP_CYCLES // 4)
        plan_race._plan(wrapper, a, heads)
        plan_race._plan(wrapper, b, heads)
        raced = instruments.plan_watch(worker)
        torch.cuda.synchronize()
        plan_race._plan(wrapper, a, heads)
        calm = instruments.plan_watch(worker)
    finally:
        for cls, plan in originals.items():
            cls.plan = plan
    assert raced == [{"role": None, "plans": 2, "pending": 1, "pending_changed": 1}], raced
    assert calm == [{"role": None, "plans": 1, "pending": 0, "pending_changed": 0}], calm
