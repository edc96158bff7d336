"""The kernels `dflash-fi bench kernels` times, by name (`REGISTRY`): one DFlash draft block per request, its whole
context in a paged KV cache, and each kernel ready to launch on the same inputs.

    flashinfer-auto    BatchPrefillWithPagedKVCacheWrapper(backend="auto"): PR #43081's non-causal wrapper
    flashinfer-fa2     backend="fa2"          flashinfer-fa3   backend="fa3"
    dflash-fi-final    the wrapper exactly as the final step's builder makes and plans it (its
                       NON_CAUSAL_PREFILL_BACKEND; plan() told the block's query length)
    dflash-fi-final-graph  the same kernel in a CUDA-graph wrapper (`use_cuda_graph=True`, persistent index
                       buffers), as step 6 makes them for causal verify batches: what a draft block would cost
                       if a full graph replayed it (none does in vLLM 0.22.1)
    flashinfer-xqa     FlashInfer's XQA kernel as step 9 calls a draft block on SM 9.0: no plan, the mask made once
    vllm-flash-attn    vLLM's FlashAttention varlen kernel, what the FLASH_ATTN draft runs (FA3 on SM 9.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

from dflash_fi.errors import BadInput
from dflash_fi.vocabulary import DRAFT_BLOCK_SIZE, KV_PAGE_SIZE

HEAD_DIM = 128


@dataclass(frozen=True)
class Shape:
    batch: int
    context: int
    num_qo_heads: int
    num_kv_heads: int
    kv_dtype: str  # "auto" (bf16) or "fp8"
    query_len: int = DRAFT_BLOCK_SIZE


class Inputs:
    """One shape's tensors: bf16 queries, a paged KV cache in vLLM's NHD layout, the page table."""

    def __init__(self, shape: Shape, seed: int = 0):
        import torch

        g = torch.Generator(device="cuda").manual_seed(seed)
        self.shape = shape
        pages_per_req = -(-shape.context // KV_PAGE_SIZE)
        num_pages = shape.batch * pages_per_req + 8
        self.q = torch.randn(shape.batch * shape.query_len, shape.num_qo_heads, HEAD_DIM, device="cuda",
                             dtype=torch.bfloat16, generator=g)
        kv_shape = (num_pages, KV_PAGE_SIZE, shape.num_kv_heads, HEAD_DIM)
        k = torch.randn(kv_shape, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(kv_shape, device="cuda", dtype=torch.bfloat16, generator=g)
        if shape.kv_dtype == "fp8":
            k, v = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
        self.k, self.v = k, v
        pages = torch.randperm(num_pages, device="cuda", generator=g)[: shape.batch * pages_per_req].to(torch.int32)
        self.block_table = pages.view(shape.batch, pages_per_req)
        self.seq_lens = torch.full((shape.batch,), shape.context, dtype=torch.int32, device="cuda")
        self.qo_indptr = torch.arange(shape.batch + 1, dtype=torch.int32, device="cuda") * shape.query_len
        self.kv_indptr = torch.arange(shape.batch + 1, dtype=torch.int32, device="cuda") * pages_per_req
        last = shape.context - (pages_per_req - 1) * KV_PAGE_SIZE
        self.last_page_len = torch.full((shape.batch,), last, dtype=torch.int32, device="cuda")
        self.kv_bytes = 2 * shape.batch * shape.context * shape.num_kv_heads * HEAD_DIM * k.element_size()
        self.scale = HEAD_DIM ** -0.5

    def reference(self, q=None):
        """fp32 attention of (q, K, V) as the kernels read them: every query sees its whole context."""
        import torch

        from dflash_fi.reference.paged_attention import paged_attention_reference

        kv = torch.stack([self.k.float(), self.v.float()], dim=1)
        return paged_attention_reference((self.q if q is None else q).float(), kv, self.block_table, self.seq_lens,
                                         self.qo_indptr, causal=False, sm_scale=self.scale)


class Kernel(NamedTuple):
    """One kernel ready to launch on an `Inputs`: `call(*args)` writes `out` from `q` (the queries as the kernel
    reads them), `run()` is that call on these inputs; `ran` names the kernel that runs; `plan()` is the host-side
    work before each launch, if any. `args` are (q, k, v, out): timing gives each call in a graph its own copy."""
    run: Callable[[], None]
    out: object
    q: object
    ran: str
    plan: Callable[[], None] | None
    call: Callable
    args: tuple


class NotBuilt(Exception):
    """FlashInfer's own checks say this backend has no kernel for these dtypes."""


