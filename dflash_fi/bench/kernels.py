"""`dflash-fi bench kernels`: the draft's non-causal paged attention at DFlash shapes, kernel against kernel, and the
host time of a draft step's metadata build, builder against builder.

Every request brings one DFlash block (16 queries) and attends to its whole context in a paged KV cache
(pages of 16, scattered as vLLM scatters them). For each shape and KV dtype the same inputs go through:

    flashinfer-auto    BatchPrefillWithPagedKVCacheWrapper(backend="auto"): PR #43081's non-causal wrapper
    flashinfer-fa2     backend="fa2"          flashinfer-fa3   backend="fa3"
    dflash-fi-final    the wrapper exactly as the final step's builder makes and plans it (its
                       NON_CAUSAL_PREFILL_BACKEND; plan() told the block's query length)
    dflash-fi-final-graph  the same kernel in a CUDA-graph wrapper (`use_cuda_graph=True`, persistent index
                       buffers), as step 6 makes them for causal verify batches: what a draft block would cost
                       if a full graph replayed it (none does in vLLM 0.22.1)
    flashinfer-xqa     FlashInfer's XQA kernel as step 9 calls a draft block on SM 9.0 (`dflash_fi.bench.xqa`)
    vllm-flash-attn    vLLM's FlashAttention varlen kernel, what the FLASH_ATTN draft runs (FA3 on SM 9.0)

Rows whose `what` is "host ms per draft-step metadata build" time the builders instead (`dflash_fi.bench.builds`).

Timing: FlashInfer's `flashinfer.testing.bench_gpu_time_with_cudagraph`, on a cold L2 cache (`dflash_fi.bench.timing`
says how); the median time of one call is reported (a kernel that cannot be captured is timed eagerly instead, and
its row says "timing": "eager"). Error: the largest absolute difference from `dflash_fi.reference.paged_attention`
in fp32 on the very inputs the kernel read (None where the output holds NaN: an element the kernel never wrote).
Bandwidth: KV bytes read (each request's context, K and V, once) over the median time, and its share of
the device-to-device copy bandwidth measured in the same run (bytes read + written).
Plan: host ms of the wrapper's `plan()` for that shape (median of 20, the GPU idle before each), the CPU work step
7's builder does before every draft step; the FLASH_ATTN draft (`fast_build=True`) and XQA rows have no plan.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Callable, NamedTuple

from dflash_fi.bench.builds import host_build_rows
from dflash_fi.bench.timing import copy_bandwidth_gbps, host_ms, time_ms
from dflash_fi.vocabulary import DRAFT_BLOCK_SIZE, KV_CACHE_DTYPE_NAMES, KV_PAGE_SIZE

KERNELS = ("flashinfer-auto", "flashinfer-fa2", "flashinfer-fa3", "dflash-fi-final", "dflash-fi-final-graph",
           "flashinfer-xqa", "vllm-flash-attn")
CONTEXTS = (512, 2048, 8192)
BATCHES = (1, 8, 32)  # the engine benchmark's batches
HEAD_DIM = 128


@dataclass(frozen=True)
class Shape:
    batch: int
    context: int
    num_qo_heads: int
    num_kv_heads: int
    kv_dtype: str  # "auto" (bf16) or "fp8"
    query_len: int = DRAFT_BLOCK_SIZE


def shapes(embedded_heads: tuple[int, int], quick: bool = False) -> list[Shape]:
    heads = (embedded_heads, (32, 8))
    contexts, batches = ((2048,), (1, 16)) if quick else (CONTEXTS, BATCHES)
    return [Shape(b, c, hq, hkv, kv) for kv in ("auto", "fp8") for hq, hkv in heads for c in contexts for b in batches]


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


def max_abs_err(out, reference) -> float | None:
    """The largest absolute difference from the reference; None where `out` holds NaN (an element never written)."""
    err = (out.float() - reference).abs().max().item()
    return None if math.isnan(err) else err


def measure(shape: Shape, kernel: str, workspace, copy_gbps: float, reference_cache: dict) -> dict:
    import torch

    row = {"kernel": kernel, "kv_dtype": KV_CACHE_DTYPE_NAMES[shape.kv_dtype], "batch": shape.batch,
           "context": shape.context, "num_qo_heads": shape.num_qo_heads, "num_kv_heads": shape.num_kv_heads,
           "query_len": shape.query_len}
    inputs = reference_cache["inputs"]
    try:
        if kernel == "vllm-flash-attn":
            k = vllm_flash_attn_kernel(inputs)
        elif kernel == "flashinfer-xqa":
            from dflash_fi.bench.xqa import xqa_kernel  # it imports this module
            k = xqa_kernel(inputs)
        else:
            backend = {"flashinfer-auto": "auto", "flashinfer-fa2": "fa2", "flashinfer-fa3": "fa3"}.get(
                kernel, final_step_backend())
            k = flashinfer_kernel(inputs, backend, workspace, cuda_graph=kernel == "dflash-fi-final-graph",
                                  as_final_step=kernel == "dflash-fi-final")
        k.out.fill_(float("nan"))  # every element must be written
        k.run()
        torch.cuda.synchronize()
        if k.q.dtype not in reference_cache:
            reference_cache[k.q.dtype] = inputs.reference(k.q)
        err = max_abs_err(k.out, reference_cache[k.q.dtype])
        ms, timing = time_ms(k.call, k.args)
        row.update({"ran": k.ran, "timing": timing, "median_ms": round(ms, 5), "kv_bytes": inputs.kv_bytes,
                    "achieved_GBps": round(inputs.kv_bytes / ms / 1e6, 1),
                    "share_of_copy": round(inputs.kv_bytes / ms / 1e6 / copy_gbps, 3), "max_abs_err": err,
                    "plan_ms": round(host_ms(lambda i: k.plan()), 4) if k.plan else None})
    except Exception as exc:  # a kernel that cannot run here still gets its row
        row["error_type"], row["error"] = type(exc).__name__, str(exc).splitlines()[0][:300] if str(exc) else ""
    return row


def run_kernel_bench(quick: bool = False, print_fn=print) -> dict:
    import torch

    from dflash_fi.models import DEFAULT_TARGET
    from dflash_fi.stack import require_gpu, run_context

    gpu = require_gpu("dflash-fi bench kernels")
    config = json.loads((DEFAULT_TARGET / "config.json").read_text())
    embedded = (config["num_attention_heads"], config["num_key_value_heads"])
    copy_gbps = copy_bandwidth_gbps()
    print_fn(f"{gpu.name} (SM {gpu.sm}): device-to-device copy {copy_gbps:.0f} GB/s (read + written)")
    workspace = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    rows, started, grid = [], time.time(), shapes(embedded, quick)
    for shape in grid:
        cache = {"inputs": Inputs(shape)}
        for kernel in KERNELS:
            row = measure(shape, kernel, workspace, copy_gbps, cache)
            rows.append(row)
            print_fn(format_row(row))
        del cache
        torch.cuda.empty_cache()
    build_rows, build_errors = host_build_rows(grid, print_fn)
    return {"gpu": gpu.name, "compute_capability": gpu.sm, "copy_GBps": round(copy_gbps, 1),
            "final_step_backend": final_step_backend(), "seconds": round(time.time() - started, 1),
            "build_errors": build_errors,
            "method": __doc__.split("Timing:")[1].strip(), "rows": rows + build_rows, **run_context()}


def format_row(row: dict) -> str:
    shape = (f"{row['kv_dtype']:<8} b{row['batch']:<3} ctx {row['context']:<5} "
             f"heads {row['num_qo_heads']}/{row['num_kv_heads']}")
    if "error" in row:
        return f"{shape}  {row['kernel']:<16} ERROR {row.get('error_type', '')} {row['error'][:90]}"
    err = "NaN in the output (not all written)" if row["max_abs_err"] is None else f"{row['max_abs_err']:.2e}"
    return (f"{shape}  {row['kernel']:<16} ({row['ran']:<4}) {row['median_ms']:8.4f} ms "
            f"{row['achieved_GBps']:7.0f} GB/s ({row['share_of_copy']:.0%} of copy)  err {err}"
            + (f"  plan {row['plan_ms']:.3f} ms" if row.get("plan_ms") is not None else ""))
