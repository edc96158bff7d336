"""The draft's own cost inside an engine, from its worker (run there by `llm.collective_rpc`, as `instruments`):
the draft layers' attention on the GPU, per draft forward, and which metadata the drafter's builds made (the route).

Where the events sit: vLLM 0.22.1 captures the drafter in piecewise CUDA graphs only
(`SpecDecodeBaseProposer.initialize_cudagraph_keys`), and attention is a splitting op: `unified_attention_with_output`
calls the layer's `impl.forward` eagerly between the captured pieces. So a CUDA event before and after each draft
layer's `impl.forward` is recorded on the stream in graph mode too. An event pair spans what the stream did between
them: the attention kernels, and any wait for the host to launch them. So that it spans the kernels only, a short GPU
sleep (`LEAD_US`) is queued before the start event: the stream is then behind the host, and the forward's host work
(its Python, FlashInfer's `run()`) is done before the stream reaches the start event. That holds where the host
takes less than `LEAD_US` from queueing the sleep to recording the end event: each forward's host time is measured,
and the forwards over the lead are counted (their events may hold host time too). Events are read after a
synchronize, at the end of a generate.
"""

from __future__ import annotations

import time

DRAFT_ROLE = "draft step"  # instruments' key for the drafter's builders
LEAD_US = 100  # longer than a draft layer's host work before its kernel, so the events bracket the kernel alone


def metadata_route(metadata) -> tuple[str, str | None]:
    """What one draft build made: (the prefill metadata's class, or the metadata's own where it has no prefill part,
    e.g. FlashAttentionMetadata; the FlashInfer wrapper's kernel backend, "fa2" or "fa3", where there is one)."""
    prefill = getattr(metadata, "prefill", None)
    if prefill is None:
        return type(metadata).__name__, None
    return type(prefill).__name__, getattr(getattr(prefill, "wrapper", None), "_backend", None)


def per_forward(layer_ms: list[float], layers: int) -> list[float]:
    """Each draft forward's attention ms: the layers' events in launch order, summed `layers` at a time (a
    forward's layers run one after another; a trailing incomplete forward is dropped)."""
    if layers <= 0:
        return []
    return [round(sum(layer_ms[i:i + layers]), 5) for i in range(0, len(layer_ms) - layers + 1, layers)]


def lead_cycles(torch, us: float = LEAD_US) -> int:
    """GPU clock cycles of `torch.cuda._sleep` that take `us` microseconds: the shortest of three timed sleeps (engines
    starting beside this one on the GPU can only lengthen one)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(3):
        torch.cuda.synchronize()
        start.record()
        torch.cuda._sleep(2_000_000)
        end.record()
        torch.cuda.synchronize()
        ms.append(start.elapsed_time(end))
    return int(2_000_000 / (min(ms) * 1000) * us)


def install(runner, torch, lead: int = 0) -> None:
    """Wrap each draft layer's `impl.forward` in a pair of timing events (not while a graph is being captured),
    `lead` cycles of GPU sleep queued before each start event."""
    names = sorted(getattr(getattr(runner, "drafter", None), "_draft_attn_layer_names", None) or ())
    runner._draft_events, runner._draft_layers, runner._draft_host_us = [], len(names), []
    context = runner.vllm_config.compilation_config.static_forward_context
    for name in names:
        impl = context[name].impl

        def timed_forward(*args, _forward=impl.forward, _events=runner._draft_events, _host=runner._draft_host_us,
                          **kwargs):
            if torch.cuda.is_current_stream_capturing():
                return _forward(*args, **kwargs)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            queued = time.perf_counter()
            if lead:
                torch.cuda._sleep(lead)
            start.record()
            out = _forward(*args, **kwargs)
            end.record()
            _host.append((time.perf_counter() - queued) * 1e6)
            _events.append((start, end))
            return out
        impl.forward = timed_forward


def draft_attention(worker, install_events: bool = False) -> dict:
    """{"layers", "forwards_ms": each draft forward's attention GPU ms, "routes": [{"metadata", "wrapper_backend",
    "builds"}]} since the last call (then reset). `install_events=True` first wraps the draft layers (`install`); the
    routes are counted by `instruments.build_times`' wrapper, installed before."""
    import torch

    runner = worker.model_runner
    if install_events and not hasattr(runner, "_draft_events"):
        install(runner, torch, lead_cycles(torch))
    return snapshot(runner, torch)


def snapshot(runner, torch) -> dict:
    """What `draft_attention` returns; the events are read after a synchronize, then both records are reset."""
    events, routes = getattr(runner, "_draft_events", []), getattr(runner, "_draft_routes", {})
    if events:
        torch.cuda.synchronize()
    layers, host = getattr(runner, "_draft_layers", 0), getattr(runner, "_draft_host_us", [])
    out = {"layers": layers, "forwards_ms": per_forward([start.elapsed_time(end) for start, end in events], layers),
           "routes": [{"metadata": k[0], "wrapper_backend": k[1], "num_reqs": k[2] if len(k) > 2 else None, "builds": n}
                      for k, n in routes.items()],
           "host_us_max": round(max(host), 1) if host else None, "over_lead": sum(h > LEAD_US for h in host)}
    events.clear()
    routes.clear()
    host.clear()
    return out
