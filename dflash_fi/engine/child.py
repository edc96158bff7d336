"""One vLLM engine for one RunSpec (started by dflash_fi.engine.runner in a fresh process).

    python -m dflash_fi.engine.child SPEC.json RESULT.json

It records what vLLM selected (each layer's attention backend, the CUDA-graph mode the runner resolved),
where a failure happened, and for each generate: the tokens, the time, vLLM's own spec-decode counters, and
the host time of the attention metadata builds per decoding step.
"""

from __future__ import annotations

import cProfile
import hashlib
import io
import json
import os
import pstats
import sys
import time
import traceback
from pathlib import Path

# Set (to anything) in the environment: every metadata build also runs under cProfile, and the record gets
# where the time went. Diagnosis only: the profiler slows the builds it watches.
PROFILE_BUILDS_ENV = "DFLASH_FI_PROFILE_BUILDS"


def _attention_backends(worker) -> dict[str, str]:
    """Runs on the worker: attention layer name -> the backend class vLLM selected for it."""
    from vllm.model_executor.layers.attention import Attention

    context = worker.model_runner.vllm_config.compilation_config.static_forward_context
    return {
        name: f"{type(layer.attn_backend).__module__}.{layer.attn_backend.__qualname__}"
        if not isinstance(layer.attn_backend, type)
        else f"{layer.attn_backend.__module__}.{layer.attn_backend.__qualname__}"
        for name, layer in context.items()
        if isinstance(layer, Attention)
    }


def _cudagraph_mode(worker) -> str:
    """Runs on the worker: the CUDA-graph mode vLLM's model runner resolved for this engine."""
    return worker.model_runner.compilation_config.cudagraph_mode.name


def _build_times(worker, install: bool = False) -> dict[str, list]:
    """Runs on the worker: host time spent in attention metadata builds, {where: [calls, seconds]} since the
    last call (then reset). `install=True` first wraps every builder's `build()` with a timer: the model
    runner's (one per attention group, the draft layers' group included) and the drafter's own."""
    runner = worker.model_runner
    if install and not hasattr(runner, "_build_times"):
        runner._build_times = times = {}

        profiles = runner._build_profiles = {} if os.environ.get(PROFILE_BUILDS_ENV) else None

        def timed(builder, where):
            build = builder.build

            def timed_build(*args, **kwargs):
                profile = None if profiles is None else profiles.setdefault(where, cProfile.Profile())
                start = time.perf_counter()
                try:
                    if profile is not None:
                        profile.enable()
                    return build(*args, **kwargs)
                finally:
                    if profile is not None:
                        profile.disable()
                    entry = times.setdefault(where, [0, 0.0])
                    entry[0] += 1
                    entry[1] += time.perf_counter() - start
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


def _build_profiles(worker) -> dict[str, str]:
    """Runs on the worker: where the profiled builds spent their time, the 15 costliest functions per builder."""
    out = {}
    for where, profile in (getattr(worker.model_runner, "_build_profiles", None) or {}).items():
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(15)
        out[where] = text.getvalue()[-6000:]
    return out


def _split_backends(layers: dict[str, str], num_target_layers: int) -> dict[str, list[str]]:
    """Target layers are model.layers.0..N-1; DFlash's draft layers are numbered from N on."""
    target, draft = set(), set()
    for name, backend in layers.items():
        index = int(name.split("layers.")[1].split(".")[0]) if "layers." in name else -1
        (target if 0 <= index < num_target_layers else draft).add(backend)
    return {"target": sorted(target), "draft": sorted(draft)}


def _phase(exc: BaseException, stage: str) -> str:
    text = str(exc)
    if "is not valid for this configuration" in text or "No valid attention backend" in text:
        return "selection"
    if stage == "generation":
        files = [frame.filename for frame in traceback.extract_tb(exc.__traceback__)]
        return "first draft step" if any("spec_decode" in f for f in files) else "generation"
    return stage


def _counters(llm) -> dict:
    """vLLM's cumulative spec-decode counters."""
    values = {}
    for metric in llm.get_metrics():
        if metric.name.startswith("vllm:spec_decode"):
            values[metric.name] = getattr(metric, "values", None) or getattr(metric, "value", None)
    return {
        "num_drafts": values.get("vllm:spec_decode_num_drafts") or 0,
        "num_draft_tokens": values.get("vllm:spec_decode_num_draft_tokens") or 0,
        "num_accepted_tokens": values.get("vllm:spec_decode_num_accepted_tokens") or 0,
        "per_pos": list(values.get("vllm:spec_decode_num_accepted_tokens_per_pos") or []),
    }


def _acceptance(before: dict, after: dict) -> dict:
    """tau and per-position acceptance over what happened between two counter readings."""
    drafts = after["num_drafts"] - before["num_drafts"]
    accepted = after["num_accepted_tokens"] - before["num_accepted_tokens"]
    per_pos = [a - b for a, b in zip(after["per_pos"], before["per_pos"] or [0] * len(after["per_pos"]))]
    return {
        "num_drafts": drafts,
        "num_draft_tokens": after["num_draft_tokens"] - before["num_draft_tokens"],
        "num_accepted_tokens": accepted,
        "tau": 1 + accepted / drafts if drafts else None,
        "per_position_acceptance": [a / drafts for a in per_pos] if drafts else None,
    }


