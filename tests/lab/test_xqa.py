"""Step 9 on the real FlashInferMetadataBuilder and FlashInferImpl.forward(): on SM 9.0 a DFlash draft step of
uniform blocks gets XQA metadata (no plan(), no page-table kernel) and forward() runs FlashInfer's real
`xqa_batch_decode_with_kv_cache`, whose kernel call is the lab's `XQADouble` (it checks the arguments as XQA takes
them and attends by the mask it is given); every shape XQA cannot take keeps step 8's path; target batches route as
at step 8. tests/gpu/test_xqa.py runs the same draft steps on the real kernel."""

import inspect
import re
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch

from dflash_fi.lab.batches import STANDARD_BATCHES, Batch, common_metadata
from dflash_fi.lab.host_work import PLAN_REUSE_STEPS, runner_builds_for_draft_layers
from dflash_fi.lab.routes import Prefill
from dflash_fi.lab.routing import RoutingLab, routing_report
from dflash_fi.reference.paged_attention import paged_attention_reference
from dflash_fi.steps import backend_module
from dflash_fi.vocabulary import BLACKWELL, DRAFT_BLOCK_SIZE, HOPPER, KV_PAGE_SIZE, RTX_4090

pytestmark = pytest.mark.step9
Q = DRAFT_BLOCK_SIZE
DRAFT = STANDARD_BATCHES[0]


def build(lab, batch, cad=None):
    from vllm.config import set_current_vllm_config

    builder, _, config = lab.builders[batch.role]
    cad = common_metadata(batch) if cad is None else cad
    with set_current_vllm_config(config):
        return builder.build(0, cad), cad


def forward(lab, md, cad, kv, q):
    """The draft's first vLLM Attention layer runs FlashInferImpl.forward() on this metadata."""
    from vllm.config import set_current_vllm_config

    layer = lab.layers["draft"][0]
    _, _, config = lab.builders["draft"]
    kv_heads = lab.builders["draft"][0].num_kv_heads
    out = torch.full_like(q, float("nan"))
    key = torch.zeros(q.shape[0], kv_heads, q.shape[2], dtype=q.dtype)
    with set_current_vllm_config(config):
        layer.impl.forward(layer, q, key, key, kv, md, out)
    return out


def xqa_calls(lab) -> list:
    import flashinfer.decode

    return flashinfer.decode.xqa.calls


def test_draft_steps_on_sm90_take_xqa_with_no_plan_and_no_page_table():
    """One decode's draft steps (the GPU test's: contexts growing, requests leaving and joining, short and long
    contexts): each build hands XQA the batch's own block table and exact seq_lens, nothing copied from the GPU, no
    wrapper made or planned, step 8's page-table kernel never launched, one mask made for every step."""
    with RoutingLab(9) as lab:
        builder = lab.builders["draft"][0]
        assert builder._draft_on_xqa
        masks = set()
        for index, step in enumerate(PLAN_REUSE_STEPS):
            md, cad = build(lab, step.batch)
            draft = md.prefill
            assert isinstance(draft, lab.module.XQADraft), index
            assert cad._seq_lens_cpu is None, index  # nothing was copied from the GPU
            assert draft.seq_lens.data_ptr() == cad.seq_lens.data_ptr() and draft.seq_lens.numel() == cad.num_reqs
            assert draft.block_tables.data_ptr() == cad.block_table_tensor.data_ptr()
            assert draft.block_len == Q and draft.mask.shape == (cad.num_reqs, Q, 2)
            assert (md.num_prefills, md.num_decodes, md.causal) == (cad.num_reqs, 0, False)
            masks.add(draft.mask.data_ptr())
        assert builder._noncausal_prefill_wrapper is None and builder._noncausal_plan_key is None
        assert lab.module._fill_paged_kv_kernel.launches == []
        assert len(masks) == 1 and list(builder._xqa_block_masks) == [Q]