def flashinfer_kernel(inputs: Inputs, backend: str, workspace, cuda_graph: bool = False,
                      as_final_step: bool = False) -> Kernel:
    """A planned FlashInfer non-causal wrapper; `cuda_graph`: in CUDA-graph mode, on persistent buffers;
    `as_final_step`: planned as the final step's builder plans a draft block (its query length given)."""
    import torch
    from flashinfer import BatchPrefillWithPagedKVCacheWrapper
    from flashinfer.utils import PosEncodingMode, is_fa3_backend_supported

    s = inputs.shape
    if backend == "fa3" and not is_fa3_backend_supported(PosEncodingMode.NONE.value, False, False, torch.bfloat16,
                                                         inputs.k.dtype):
        raise NotBuilt(f"FlashInfer's FA3 has no kernel for bf16 queries on a {inputs.k.dtype} KV cache "
                       "(flashinfer.utils.is_fa3_backend_supported is False); vLLM keeps FlashInfer queries in bf16")
    buffers = {}
    if cuda_graph:  # as step 6 makes it: indptrs sized for this batch, room for every page of the cache
        buffers = dict(use_cuda_graph=True, qo_indptr_buf=torch.empty_like(inputs.qo_indptr),
                       paged_kv_indptr_buf=torch.empty_like(inputs.kv_indptr),
                       paged_kv_indices_buf=torch.empty(inputs.k.shape[0], dtype=torch.int32, device="cuda"),
                       paged_kv_last_page_len_buf=torch.empty_like(inputs.last_page_len))
    wrapper = BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend=backend, **buffers)
    qo_indptr, kv_indptr, last_page_len = inputs.qo_indptr.cpu(), inputs.kv_indptr.cpu(), inputs.last_page_len.cpu()

    def plan():  # as vLLM's builder calls it: host-side indptrs, page indices already on the GPU
        wrapper.plan(qo_indptr, kv_indptr, inputs.block_table.flatten(), last_page_len, s.num_qo_heads,
                     s.num_kv_heads, HEAD_DIM, KV_PAGE_SIZE, causal=False, sm_scale=inputs.scale,
                     q_data_type=torch.bfloat16, kv_data_type=inputs.k.dtype, o_data_type=torch.bfloat16,
                     max_token_per_sequence=s.query_len if as_final_step else None)
    plan()
    args = (inputs.q, inputs.k, inputs.v, torch.empty_like(inputs.q))

    def call(q, k, v, out):
        wrapper.run(q, (k, v), out=out)
    return Kernel(lambda: call(*args), args[3], inputs.q, wrapper._backend, plan, call, args)


def vllm_flash_attn_kernel(inputs: Inputs) -> Kernel:
    """vLLM's FlashAttention varlen call as its FLASH_ATTN backend makes it (fp8 KV: fp8 queries, unit scales)."""
    import torch
    from vllm.v1.attention.backends.fa_utils import get_flash_attn_version
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    s = inputs.shape
    version = get_flash_attn_version()
    q, descale = inputs.q, {}
    if s.kv_dtype == "fp8":
        q = inputs.q.to(torch.float8_e4m3fn)
        ones = torch.ones(s.batch, s.num_kv_heads, dtype=torch.float32, device="cuda")
        descale = {"q_descale": ones, "k_descale": ones, "v_descale": ones}
    args = (q, inputs.k, inputs.v, torch.empty_like(inputs.q))

    def call(q, k, v, out):
        flash_attn_varlen_func(q=q, k=k, v=v, out=out, cu_seqlens_q=inputs.qo_indptr,
                               max_seqlen_q=s.query_len, seqused_k=inputs.seq_lens, max_seqlen_k=s.context,
                               softmax_scale=inputs.scale, causal=False, block_table=inputs.block_table,
                               fa_version=version, **descale)
    return Kernel(lambda: call(*args), args[3], q, f"fa{version}", None, call, args)


