"""Records written before the typed evidence (no "schema" key), read into today's types.

Every field they have maps to data here: the run's identity from its spec's fields (`enforce_eager` before
`cuda_graphs`), the walkthrough's id from `spec.extra`, a failure's phase as recorded, each workload's generate.
Two things stay as they were written: backends are class paths only (`Backend.name` None), and builder timings keep
their text keys ("target step, FLASHINFER (2 layers)") in `GenerateResult.legacy_builds`, never parsed: the checks
that read those say "not run" for such records.
"""

from __future__ import annotations

from dataclasses import fields

from dflash_fi.engine.identity import Pair, RunId, Workload
from dflash_fi.engine.records import Acceptance, Backend, EngineRecord, Failure, GenerateResult, Provenance
from dflash_fi.engine.spec import BenchPlan, RunSpec


def spec_from_legacy(data: dict) -> RunSpec:
    """A spec as records before RunId wrote it (every field at the top; `enforce_eager` before `cuda_graphs`)."""
    graphs = data.get("cuda_graphs", not data.get("enforce_eager", True))
    run = RunId(step=data.get("step", 0), speculative=data.get("speculative", True),
                draft_backend=data.get("draft_backend"), target_backend=data.get("target_backend"),
                kv_cache_dtype=data.get("kv_cache_dtype", "auto"), flash_attn_version=data.get("flash_attn_version"),
                cuda_graphs=graphs,
                pair=Pair.EMBEDDED if data.get("load_format", "auto") != "dummy" else Pair.QWEN3_4B_SHAPE)
    known = {f.name for f in fields(RunSpec)} - {"run", "workloads", "bench"}
    values = {k: v for k, v in data.items() if k in known}
    workloads = tuple(Workload(w) for w in data.get("workloads", ("uniform",)))
    bench = (BenchPlan(tuple(data["batch_sizes"]), (data.get("extra") or {}).get("batch1_prompts", 1),
                       data.get("repeats", 1)) if data.get("batch_sizes") else None)
    return RunSpec(run=run, workloads=workloads, bench=bench, **values)


def generate_from_legacy(data: dict) -> GenerateResult | None:
    if "tokens" not in data and "tokens_sha256" not in data:
        return None
    acceptance = None
    if data.get("num_drafts") is not None:
        acceptance = Acceptance(data["num_drafts"], data.get("num_draft_tokens", 0), data["num_accepted_tokens"],
                                tuple(data.get("per_position_acceptance") or ()))
    tokens = tuple(tuple(t) for t in data.get("tokens") or ())
    steps = acceptance.num_drafts / max(data.get("num_requests") or len(tokens) or 1, 1) if acceptance else \
        max((len(t) for t in tokens), default=0)
    legacy = {k: data[k] for k in ("metadata_build_ms_per_step", "metadata_builds_per_step", "largest_build_tokens",
                                   "builds_larger_than_largest_graph") if k in data}
    return GenerateResult(
        num_requests=data.get("num_requests") or len(tokens), generate_s=data.get("generate_s", 0.0),
        output_tokens_per_s=data.get("output_tokens_per_s", 0.0), steps=steps, tokens_sha256=data.get("tokens_sha256", ""),
        tokens=tokens, tpot_ms=data.get("tpot_ms"), acceptance=acceptance,
        near_ties=(tuple(tuple((int(p), g) for p, g in r) for r in data["near_ties"]) if "near_ties" in data else None),
        near_tie_cap=data.get("near_tie_cap"), legacy_builds=legacy or None)


def record_from_legacy(data: dict) -> EngineRecord:
    """A record as written before these types: every field at the top, the mixed workload under "mixed"."""
    spec = spec_from_legacy(data["spec"])
    generates = {}
    if (uniform := generate_from_legacy(data)) is not None:
        generates[Workload.UNIFORM] = uniform
    if data.get("mixed") and (mixed := generate_from_legacy(data["mixed"])) is not None:
        generates[Workload.MIXED] = mixed
    error = data.get("error")
    backends = data.get("backends") or {}
    provenance = Provenance(
        gpu=data.get("gpu"), compute_capability=data.get("compute_capability"), versions=data.get("versions") or {},
        git_commit=data.get("git_commit"), command=data.get("command"), finished_at=data.get("finished_at", ""),
        wall_s=data.get("wall_s"), log_file=data.get("log_file"), log_tail=data.get("log_tail", ""),
        models=data.get("models") or {})
    return EngineRecord(
        spec=spec, ok=bool(data.get("ok")),
        failure=Failure(error["type"], error.get("message", ""), error["phase"], error.get("traceback_tail", ""))
        if error else None,
        target_backends=tuple(Backend(q) for q in backends.get("target", ())),
        draft_backends=tuple(Backend(q) for q in backends.get("draft", ())),
        cudagraph_mode=data.get("cudagraph_mode"), max_cudagraph_capture_size=data.get("max_cudagraph_capture_size"),
        flash_attn_version=data.get("flash_attn_version"), flash_attn_log_lines=tuple(data.get("flash_attn_log_lines", ())),
        engine_start_s=data.get("engine_start_s"), generates=generates,
        walkthrough=(data["spec"].get("extra") or {}).get("walkthrough_id"), provenance=provenance)
