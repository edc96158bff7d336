"""`dflash-fi profile`: where the attention metadata builds of a decoding step spend host time, step by step.

Engines with vLLM's CUDA graphs on the embedded pair, the FLASH_ATTN draft and the FlashInfer draft at the step before
the final one and at the final one, at batch 1 and batch 32 (held-out prompts decoded together), each build under cProfile
(DFLASH_FI_PROFILE_BUILDS): per builder, its builds and the functions that took the most of its own time, with file
and line. A short generate first compiles what the first builds compile (Triton's kernels, once per process); the
profiles start after it, so they show steady decoding steps. The profiler slows what it watches: read where the time
goes, not how much (the engine benchmark times).
The engines share the GPU, as correctness runs do.
"""

from __future__ import annotations

from dflash_fi.engine.identity import RunId
from dflash_fi.engine.instruments import PROFILE_BUILDS_ENV, importable_path
from dflash_fi.engine.spec import RunSpec

BATCHES = (1, 32)
NEW_TOKENS = 256


def profile_runs() -> list[RunId]:
    """Before and after the final step, beside what the FLASH_ATTN draft builds."""
    from dflash_fi.steps import FINAL_STEP

    return [RunId(draft_backend="FLASH_ATTN", cuda_graphs=True),
            *(RunId(step=s, cuda_graphs=True) for s in (FINAL_STEP - 1, FINAL_STEP))]


def profile_plan() -> list[RunSpec]:
    return [RunSpec(run=run, num_prompts=batch, max_new_tokens=NEW_TOKENS) for batch in BATCHES
            for run in profile_runs()]


def run_profiles(print_fn=print) -> dict:
    from dflash_fi.engine.pool import run_engines, share_gpus
    from dflash_fi.engine.runner import EngineProcess
    from dflash_fi.stack import require_gpu, run_context

    gpu = require_gpu("dflash-fi profile")
    specs, slots = share_gpus(profile_plan())

    def profiled(spec, command, gpu):
        return EngineProcess(spec, command, gpu, env={PROFILE_BUILDS_ENV: "1"}).finish()

    records = run_engines(specs, slots, "dflash-fi profile", print_fn=print_fn, run_one=profiled)
    engines = []
    for record in records:
        data = record.to_json()
        for generate in data["generates"].values():
            generate["tokens"] = []
        engines.append(data)
    return {"schema": 2, "gpu": gpu.name, "compute_capability": gpu.sm, "method": __doc__.strip(),
            "engines": engines, **run_context()}


def latest_profile(summary=None) -> dict:
    """The build profile of the evidence summary (its compressed rows), with the summary's name."""
    import dflash_fi.summary as S

    summary = summary or S.read()
    return {**summary.rows(S.Section.PROFILE), "file": summary.path.name}


def profile_batches(profile: dict) -> list[int]:
    """The batches a build profile's engines decoded, in order."""
    return sorted({e["spec"]["num_prompts"] for e in profile["engines"]})


def anatomy_rows(profile: dict, batch: int, role: str = "draft step", top: int | None = 6) -> list[dict]:
    """For each profiled engine at this batch, where one metadata build of `role` spends its host time: the `top`
    functions by own time (all recorded: None), per build, with file and line."""
    from dflash_fi.engine.records import EngineRecord, Role

    rows = []
    for record in (EngineRecord.from_json(e) for e in profile["engines"]):
        if record.spec.num_prompts != batch or not record.ok:
            continue
        builds = {t.key: t.builds for g in record.generates.values() for t in g.builds}
        for p in (p for p in record.build_profiles if p.key.role is Role(role)):
            n = max(builds.get(p.key, 1), 1)
            rows += [{"run": record.run, "key": p.key, "function": f.function, "file": importable_path(f.file),
                      "line": f.line, "calls_per_build": f.calls / n, "own_ms_per_build": f.own_s * 1000 / n}
                     for f in p.functions[:top]]
    return rows


def anatomy(profile: dict, batch: int, role: str = "draft step", top: int = 6) -> str:
    """Markdown of `anatomy_rows`: one row per function (file and line, so that each row points at code)."""
    from dflash_fi.engine.identity import label

    lines = ["| run | builder | function (file:line) | calls per build | own ms per build |", "|---|---|---|---|---|"]
    lines += [f"| {label(r['run'])} | {r['key'].backend} ({r['key'].layers} layers) | `{r['function']}` "
              f"({r['file']}:{r['line']}) | {r['calls_per_build']:.1f} | {r['own_ms_per_build']:.4f} |"
              for r in anatomy_rows(profile, batch, role, top)]
    return "\n".join(lines)


PROFILER_OWN = "_lsprof"  # cProfile's own enable/disable, in every profile: not the build's time


def gap_rows(profile: dict, batch: int, top: int = 3) -> list[dict]:
    """The host-build gap by cause, per builder role (the runner's target-step builds, the drafter's): the profiled
    ms per decoding step of each builder in the FLASH_ATTN draft's engine and in the final FlashInfer draft's, and
    the final builders' `top` functions by own ms per step, with file and line (cProfile's own calls left out).
    Profiled: read the shares, not the sizes."""
    from dflash_fi.engine.records import EngineRecord, Role

    final, flash_attn = profile_runs()[-1], profile_runs()[0]
    records = {r.run: r for r in (EngineRecord.from_json(e) for e in profile["engines"])
               if r.spec.num_prompts == batch and r.ok}
    if final not in records or flash_attn not in records:
        return []

    def builders(record, role):
        steps = max(sum(g.steps for g in record.generates.values()), 1)
        return [(p.key, p.total_s * 1000 / steps,
                 [(f.function, importable_path(f.file), f.line, f.own_s * 1000 / steps)
                  for f in p.functions if PROFILER_OWN not in f.function][:top])
                for p in record.build_profiles if p.key.role is role]
    return [{"role": role, "flash_attn": builders(records[flash_attn], role), "final": builders(records[final], role)}
            for role in Role]


def gap_table(profile: dict, batch: int) -> str:
    """Markdown of `gap_rows`: a row per role, and the total."""
    from dflash_fi.engine.identity import label

    rows = gap_rows(profile, batch)
    if not rows:
        return f"no profile of both drafts at batch {batch}"

    def named(builders):
        return "; ".join(f"{key.backend} ({key.layers} layers) {ms:.3f}" for key, ms, _ in builders)
    lines = [f"| builds | {label(profile_runs()[0])}: builders, ms per step | {label(profile_runs()[-1])} | "
             "difference | where the final's builds spend it (own ms per step, file:line) |", "|---|---|---|---|---|"]
    total = 0.0
    for r in rows:
        gap = sum(ms for _, ms, _ in r["final"]) - sum(ms for _, ms, _ in r["flash_attn"])
        total += gap
        where = "; ".join(f"`{f}` {ms:.3f} ({file}:{line})" for _, _, functions in r["final"]
                          for f, file, line, ms in functions)
        lines.append(f"| {r['role'].value} | {named(r['flash_attn'])} | {named(r['final'])} | {gap:+.3f} | {where} |")
    return "\n".join([*lines, f"| all | | | {total:+.3f} | |"])
