"""The plan race in vLLM's engines (docs/plan-race.md): in each FlashInfer draft's mixed workload, with async
scheduling on and requests joining and leaving, did a draft plan() rewrite the pinned schedule of a plan whose copy
was still queued, for another batch? `instruments.plan_watch` counts it inside the engine; nothing here times it."""

from __future__ import annotations

from dflash_fi.engine.identity import RunId, Workload, label
from dflash_fi.engine.records import EngineRecord, PlanWatch, Role
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.check_types import CheckKind, CheckSpec, Judged

RACE_STEPS = (4, 7, 8, 9)  # the PR's state, the step that dropped the blocking copy, and the two after it


def race_rows() -> tuple[RunId, ...]:
    """Engines of those steps, eager and with graphs, FLASH_ATTN and FlashInfer targets, and the final RTX 4090 row."""
    steps = [s for s in RACE_STEPS if s <= P.final_step()]
    rows = [P.step_run(s) for s in steps] + [P.STEP4_GRAPHS, P.STEP4_GRAPHS_FI_TARGET]
    rows += [r(s) for s in steps if s in P.graph_steps() for r in (P.graphs_run, P.graphs_fi_target_run)]
    return tuple(dict.fromkeys([*rows, P.final_rtx4090()]))


XQA_STEP = 9  # from here a draft with a 16-bit cache on SM 9.0 runs on XQA: no plan to race


def draft_on_xqa(record: EngineRecord) -> bool:
    run, made = record.run, record.provenance
    return run.step >= XQA_STEP and run.kv_cache_dtype == "auto" and made is not None and made.compute_capability == "9.0"


def no_harmful_replan(record: EngineRecord) -> Judged:
    mixed = record.generate(Workload.MIXED)
    if mixed is None or mixed.plans is None:
        return Judged(False, "the mixed workload's plans were not watched")
    draft = mixed.plan_watch(Role.DRAFT) or PlanWatch(Role.DRAFT, 0, 0, 0)
    numbers = {"async_scheduling": record.async_scheduling, "draft_plans": draft.plans, "pending": draft.pending,
               "pending_changed": draft.pending_changed}
    seen = draft.plans == 0 if draft_on_xqa(record) else draft.plans > 0  # a watch that saw no plan proves nothing
    return Judged(record.async_scheduling is True and seen and draft.pending_changed == 0,
                  f"async scheduling {'on' if record.async_scheduling else 'off'}; {draft.plans} draft plans"
                  f"{' (on XQA: none expected)' if draft_on_xqa(record) else ''}, "
                  f"{draft.pending} while the wrapper's previous plan was still queued, {draft.pending_changed} of "
                  "those for another batch", numbers)


def race_checks() -> list[CheckSpec]:
    return [CheckSpec(CheckKind.NO_HARMFUL_REPLAN, f"{label(run)}, mixed batches, async scheduling: no draft plan "
                      "rewrote a queued plan's schedule for another batch", (run,),
                      lambda r, ctx: no_harmful_replan(r[0]), (Workload.MIXED,)) for run in race_rows()]