def test_forward_runs_xqa_and_attends_over_each_draft_steps_exact_lengths():
    """FlashInferImpl.forward() through FlashInfer's own XQA wrapper: every draft step's output is the reference's
    non-causal attention over the exact lengths, and step 8's on the same step (both lab models of their kernels;
    tests/gpu compares the real ones)."""
    torch.manual_seed(0)
    cads = [common_metadata(s.batch) for s in PLAN_REUSE_STEPS]
    with RoutingLab(9) as lab:
        builder = lab.builders["draft"][0]
        hq, hkv, d = builder.num_qo_heads, builder.num_kv_heads, builder.head_dim
        kv = torch.randn(max(int(c.block_table_tensor.max()) for c in cads) + 4, 2, KV_PAGE_SIZE, hkv, d,
                         dtype=torch.bfloat16)
        queries = [torch.randn(c.num_actual_tokens, hq, d, dtype=torch.bfloat16) for c in cads]
        nine = []
        for index, (cad, q) in enumerate(zip(cads, queries)):
            md, _ = build(lab, PLAN_REUSE_STEPS[index].batch, cad)
            nine.append(forward(lab, md, cad, kv, q))
            assert xqa_calls(lab)[-1] == {"q_seq_len": Q, "batch": cad.num_reqs, "problems": []}
            ref = paged_attention_reference(q, kv.float(), cad.block_table_tensor, cad.seq_lens,
                                            cad.query_start_loc_cpu, causal=False)
            torch.testing.assert_close(nine[-1], ref, msg=f"draft step {index} on XQA against the reference")
        assert len(xqa_calls(lab)) == len(cads)
    with RoutingLab(8) as lab:
        for index, (cad, q) in enumerate(zip(cads, queries)):
            md, _ = build(lab, PLAN_REUSE_STEPS[index].batch, cad)
            torch.testing.assert_close(nine[index], forward(lab, md, cad, kv, q), msg=f"draft step {index}: 9 vs 8")


def test_the_double_reads_the_mask_so_a_causal_one_would_be_caught():
    """What the CPU tests catch: handed a causal mask, the XQA double attends causally, and forward() no longer
    matches the non-causal reference; handed a mask of the wrong shape or queries of the wrong layout, it refuses."""
    torch.manual_seed(0)
    with RoutingLab(9) as lab:
        builder = lab.builders["draft"][0]
        md, cad = build(lab, DRAFT)
        kv = torch.randn(int(cad.block_table_tensor.max()) + 1, 2, KV_PAGE_SIZE, builder.num_kv_heads,
                         builder.head_dim, dtype=torch.bfloat16)
        q = torch.randn(cad.num_actual_tokens, builder.num_qo_heads, builder.head_dim, dtype=torch.bfloat16)
        ref = paged_attention_reference(q, kv.float(), cad.block_table_tensor, cad.seq_lens, cad.query_start_loc_cpu,
                                        causal=False)
        causal_bits = torch.tril(torch.ones(Q, Q, dtype=torch.int64))  # query i sees block positions 0..i
        causal = (causal_bits * (1 << torch.arange(Q))).sum(-1).to(torch.int16).view(torch.uint16)
        md.prefill.mask = torch.stack([torch.stack([causal, torch.zeros_like(causal)], -1)] * cad.num_reqs)
        causal_ref = paged_attention_reference(q, kv.float(), cad.block_table_tensor, cad.seq_lens,
                                               cad.query_start_loc_cpu, causal=True)
        torch.testing.assert_close(forward(lab, md, cad, kv, q), causal_ref)
        assert not torch.allclose(causal_ref.float(), ref.float(), atol=1e-2)
        md.prefill.mask = md.prefill.mask[:, :, :1].contiguous()
        with pytest.raises(ValueError, match="packed uint16 mask"):
            forward(lab, md, cad, kv, q)
        md, _ = build(lab, DRAFT)
        with pytest.raises(ValueError, match="int32 page table"):
            md.prefill.block_tables = md.prefill.block_tables.long()
            forward(lab, md, cad, kv, q)