def _tpot_ms(outputs) -> float | None:
    """Mean time per output token after the first, from vLLM's per-request timestamps."""
    values = []
    for o in outputs:
        m, n = getattr(o, "metrics", None), len(o.outputs[0].token_ids)
        first, last = getattr(m, "first_token_ts", 0) or 0, getattr(m, "last_token_ts", 0) or 0
        if n > 1 and last > first > 0:
            values.append((last - first) / (n - 1) * 1000)
    return round(sum(values) / len(values), 4) if values else None


def _generate(llm, prompts, params, speculative: bool) -> dict:
    before = _counters(llm) if speculative else None
    llm.collective_rpc(_build_times)  # reset
    t0 = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - t0
    builds = llm.collective_rpc(_build_times)[0]
    tokens = [list(o.outputs[0].token_ids) for o in outputs]
    run = {
        "generate_s": round(seconds, 4),
        "output_tokens_per_s": round(sum(map(len, tokens)) / seconds, 1),
        "tpot_ms": _tpot_ms(outputs),
        "tokens": tokens,
        "tokens_sha256": hashlib.sha256(json.dumps(tokens).encode()).hexdigest(),
    }
    if speculative:
        run.update(_acceptance(before, _counters(llm)))
    steps = run["num_drafts"] / len(prompts) if speculative else params.max_tokens
    run["metadata_build_ms_per_step"] = {w: round(s * 1000 / max(steps, 1), 4) for w, (_, s) in builds.items()}
    run["metadata_builds_per_step"] = {w: round(n / max(steps, 1), 2) for w, (n, _) in builds.items()}
    return run


def _benchmark(llm, prompts, params, spec) -> list[dict]:
    """For each batch size: one warm-up generate, then `repeats` timed ones; the fastest is reported."""
    rows = []
    for batch in spec["batch_sizes"]:
        _generate(llm, prompts[:batch], params, spec["speculative"])  # warm-up: graphs, allocator, caches
        repeats = [_generate(llm, prompts[:batch], params, spec["speculative"]) for _ in range(spec["repeats"])]
        best = max(repeats, key=lambda r: r["output_tokens_per_s"])
        rows.append({
            "batch": batch, **best,
            "repeats_tokens_per_s": [r["output_tokens_per_s"] for r in repeats],
            "same_tokens_every_repeat": len({r["tokens_sha256"] for r in repeats}) == 1,
        })
    return rows


def main(spec_path: str, result_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    result: dict = {"ok": False}
    stage = "import"
    try:
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        from dflash_fi.models import load_prompts
        from dflash_fi.reference.tokenizer import prompt_ids

        texts = load_prompts(spec["prompts_file"], spec["num_prompts"])
        local_target = Path(spec["target"]).is_dir()
        # Local (byte-level) models see prompts as in training; hub models tokenize the text themselves.
        prompts = [TokensPrompt(prompt_token_ids=prompt_ids(t)) if local_target else t for t in texts]
        kwargs = dict(
            model=spec["target"], tokenizer=spec["target"], dtype="bfloat16", seed=0,
            enforce_eager=not spec["cuda_graphs"], kv_cache_dtype=spec["kv_cache_dtype"],
            max_model_len=spec["max_model_len"], gpu_memory_utilization=spec["gpu_memory_utilization"],
            disable_log_stats=False, load_format=spec["load_format"],
            skip_tokenizer_init=spec["load_format"] == "dummy",
        )
        if spec.get("target_backend"):
            kwargs["attention_backend"] = spec["target_backend"]
        if spec.get("num_gpu_blocks"):
            kwargs["num_gpu_blocks_override"] = spec["num_gpu_blocks"]
        if spec.get("kv_cache_memory_bytes"):
            kwargs["kv_cache_memory_bytes"] = spec["kv_cache_memory_bytes"]
        if spec["speculative"]:
            kwargs["speculative_config"] = {
                "method": "dflash",
                "model": spec["drafter"],
                "num_speculative_tokens": spec["num_speculative_tokens"],
                "attention_backend": spec["draft_backend"],
            }
        stage = "engine start"
        t0 = time.time()
        llm = LLM(**kwargs)
        result["engine_start_s"] = round(time.time() - t0, 2)
        num_target_layers = llm.llm_engine.model_config.hf_config.num_hidden_layers
        result["backends"] = _split_backends(llm.collective_rpc(_attention_backends)[0], num_target_layers)
        result["cudagraph_mode"] = llm.collective_rpc(_cudagraph_mode)[0]
        llm.collective_rpc(_build_times, kwargs={"install": True})

        stage = "generation"
        params = SamplingParams(temperature=0.0, max_tokens=spec["max_new_tokens"], ignore_eos=True,
                                detokenize=spec["load_format"] != "dummy")
        if spec.get("batch_sizes"):
            result["batches"] = _benchmark(llm, prompts, params, spec)
        else:
            result.update(_generate(llm, prompts, params, spec["speculative"]))
        if os.environ.get(PROFILE_BUILDS_ENV):
            result["metadata_build_profiles"] = llm.collective_rpc(_build_profiles)[0]
        result["ok"] = True
    except BaseException as exc:  # the record must say what failed, whatever it was
        result["error"] = {
            "type": type(exc).__name__,
            "message": str(exc)[:2000],
            "phase": _phase(exc, stage),
            "traceback_tail": traceback.format_exc()[-2500:],
        }
    Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
