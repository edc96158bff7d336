"""What an engine records about itself, from inside its worker (run there by `llm.collective_rpc`).

    attention_backends   each attention layer's backend class, as vLLM selected it
    cudagraph_state      the CUDA-graph mode the runner resolved, and the largest batch (tokens) it captured
    flash_attn_version   the FlashAttention version vLLM's `get_flash_attn_version` answers for this engine
    build_times          host time of the attention metadata builds per builder, and the target steps'
                         sizes (how many were larger than the largest captured graph)
    build_profiles       with DFLASH_FI_PROFILE_BUILDS set: where the builds spent their host time (cProfile)
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import time

# Set (to anything) in the environment: every metadata build also runs under cProfile, and the record gets
# where the time went. Diagnosis only: the profiler slows the builds it watches.
PROFILE_BUILDS_ENV = "DFLASH_FI_PROFILE_BUILDS"


def attention_backends(worker) -> dict[str, str]:
    """Attention layer name -> the backend class vLLM selected for it."""
    from vllm.model_executor.layers.attention import Attention

    context = worker.model_runner.vllm_config.compilation_config.static_forward_context
    return {
        name: f"{type(layer.attn_backend).__module__}.{layer.attn_backend.__qualname__}"
        if not isinstance(layer.attn_backend, type)
        else f"{layer.attn_backend.__module__}.{layer.attn_backend.__qualname__}"
        for name, layer in context.items()
        if isinstance(layer, Attention)
    }


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


def build_times(worker, install: bool = False) -> dict[str, list]:
    """{where: [builds, seconds, most tokens in one build, builds larger than the largest graph]} since the last
    call (then reset). `install=True` first wraps every builder's `build()`: the model runner's (one per
    attention group, the draft layers' group included) and the drafter's own."""
    runner = worker.model_runner
    if install and not hasattr(runner, "_build_times"):
        runner._build_times = times = {}
        profiles = runner._build_profiles = {} if os.environ.get(PROFILE_BUILDS_ENV) else None
        largest = _largest_graph(runner)

        def timed(builder, where):
            build = builder.build

            def timed_build(*args, **kwargs):
                metadata = kwargs.get("common_attn_metadata", args[1] if len(args) > 1 else None)
                profile = None if profiles is None else profiles.setdefault(where, cProfile.Profile())
                start = time.perf_counter()
                try:
                    if profile is not None:
                        profile.enable()
                    return build(*args, **kwargs)
                finally:
                    if profile is not None:
                        profile.disable()
                    entry = times.setdefault(where, [0, 0.0, 0, 0])
                    tokens = getattr(metadata, "num_actual_tokens", 0)
                    entry[0] += 1
                    entry[1] += time.perf_counter() - start
                    entry[2] = max(entry[2], tokens)
                    entry[3] += bool(largest) and tokens > largest
            builder.build = timed_build

        for groups in runner.attn_groups:
            for group in groups:
                for builder in group.metadata_builders:
                    timed(builder, f"target step, {group.backend.get_name()} ({len(group.layer_names)} layers)")
        for group in getattr(getattr(runner, "drafter", None), "draft_attn_groups", []):
            for builder in group.metadata_builders:
                timed(builder, f"draft step, {group.backend.get_name()} ({len(group.layer_names)} layers)")
    times = getattr(runner, "_build_times", {})
    snapshot = {where: list(entry) for where, entry in times.items()}
    times.clear()
    return snapshot


def build_profiles(worker) -> dict[str, str]:
    """Where the profiled builds spent their time, the 15 costliest functions per builder."""
    out = {}
    for where, profile in (getattr(worker.model_runner, "_build_profiles", None) or {}).items():
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(15)
        out[where] = text.getvalue()[-6000:]
    return out