def final_step_backend() -> str:
    from dflash_fi.steps import FINAL_STEP, backend_module

    return backend_module(FINAL_STEP).NON_CAUSAL_PREFILL_BACKEND


def xqa_kernel(inputs: Inputs) -> Kernel:
    """FlashInfer's XQA on a draft block, as step 9's forward() calls it: no plan, the mask made once."""
    import torch
    from flashinfer.decode import xqa_batch_decode_with_kv_cache

    from dflash_fi.steps import backend_module

    s, step9 = inputs.shape, backend_module(9)
    if s.kv_dtype != "auto":
        raise NotBuilt("step 9 runs FP8 caches on FA2: XQA's Hopper FP8 kernel masks short blocks causally")
    mask = step9._xqa_non_causal_block_mask(s.batch, s.query_len, torch.device("cuda"))
    workspace = step9._get_trtllm_gen_workspace_buffer()
    kv = torch.stack([inputs.k, inputs.v], dim=1)  # vLLM's cache: [pages, 2, page, heads, dim]
    args = (inputs.q, kv, torch.empty_like(inputs.q))

    def call(q, kv, out):
        xqa_batch_decode_with_kv_cache(q, kv, workspace, inputs.block_table, inputs.seq_lens, s.context,
                                       bmm1_scale=inputs.scale, out=out, kv_layout="NHD", q_len_per_req=s.query_len,
                                       mask=mask)
    return Kernel(lambda: call(*args), args[2], inputs.q, "xqa", None, call, args)


@dataclass(frozen=True)
class KernelEntry:
    """One kernel of the benchmark: how to make it on a shape's inputs (and the FlashInfer workspace), whether it is
    FlashInfer's, and whether a draft can run it in vLLM 0.22.1 (the CUDA-graph wrapper: no full graph replays a
    draft block)."""

    name: str
    make: Callable  # (Inputs, workspace) -> Kernel
    flashinfer: bool
    draft_reachable: bool = True


def _wrapper(backend: str | None, cuda_graph: bool = False, as_final_step: bool = False) -> Callable:
    def make(inputs: Inputs, workspace) -> Kernel:
        return flashinfer_kernel(inputs, backend or final_step_backend(), workspace, cuda_graph, as_final_step)
    return make


REGISTRY = {e.name: e for e in (
    KernelEntry("flashinfer-auto", _wrapper("auto"), flashinfer=True),
    KernelEntry("flashinfer-fa2", _wrapper("fa2"), flashinfer=True),
    KernelEntry("flashinfer-fa3", _wrapper("fa3"), flashinfer=True),
    KernelEntry("dflash-fi-final", _wrapper(None, as_final_step=True), flashinfer=True),
    KernelEntry("dflash-fi-final-graph", _wrapper(None, cuda_graph=True), flashinfer=True, draft_reachable=False),
    KernelEntry("flashinfer-xqa", lambda inputs, workspace: xqa_kernel(inputs), flashinfer=True),
    KernelEntry("vllm-flash-attn", lambda inputs, workspace: vllm_flash_attn_kernel(inputs), flashinfer=False),
)}


def kernel_entry(name: str) -> KernelEntry:
    """The registry's entry; BadInput for a name it does not hold."""
    if name not in REGISTRY:
        raise BadInput(f"kernel {name!r}: the kernel benchmark times {', '.join(REGISTRY)}")
    return REGISTRY[name]
