"""`dflash-fi bench kernels`: the draft's non-causal paged attention at DFlash shapes, kernel against kernel, and the
host time of a draft step's metadata build, builder against builder.

Every request brings one DFlash block (16 queries) and attends to its whole context in a paged KV cache (pages of
16, scattered as vLLM scatters them). For each shape and KV dtype the same inputs go through every kernel of the
registry (`dflash_fi.proof.bench.kernel_calls`). Builder rows time the host side of a draft step's metadata build
instead (`dflash_fi.proof.bench.builds`). How each row is measured: `METHOD`, which the results file keeps.
"""

from __future__ import annotations

import json
import math
import time

from dflash_fi.proof.bench.builds import host_build_rows
from dflash_fi.proof.bench.kernel_calls import REGISTRY, Inputs, Shape, final_step_backend, kernel_entry
from dflash_fi.proof.bench.timing import copy_bandwidth_gbps, host_ms, time_ms
from dflash_fi.vocabulary import KV_CACHE_DTYPE_NAMES

KERNELS = tuple(REGISTRY)
METHOD = """Timing: FlashInfer's `flashinfer.testing.bench_gpu_time_with_cudagraph`, on a cold L2 cache (`dflash_fi.proof.bench.timing`
says how); the median time of one call is reported (a kernel that cannot be captured is timed eagerly instead, and
its row says "timing": "eager"). Error: the largest absolute difference from `dflash_fi.reference.paged_attention`
in fp32 on the very inputs the kernel read (None where the output holds NaN: an element the kernel never wrote).
Bandwidth: KV bytes read (each request's context, K and V, once) over the median time, and its share of
the device-to-device copy bandwidth measured in the same run (bytes read + written).
Plan: host ms of the wrapper's `plan()` for that shape (median of 20, the GPU idle before each), the CPU work step
7's builder does before every draft step; the FLASH_ATTN draft (`fast_build=True`) and XQA rows have no plan."""
CONTEXTS = (512, 2048, 8192)
BATCHES = (1, 8, 32)  # the engine benchmark's batches


def shapes(embedded_heads: tuple[int, int], quick: bool = False) -> list[Shape]:
    heads = (embedded_heads, (32, 8))
    contexts, batches = ((2048,), (1, 16)) if quick else (CONTEXTS, BATCHES)
    return [Shape(b, c, hq, hkv, kv) for kv in ("auto", "fp8") for hq, hkv in heads for c in contexts for b in batches]


def max_abs_err(out, reference) -> float | None:
    """The largest absolute difference from the reference; None where `out` holds NaN (an element never written)."""
    err = (out.float() - reference).abs().max().item()
    return None if math.isnan(err) else err


def measure(shape: Shape, kernel: str, workspace, copy_gbps: float, reference_cache: dict) -> dict:
    import torch

    row = {"kernel": kernel, "kv_dtype": KV_CACHE_DTYPE_NAMES[shape.kv_dtype], "batch": shape.batch,
           "context": shape.context, "num_qo_heads": shape.num_qo_heads, "num_kv_heads": shape.num_kv_heads,
           "query_len": shape.query_len}
    inputs, entry = reference_cache["inputs"], kernel_entry(kernel)  # an unknown name is refused, not defaulted
    try:
        k = entry.make(inputs, workspace)
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
            "method": METHOD, "rows": rows, "build_rows": build_rows, **run_context()}


def format_row(row: dict) -> str:
    shape = (f"{row['kv_dtype']:<8} b{row['batch']:<3} ctx {row['context']:<5} "
             f"heads {row['num_qo_heads']}/{row['num_kv_heads']}")
    if "error" in row:
        return f"{shape}  {row['kernel']:<16} ERROR {row.get('error_type', '')} {row['error'][:90]}"
    err = "NaN in the output (not all written)" if row["max_abs_err"] is None else f"{row['max_abs_err']:.2e}"
    return (f"{shape}  {row['kernel']:<16} ({row['ran']:<4}) {row['median_ms']:8.4f} ms "
            f"{row['achieved_GBps']:7.0f} GB/s ({row['share_of_copy']:.0%} of copy)  err {err}"
            + (f"  plan {row['plan_ms']:.3f} ms" if row.get("plan_ms") is not None else ""))
