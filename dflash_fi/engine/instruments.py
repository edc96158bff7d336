"""What an engine records about itself, from inside its worker (run there by `llm.collective_rpc`).

    attention_backends   each attention layer's backend, as vLLM selected it: target layers and draft layers
    cudagraph_state      the CUDA-graph mode the runner resolved, and the largest batch (tokens) it captured
    flash_attn_version   the FlashAttention version vLLM's `get_flash_attn_version` answers for this engine
    build_times          host time of the attention metadata builds per builder, keyed (role, backend, layers),
                         and how many were larger than the largest captured graph
    step_times           the intervals between the model runner's successive steps
    build_profiles       with DFLASH_FI_PROFILE_BUILDS set: where the builds spent their host time (cProfile)
    plan_watch           FlashInfer plan() calls per builder role, and those made while the same wrapper's previous
                         plan had not reached the GPU yet (docs/plan-race.md)
    async_scheduling     whether the engine schedules a step ahead of the GPU (vLLM's resolved setting)

Everything returned is plain data (it crosses `collective_rpc`); `dflash_fi.engine.records` types it.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import time

# Set (to anything) in the environment: every metadata build also runs under cProfile, and the record gets
# where the time went. Diagnosis only: the profiler slows the builds it watches.
PROFILE_BUILDS_ENV = "DFLASH_FI_PROFILE_BUILDS"


def _backend(cls) -> dict:
    """A backend class as data: its path, vLLM's enum name for it, and the dflash-fi step it was patched at."""
    module = sys.modules.get(cls.__module__)
    return {"qualname": f"{cls.__module__}.{cls.__qualname__}", "name": cls.get_name(),
            "step": getattr(module, "DFLASH_FI_STEP", None)}


def attention_backends(worker) -> dict[str, list[dict]]:
    """{"target": [...], "draft": [...]}: the distinct backends of the target's and the drafter's attention layers
    (the drafter names its own layers: `_draft_attn_layer_names`)."""
    from vllm.model_executor.layers.attention import Attention

    runner = worker.model_runner
    draft_layers = getattr(getattr(runner, "drafter", None), "_draft_attn_layer_names", None) or set()
    found: dict[str, dict[str, dict]] = {"target": {}, "draft": {}}
    for name, layer in runner.vllm_config.compilation_config.static_forward_context.items():
        if isinstance(layer, Attention):
            cls = layer.attn_backend if isinstance(layer.attn_backend, type) else type(layer.attn_backend)
            backend = _backend(cls)
            found["draft" if name in draft_layers else "target"][backend["qualname"]] = backend
    return {role: [found[role][q] for q in sorted(found[role])] for role in found}


def async_scheduling(worker) -> bool:
    return bool(worker.model_runner.vllm_config.scheduler_config.async_scheduling)


def cudagraph_state(worker) -> dict:
    compilation = worker.model_runner.compilation_config
    return {"mode": compilation.cudagraph_mode.name, "max_capture_size": compilation.max_cudagraph_capture_size}