@pytest.mark.parametrize("block_len", [1, 8, 16, 31, 32, 33, 64])
def test_the_packed_mask_sets_every_bit_of_the_block_and_no_other(block_len):
    """Per query row, 32-bit words of 16-bit halves, little-endian: bit j is block position j (XQA's
    applyMaskFromInput), unpacked here with numpy, independently of how step 9 packs it."""
    mask = backend_module(9)._xqa_non_causal_block_mask(3, block_len, torch.device("cpu"))
    words = -(-block_len // 32)
    assert mask.dtype == torch.uint16 and mask.shape == (3, block_len, 2 * words) and mask.is_contiguous()
    bits = np.unpackbits(mask.view(torch.int16).numpy().view(np.uint8), axis=-1, bitorder="little")
    assert bits.shape == (3, block_len, 32 * words)
    assert (bits[..., :block_len] == 1).all() and (bits[..., block_len:] == 0).all()


def test_xqas_page_and_head_sizes_are_flashinfers():
    """The sizes step 9 sends to XQA are the ones FlashInfer's gen_xqa_module compiles (its refusals, read from its
    source), and no other."""
    from flashinfer.jit.xqa import gen_xqa_module

    source = inspect.getsource(gen_xqa_module)
    pages = re.search(r"if page_size not in \[([\d, ]+)\]", source).group(1)
    multiple, most, least = map(int, re.search(
        r"if head_dim % (\d+) != 0 or head_dim > (\d+) or head_dim < (\d+):", source).groups())
    module = backend_module(9)
    assert module.XQA_PAGE_SIZES == tuple(int(p) for p in pages.split(", "))
    assert list(module.XQA_HEAD_SIZES) == [h for h in range(1, 2 * most) if h % multiple == 0 and least <= h <= most]


def test_xqas_hopper_fp8_kernel_masks_short_blocks_causally_whatever_mask_it_is_given():
    """Why an FP8 cache keeps step 8's path on SM 9.0: there XQA runs mha_sm90.cu, which for speculative blocks with
    q_seq_len * head_group_ratio <= 32 (FlashInfer's jit sets SPEC_Q_SEQ_LEN; the embedded pair's 16 x 2 is one)
    swaps A and B, and that variant's mask is `(1 << (maskCol + 1)) - 1`: query maskCol sees block rows up to its
    own, a causal mask built in the kernel."""
    import flashinfer
    from flashinfer.jit.xqa import gen_xqa_module

    assert "if q_seq_len * head_group_ratio <= 32:" in inspect.getsource(gen_xqa_module)
    text = (Path(flashinfer.__file__).parent / "data" / "csrc" / "xqa" / "mha_sm90.cu").read_text()
    spec = text[text.index("#ifdef SPEC_Q_SEQ_LEN"):]
    assert spec[: spec.index("#endif")].count("#define SWAP_AB 1") == 1
    apply = text[text.index("__device__ inline void warpGrpApplyMask(Gemm0Acc& acc, SpecDec const& specDec"):]
    apply = apply[: apply.index("\n}\n")]
    assert "MaskType const bit_mask = (1ULL << (maskCol + 1)) - 1;" in apply and "specDec.mask" not in apply
    with RoutingLab(9) as lab:
        builder = lab.builders["draft"][0]
        assert Q * (builder.num_qo_heads // builder.num_kv_heads) <= 32


def _keeps_step8_path(lab, batch=DRAFT):
    md, _ = build(lab, batch)
    builder = lab.builders["draft"][0]
    assert type(md.prefill).__name__ == "FIPrefill" and md.prefill.wrapper is builder._noncausal_prefill_wrapper
    assert builder._noncausal_prefill_wrapper.plans[-1]["causal"] is False
    return md


@pytest.mark.parametrize("capability, kv_cache_dtype, trtllm", [
    (RTX_4090, "auto", False), (RTX_4090, "fp8", False),  # not an XQA GPU; the RTX 4090 + FP8 row
    (BLACKWELL, "auto", True), (HOPPER, "fp8", False)])  # left as it was; XQA's FP8 kernel masks causally
def test_other_gpus_and_fp8_caches_route_every_batch_as_step8(capability, kv_cache_dtype, trtllm):
    nine, eight = (routing_report(s, trtllm=trtllm, capability=capability, kv_cache_dtype=kv_cache_dtype).routes
                   for s in (9, 8))
    assert nine == eight
    with RoutingLab(9, capability, trtllm=trtllm, kv_cache_dtype=kv_cache_dtype) as lab:
        assert not lab.builders["draft"][0]._draft_on_xqa
        _keeps_step8_path(lab)


@pytest.mark.parametrize("attribute, value", [
    ("head_dim", 72), ("head_dim", 512), ("page_size", 8), ("page_size", 256), ("window_left", 127),
    ("logits_soft_cap", 30.0), ("kv_cache_dtype", torch.float32)])
def test_head_and_page_sizes_windows_and_soft_caps_xqa_cannot_take_keep_step8s_path(attribute, value):
    # These are fixed when a builder is made; set afterwards, with the gate asked again, they show each exclusion.
    with RoutingLab(9) as lab:
        builder = lab.builders["draft"][0]
        setattr(builder, attribute, value)
        builder._draft_on_xqa = builder._xqa_supports_draft_blocks()
        assert not builder._draft_on_xqa
        _keeps_step8_path(lab)


def test_batch_invariant_mode_keeps_step8s_path():
    from vllm import envs

    with RoutingLab(9) as lab:
        builder = lab.builders["draft"][0]
        assert builder._xqa_supports_draft_blocks()
        with mock.patch.object(envs, "VLLM_BATCH_INVARIANT", True, create=True):
            assert not builder._xqa_supports_draft_blocks()


def test_ragged_blocks_keep_step8s_path_and_uniform_short_blocks_take_xqa():
    """The pinned XQA takes one q_seq_len for all requests: a batch of uneven queries is planned (every time, as at
    step 8); uniform blocks of another length take XQA with a mask of their own."""
    ragged = Batch("ragged", (Q, 8, Q, 8), (37, 90, 150, 301), False, (3, 15, 0, 9))
    with RoutingLab(9) as lab:
        builder = lab.builders["draft"][0]
        _keeps_step8_path(lab, ragged)
        _keeps_step8_path(lab, ragged)
        assert len(builder._noncausal_prefill_wrapper.plans) == 2
        md, _ = build(lab, Batch("short blocks", (8,) * 3, (37, 90, 150), False))
        assert md.prefill.block_len == 8 and sorted(builder._xqa_block_masks) == [8]
        md, _ = build(lab, DRAFT)
        assert md.prefill.block_len == Q and sorted(builder._xqa_block_masks) == [8, Q]


@pytest.mark.parametrize("trtllm, cuda_graphs", [(False, False), (False, True), (True, False)])
def test_target_batches_route_as_at_step8(trtllm, cuda_graphs):
    nine, eight = (routing_report(s, trtllm=trtllm, cuda_graphs=cuda_graphs).routes for s in (9, 8))
    assert [r for r in nine if r.batch.role == "target"] == [r for r in eight if r.batch.role == "target"]
    assert all(r.prefill is (Prefill.XQA if not trtllm else eight[i].prefill)
               for i, r in enumerate(nine) if r.batch.role == "draft")


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_the_runner_still_plans_nothing_for_the_draft_layers(cuda_graphs):
    rows = runner_builds_for_draft_layers(9, cuda_graphs)
    assert rows and not any(row["planned"] or row["plans_so_far"] for row in rows)


def test_no_new_cuda_graph_claim():
    """vLLM 0.22.1's drafter captures piecewise graphs only: step 9 claims what step 8 claims, for the draft config
    and for the engine's."""
    from dflash_fi.lab.graphs import cudagraph_claims

    for capability, trtllm in ((RTX_4090, False), (HOPPER, False), (BLACKWELL, True)):
        nine, eight = (cudagraph_claims(s, capability, trtllm=trtllm) for s in (9, 8))
        assert nine.pop("step") == 9 and eight.pop("step") == 8
        assert nine == eight and nine["flashinfer_claim_draft_config"] == "UNIFORM_SINGLE_TOKEN_DECODE"


@pytest.mark.parametrize("flag, message", [("use_dcp", "decode context parallelism"), ("is_kvcache_nvfp4", "NVFP4")])
def test_dcp_and_nvfp4_are_refused_before_xqa(flag, message):
    with RoutingLab(9) as lab:
        builder = lab.builders["draft"][0]
        setattr(builder, flag, True)
        with pytest.raises(NotImplementedError, match=message):
            build(lab, DRAFT)
        assert xqa_calls(lab) == []
