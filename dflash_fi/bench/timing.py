"""Timing on the GPU with FlashInfer's own helpers (`flashinfer.testing`), and host time by the clock.

Kernels: `bench_gpu_time_with_cudagraph`, the kernel called several times in one CUDA graph, CUDA events around each
replay, the median replay over the calls in it. Cold L2 cache: FlashInfer's rotating buffers, every call in the graph
on its own copy of the kernel's inputs and output; the graph holds at least as many calls as there are copies
(`calculate_rotation_count`), so that no call finds the last one's data in L2. A kernel that cannot be captured
falls back to `bench_gpu_time_with_cuda_event` (L2 flushed before each call) and says so. The copy bandwidth to
compare against: `bench_gpu_time_with_cuda_event` around a device-to-device copy far larger than L2.

Host time (what a CPU-bound engine step pays for a call, whatever the GPU does afterwards) is timed here by hand with
`time.perf_counter`: FlashInfer's helpers time the GPU, not the host. Each call is timed with the GPU idle before it,
or with a kernel that keeps the GPU busy queued before it (`torch.cuda._sleep`, its cycles per millisecond measured
once with CUDA events), so that a call that waits for the GPU shows it.
"""

from __future__ import annotations

import functools
import statistics
import time
from typing import Callable

CALLS_PER_GRAPH = 10
HOST_CALLS = 20


def copy_bandwidth_gbps(gib: int = 4) -> float:
    """Device-to-device copy of `gib` GiB: bytes read + written per second, median of 10."""
    import torch
    from flashinfer.testing import bench_gpu_time_with_cuda_event

    src = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    src.random_(0, 255)
    times = bench_gpu_time_with_cuda_event(torch.Tensor.copy_, input_args=(dst, src), dry_run_iters=2,
                                           repeat_iters=10, cold_l2_cache=False)
    del src, dst
    return 2 * (gib << 30) / (statistics.median(times) / 1000) / 1e9


def time_ms(call: Callable, args: tuple) -> tuple[float, str]:
    """Median milliseconds of one `call(*args)` on a cold L2 cache, and how it was timed ("cuda-graph" or "eager")."""
    import torch
    from flashinfer.testing import bench_gpu_time_with_cuda_event, bench_gpu_time_with_cudagraph
    from flashinfer.testing.utils import calculate_rotation_count

    call(*args)  # warm-up outside the graph: JIT loads, lazy allocations
    torch.cuda.synchronize()
    calls = max(CALLS_PER_GRAPH, calculate_rotation_count([a for a in args if torch.is_tensor(a) and a.is_cuda]))
    try:
        times = bench_gpu_time_with_cudagraph(call, input_args=args, num_iters_within_graph=calls, cold_l2_cache=True)
        return statistics.median(times), "cuda-graph"
    except RuntimeError:
        torch.cuda.synchronize()
        return statistics.median(bench_gpu_time_with_cuda_event(call, input_args=args, cold_l2_cache=True)), "eager"


@functools.cache
def _busy_cycles_per_ms() -> float:
    import torch

    torch.cuda._sleep(1 << 20)  # warm-up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(1 << 24)
    end.record()
    end.synchronize()
    return (1 << 24) / start.elapsed_time(end)


def host_ms(call: Callable[[int], object], calls: int = HOST_CALLS, warmup: int = 3, busy_ms: float = 0.0) -> float:
    """Median host milliseconds of `call(i)` for i in warmup .. warmup + calls - 1, after `call(0 .. warmup - 1)`.
    The GPU is idle before each call; with `busy_ms`, a kernel spinning that long is queued before each call instead
    (its time is not the call's: the clock starts once it is queued)."""
    import torch

    cycles = int(busy_ms * _busy_cycles_per_ms())
    times = []
    for i in range(warmup + calls):
        torch.cuda.synchronize()
        if cycles:
            torch.cuda._sleep(cycles)
        start = time.perf_counter()
        call(i)
        if i >= warmup:
            times.append((time.perf_counter() - start) * 1000)
    torch.cuda.synchronize()
    return statistics.median(times)
