"""Timing on the GPU: CUDA events around CUDA-graph replays, the copy bandwidth to compare against, and the
host time of CPU-side work (FlashInfer's `plan()`)."""

from __future__ import annotations

import statistics
import time

CALLS_PER_GRAPH = 10
REPLAYS = 30
HOST_CALLS = 20


def copy_bandwidth_gbps(gib: int = 4) -> float:
    """Device-to-device copy of `gib` GiB: bytes read + written per second, median of 10."""
    import torch

    src = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    src.random_(0, 255)
    times = []
    for _ in range(12):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    del src, dst
    return 2 * (gib << 30) / statistics.median(times[2:]) / 1e9


def time_ms(call) -> tuple[float, str]:
    """Median milliseconds of one call, and how it was timed: CALLS_PER_GRAPH calls captured in a CUDA graph
    and replayed REPLAYS times; if the kernel cannot be captured, the same calls launched eagerly."""
    import torch

    call()  # warm-up outside the graph: JIT loads, lazy allocations
    torch.cuda.synchronize()
    try:
        return _graph_time_ms(call), "cuda-graph"
    except RuntimeError:
        torch.cuda.synchronize()
        return _eager_time_ms(call), "eager"


def _eager_time_ms(call) -> float:
    import torch

    times = []
    for _ in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(CALLS_PER_GRAPH):
            call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / CALLS_PER_GRAPH)
    return statistics.median(times)


def _graph_time_ms(call) -> float:
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS_PER_GRAPH):
            call()
    times = []
    for _ in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / CALLS_PER_GRAPH)
    return statistics.median(times)


def host_ms(call) -> float:
    """Median host milliseconds of one call after three warm-ups, the GPU idle before each call: what a CPU-bound
    engine step pays for it, whatever the GPU does afterwards."""
    import torch

    times = []
    for i in range(3 + HOST_CALLS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        if i >= 3:
            times.append((time.perf_counter() - start) * 1000)
    torch.cuda.synchronize()
    return statistics.median(times)