def flash_attn_version(worker) -> int | None:
    """What vLLM's FlashAttention backend would run in this engine (None: no vllm-flash-attn here)."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backends.fa_utils import get_flash_attn_version

    with set_current_vllm_config(worker.model_runner.vllm_config):
        return get_flash_attn_version()


def _largest_graph(runner) -> int:
    return runner.compilation_config.max_cudagraph_capture_size or 0


def build_times(worker, install: bool = False) -> list[dict]:
    """[{"key": {role, backend, layers}, "builds", "seconds", "largest_tokens", "above_largest_graph"}] since the
    last call (then reset). `install=True` first wraps every builder's `build()`: the model runner's (one per
    attention group, the draft layers' group included) and the drafter's own."""
    runner = worker.model_runner
    if install and not hasattr(runner, "_build_times"):
        runner._build_times = times = {}
        profiles = runner._build_profiles = {} if os.environ.get(PROFILE_BUILDS_ENV) else None
        largest = _largest_graph(runner)

        def timed(builder, key: tuple):
            build = builder.build

            def timed_build(*args, **kwargs):
                metadata = kwargs.get("common_attn_metadata", args[1] if len(args) > 1 else None)
                profile = None if profiles is None else profiles.setdefault(key, cProfile.Profile())
                _building[0] = key[0]
                start = time.perf_counter()
                try:
                    if profile is not None:
                        profile.enable()
                    return build(*args, **kwargs)
                finally:
                    _building[0] = None
                    if profile is not None:
                        profile.disable()
                    entry = times.setdefault(key, [0, 0.0, 0, 0])
                    tokens = getattr(metadata, "num_actual_tokens", 0)
                    entry[0] += 1
                    entry[1] += time.perf_counter() - start
                    entry[2] = max(entry[2], tokens)
                    entry[3] += bool(largest) and tokens > largest
            builder.build = timed_build

        for groups in runner.attn_groups:
            for group in groups:
                for builder in group.metadata_builders:
                    timed(builder, ("target step", group.backend.get_name(), len(group.layer_names)))
        for group in getattr(getattr(runner, "drafter", None), "draft_attn_groups", []):
            for builder in group.metadata_builders:
                timed(builder, ("draft step", group.backend.get_name(), len(group.layer_names)))
    times = getattr(runner, "_build_times", {})
    snapshot = [{"key": {"role": k[0], "backend": k[1], "layers": k[2]}, "builds": e[0], "seconds": e[1],
                 "largest_tokens": e[2], "above_largest_graph": e[3]} for k, e in times.items()]
    times.clear()
    return snapshot


_building: list = [None]  # the role whose build() is running (set by build_times' wrapper): who calls plan()


# The head of a wrapper's pinned int workspace that a plan writes its schedule to (a DFlash batch's fits).
SCHEDULE_BYTES = 1 << 16


def plan_watch(worker, install: bool = False) -> list[dict]:
    """[{"role", "plans", "pending", "pending_changed"}] since the last call (then reset). `install=True` wraps the
    plan() of FlashInfer's prefill and decode wrappers (a graph decode wrapper's replans through FlashInfer's
    `fast_decode_plan`, which vLLM's `fast_plan_decode` calls after the first, are not watched). After each plan a CUDA event marks its copies on the stream; the next plan of the same wrapper
    asks it without waiting: not reached yet, that plan rewrote the pinned buffer the copy still reads
    (`pending`), and `pending_changed` if the schedule bytes it wrote differ from the previous plan's."""
    import torch

    if install and not hasattr(worker.model_runner, "_plan_watch"):
        worker.model_runner._plan_watch = counts = {}
        from flashinfer import BatchDecodeWithPagedKVCacheWrapper, BatchPrefillWithPagedKVCacheWrapper

        def watched(plan):
            def watched_plan(self, *args, **kwargs):
                capturing = torch.cuda.is_current_stream_capturing()
                entry = counts.setdefault(_building[0], [0, 0, 0])  # None: outside a build
                last = None if capturing else getattr(self, "_dflash_fi_last_plan", None)
                pending = last is not None and not last[0].query()
                out = plan(self, *args, **kwargs)
                entry[0] += 1
                if not capturing:
                    pinned = self._pin_memory_int_workspace_buffer
                    schedule = pinned[:SCHEDULE_BYTES].clone()
                    event = torch.cuda.Event()
                    event.record()
                    self._dflash_fi_last_plan = (event, schedule)
                    entry[1] += pending
                    entry[2] += pending and not torch.equal(schedule, last[1])
                return out
            return watched_plan
        for cls in (BatchPrefillWithPagedKVCacheWrapper, BatchDecodeWithPagedKVCacheWrapper):
            cls.plan = watched(cls.plan)
    counts = getattr(worker.model_runner, "_plan_watch", {})
    snapshot = [{"role": role, "plans": c[0], "pending": c[1], "pending_changed": c[2]} for role, c in counts.items()]
    counts.clear()
    return snapshot


def step_times(worker, install: bool = False) -> list[float]:
    """Milliseconds between successive calls of the model runner's `execute_model` since the last call (then
    reset): the engine's step period, which with CUDA graphs and asynchronous scheduling is what decoding costs."""
    runner = worker.model_runner
    if install and not hasattr(runner, "_step_starts"):
        runner._step_starts = starts = []
        execute = runner.execute_model

        def timed_execute(*args, **kwargs):
            starts.append(time.perf_counter())
            return execute(*args, **kwargs)
        runner.execute_model = timed_execute
    starts = getattr(runner, "_step_starts", [])
    intervals = [round((b - a) * 1000, 4) for a, b in zip(starts, starts[1:])]
    starts.clear()
    return intervals


def importable_path(file: str) -> str:
    """A source file as its package's path (`flashinfer/prefill.py`): relative to the sys.path entry holding it, or
    else to an install folder in its path (site-packages, or the GPU bundle's `/tmp/site/` in older records)."""
    import re

    roots = [p for p in sys.path if p and file.startswith(p.rstrip("/") + "/")]
    if roots:
        return file[len(max(roots, key=len).rstrip("/")) + 1:]
    return re.sub(r"^.*/(?:site-packages|site)/", "", file)


def reset_build_profiles(worker) -> None:
    """Forget what the profiled builds recorded so far: a process's first builds compile kernels (Triton's, once),
    which is not what a decoding step costs."""
    profiles = getattr(worker.model_runner, "_build_profiles", None)
    if profiles:
        profiles.clear()


def build_profiles(worker, top: int = 30) -> list[dict]:
    """Where the profiled builds spent their time: per builder, its builds and the `top` functions by own time
    ({"function", "file", "line", "calls", "own_s", "cumulative_s"}; files shortened after site-packages)."""
    out = []
    for (role, backend, layers), profile in (getattr(worker.model_runner, "_build_profiles", None) or {}).items():
        stats = pstats.Stats(profile).stats
        rows = sorted(stats.items(), key=lambda item: -item[1][2])[:top]
        out.append({"key": {"role": role, "backend": backend, "layers": layers},
                    "total_s": sum(v[2] for v in stats.values()),
                    "functions": [{"function": func, "file": importable_path(file), "line": line,
                                   "calls": calls, "own_s": own, "cumulative_s": cumulative}
                                  for (file, line, func), (_, calls, own, cumulative, _) in rows]})
    return out
