"""The walkthrough's checks: each step against the step before, the FLASH_ATTN draft and the reference decoder.
Every check names the runs it needs (`RunId`s); without a GPU, this list is what is not run. Tolerances, and why:
 - vLLM runs the pair in bf16, the reference decoder in fp32: greedy choices differ on near-ties, the
   sequences then diverge and draft different blocks, so tau is compared within REFERENCE_TOLERANCE relative.
 - FLASH_ATTN and FlashInfer draft kernels sum in different orders (bf16): tau within KERNEL_TOLERANCE on the same
   output. The same holds between engines of the same step: bf16 draft near-ties flip with the engine's memory
   settings, output tokens unchanged. Where two outputs part (at near-ties, which the near-tie rule judges), tau is
   scored on other text and compared within REFERENCE_TOLERANCE, as above.
 - fp8 KV quantises the cached K/V of target and draft, and changes the target's own output, so its tau is
   measured on other text. An fp8 row shows that non-causal drafting survives fp8: its tau must stay above
   the midpoint between the reference decoder's causal and non-causal tau.
 - Greedy speculative output must equal plain greedy output up to the kernels' rounding: the near-tie rule
   (`dflash_fi.evidence.near_ties`), against a baseline that differs in one thing only (`plan.baselines`).
 - A failure is judged by where it happened (`Phase`) and what vLLM raised (the exception's type), never its text.
"""

from __future__ import annotations

import textwrap

from dflash_fi.engine.identity import RunId, Workload, label
from dflash_fi.engine.records import EngineRecord, Phase, Role, outcome
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.check_types import Check, CheckKind as K, CheckSpec, Judged, Verdict
from dflash_fi.evidence.near_ties import near_tie_verdict
from dflash_fi.evidence.plan_race import race_checks

REFERENCE_TOLERANCE, KERNEL_TOLERANCE = 0.05, 0.01


def _cut(text: str, width: int) -> str:  # at most `width` characters, cut between words
    return textwrap.shorten(text, width, placeholder=" ...")


def _rel(a: float, b: float) -> float:
    return abs(a - b) / b


def _failure(record: EngineRecord, phase: Phase, raised: type[BaseException]) -> Judged:
    """It failed in `phase`, raising `raised` (the recorded exception's type; its message is shown, not read)."""
    f = record.failure
    return Judged(f is not None and f.phase is phase and f.type == raised.__name__,
                  f"{outcome(record)}: {_cut(f.message, 200)}" if f else "it ran")


def _runs(*records: EngineRecord) -> str | None:
    failed = next((r for r in records if not r.ok), None)
    return failed and f"{label(failed.run)} did not run: {_cut(outcome(failed, True), 200)}"


def _tau(record: EngineRecord, workload: Workload) -> float | None:
    return run.tau if (run := record.generate(workload)) else None


def _same_tau(record: EngineRecord, other: EngineRecord, tolerance: float = KERNEL_TOLERANCE,
              workload: Workload = Workload.UNIFORM) -> Judged:
    """tau within `tolerance` where the two outputs are the same text; where they parted (at near-ties: the identity
    checks judge that), the drafts were scored on other text, and tau is compared as across diverged sequences."""
    if why := _runs(record, other):
        return Judged(False, why)
    a, b = _tau(record, workload), _tau(other, workload)
    ours, theirs = record.generate(workload), other.generate(workload)
    note = ""
    if ours.tokens_sha256 != theirs.tokens_sha256:
        tolerance = max(tolerance, REFERENCE_TOLERANCE)
        parted = sum(x != y for x, y in zip(ours.tokens, theirs.tokens)) if ours.tokens and theirs.tokens else None
        note = f"; outputs parted{f' on {parted} of {ours.num_requests} requests' if parted else ''}, other text"
    return Judged(_rel(a, b) <= tolerance,
                  f"tau {a:.4f} vs {b:.4f} ({_rel(a, b):.2%}, tolerance {tolerance:.0%}{note})",
                  {"tau": a, "tau_other": b, "relative": _rel(a, b), "tolerance": tolerance})


def _identical(record: EngineRecord, baseline: EngineRecord, ctx: dict,
               workload: Workload = Workload.UNIFORM) -> Judged:
    if why := _runs(record, baseline):
        return Judged(False, why)
    return Judged(*near_tie_verdict(record, baseline, ctx.get("margin"), workload))


def _same_output_and_tau(record: EngineRecord, other: EngineRecord, ctx: dict) -> Judged:
    return _both(_identical(record, other, ctx), _same_tau(record, other))  # what a step that changes no kernel keeps


def _matches_reference(record: EngineRecord, predicted: float, which: str) -> Judged:
    if why := _runs(record):
        return Judged(False, why)
    rel = _rel(record.tau, predicted)
    return Judged(rel <= REFERENCE_TOLERANCE, f"tau {record.tau:.3f} vs reference {which} {predicted:.3f} ({rel:.1%}, "
                  f"tolerance {REFERENCE_TOLERANCE:.0%})",
                  {"tau": record.tau, "predicted": predicted, "relative": rel, "tolerance": REFERENCE_TOLERANCE})


def _graph_mode(record: EngineRecord, mode: str) -> Judged:
    if why := _runs(record):
        return Judged(False, why)
    return Judged(record.cudagraph_mode == mode, f"{label(record.run)!r} resolved {record.cudagraph_mode}")


def _step2_below(s2: EngineRecord, fa: EngineRecord, ref: dict) -> Judged:
    if why := _runs(s2, fa):
        return Judged(False, why)
    gap = 0.5 * (ref["tau_noncausal"] - ref["tau_causal"])
    return Judged(s2.tau <= fa.tau - gap, f"tau {s2.tau:.3f} vs FLASH_ATTN {fa.tau:.3f} (must be at least {gap:.3f} "
                  "below: half the reference decoder's causal gap)", {"tau": s2.tau, "tau_flash_attn": fa.tau, "gap": gap})


def _fp8_non_causal(fp8: EngineRecord, ref: dict) -> Judged:
    if why := _runs(fp8):
        return Judged(False, why)
    midpoint = (ref["tau_noncausal"] + ref["tau_causal"]) / 2
    return Judged(fp8.tau >= midpoint, f"tau {fp8.tau:.3f}; must be above {midpoint:.3f}, halfway between the "
                  f"reference decoder's causal ({ref['tau_causal']:.3f}) and non-causal ({ref['tau_noncausal']:.3f}) tau",
                  {"tau": fp8.tau, "midpoint": midpoint})


def _on_flashinfer(record: EngineRecord) -> Judged:
    if why := _runs(record):
        return Judged(False, why)
    names = {role: sorted({b.name for b in found})
             for role, found in (("target", record.target_backends), ("draft", record.draft_backends))}
    return Judged(all(found == ["FLASHINFER"] for found in names.values()),
                  f"target on {', '.join(names['target'])}, draft on {', '.join(names['draft'])}; FlashAttention "
                  f"version vLLM answers: {record.flash_attn_version}")


def _mixed_batches_happened(record: EngineRecord) -> Judged:
    """The mixed workload changed the batch: prompts with decodes, and steps above the largest captured graph."""
    mixed = record.generate(Workload.MIXED)
    if mixed is None:
        return Judged(False, "no mixed workload recorded")
    larger = sum(b.above_largest_graph for b in mixed.builds if b.key.role is Role.TARGET)
    return Judged(larger > 0, f"{mixed.num_requests} requests (max_num_seqs {record.spec.max_num_seqs}); "
                  f"{larger} target-step builds above the largest captured graph "
                  f"({record.max_cudagraph_capture_size} tokens)", {"above_largest_graph": larger})


def _both(*judged: Judged) -> Judged:
    numbers = {}
    for i, j in enumerate(judged):
        numbers.update({(k if k not in numbers else f"{k}_{i}"): v for k, v in j.numbers.items()})
    return Judged(all(j.passed for j in judged), "; ".join(j.detail for j in judged), numbers)


def _identity_checks() -> list[CheckSpec]:
    return [CheckSpec(K.SAME_OUTPUT, f"{label(run)}: output identical to {label(baseline)!r} (near-tie rule)",
                      (run, baseline), lambda r, ctx: _identical(r[0], r[1], ctx))
            for run, baselines in P.baselines().items() for baseline in baselines]


def _mixed_checks() -> list[CheckSpec]:
    out = []
    for run in P.mixed_rows():
        for baseline in P.baselines()[run]:
            out.append(CheckSpec(K.MIXED_SAME_OUTPUT,
                                 f"{label(run)}, mixed batches: output identical to {label(baseline)!r} (near-tie rule)",
                                 (run, baseline), lambda r, ctx: _identical(r[0], r[1], ctx, Workload.MIXED),
                                 (Workload.MIXED,)))
        # A FlashInfer target changes the target's own output, so its tau is measured on other text.
        tolerance = REFERENCE_TOLERANCE if run.target_backend == "FLASHINFER" else KERNEL_TOLERANCE
        out.append(CheckSpec(K.MIXED_SAME_TAU, f"{label(run)}, mixed batches: tau within {tolerance:.0%} of the "
                             "FLASH_ATTN draft's, and the batch changed shape", (run, P.FLASH_ATTN_GRAPHS),
                             lambda r, ctx, t=tolerance: _both(_same_tau(r[0], r[1], t, Workload.MIXED),
                                                               _mixed_batches_happened(r[0])), (Workload.MIXED,)))
    return out


def _step_checks() -> list[CheckSpec]:
    """Each step from 5 on: the same output as the step before, eager, and with graphs where it keeps them."""
    from dflash_fi.steps import STEPS

    within = f"tau within {KERNEL_TOLERANCE:.0%}"
    out = [CheckSpec(K.SAME_OUTPUT_AND_TAU, f"step {s}: without graphs, same output as step {s - 1}, {within}",
                     (P.step_run(s), P.step_run(s - 1)), lambda r, ctx: _same_output_and_tau(r[0], r[1], ctx))
           for s in STEPS if s >= 5]
    graph_steps = P.graph_steps()
    for s in graph_steps:
        out += [
            CheckSpec(K.GRAPH_MODES, f"step {s}, CUDA graphs: the engine keeps FULL_AND_PIECEWISE, with FlashInfer as "
                      "target too", (P.graphs_run(s), P.graphs_fi_target_run(s)),
                      lambda r, ctx: _both(_graph_mode(r[0], "FULL_AND_PIECEWISE"), _graph_mode(r[1], "FULL_AND_PIECEWISE"))),
            CheckSpec(K.SAME_TAU, f"step {s}, CUDA graphs: {within} of the FLASH_ATTN draft's "
                      f"({REFERENCE_TOLERANCE:.0%} where outputs parted)", (P.graphs_run(s), P.FLASH_ATTN_GRAPHS),
                      lambda r, ctx: _same_tau(r[0], r[1]))]
    for s in graph_steps[1:]:
        out += [
            CheckSpec(K.SAME_OUTPUT_AND_TAU, f"step {s}, CUDA graphs: same output as step {s - 1}, {within}",
                      (P.graphs_run(s), P.graphs_run(s - 1)), lambda r, ctx: _same_output_and_tau(r[0], r[1], ctx)),
            CheckSpec(K.SAME_OUTPUT, f"step {s}, CUDA graphs, FlashInfer target too: same output as step {s - 1}",
                      (P.graphs_fi_target_run(s), P.graphs_fi_target_run(s - 1)),
                      lambda r, ctx: _identical(r[0], r[1], ctx))]
    return out


def checks() -> tuple[CheckSpec, ...]:
    """Every check of the walkthrough, in the order a reader meets the steps."""
    S, final, within = P.step_run, P.final_step(), f"within {KERNEL_TOLERANCE:.0%}"
    return (
        CheckSpec(K.REFUSED_AT_SELECTION, "step 0: FLASHINFER draft rejected at selection", (S(0),),
                  lambda r, ctx: _failure(r[0], Phase.SELECTION, ValueError)),
        CheckSpec(K.RUNS, "step 0: FLASH_ATTN draft runs", (P.FLASH_ATTN,),
                  lambda r, ctx: Judged(r[0].ok, _runs(r[0]) or f"tau {r[0].tau:.3f}", {"tau": r[0].tau})),
        CheckSpec(K.DFLASH_CHECK_FAILS, "step 1: selection passes, DFlash's non-causal check fails at the first draft "
                  "step", (S(1),), lambda r, ctx: _failure(r[0], Phase.FIRST_DRAFT_STEP, AssertionError)),
        CheckSpec(K.TAU_BELOW_FLASH_ATTN, "step 2: runs, tau clearly below the FLASH_ATTN draft", (S(2), P.FLASH_ATTN),
                  lambda r, ctx: _step2_below(r[0], r[1], ctx["reference"])),
        CheckSpec(K.TAU_MATCHES_REFERENCE, "step 2: tau matches the reference decoder's causal-block tau", (S(2),),
                  lambda r, ctx: _matches_reference(r[0], ctx["reference"]["tau_causal"], "causal")),
        CheckSpec(K.SAME_TAU, f"step 3: tau equals the FLASH_ATTN draft's ({within})", (S(3), P.FLASH_ATTN),
                  lambda r, ctx: _same_tau(r[0], r[1])),
        CheckSpec(K.TAU_MATCHES_REFERENCE, "step 3: tau matches the reference decoder's non-causal tau", (S(3),),
                  lambda r, ctx: _matches_reference(r[0], ctx["reference"]["tau_noncausal"], "non-causal")),
        CheckSpec(K.SAME_OUTPUT_AND_TAU, f"step 4: same output as step 3, tau {within} (TRTLLM gating changes no "
                  "kernel here)", (S(4), S(3)), lambda r, ctx: _same_output_and_tau(r[0], r[1], ctx)),
        CheckSpec(K.STILL_NON_CAUSAL, "step 4, fp8 KV: runs, drafting still non-causal", (P.FP8,),
                  lambda r, ctx: _fp8_non_causal(r[0], ctx["reference"])),
        *_step_checks(),
        CheckSpec(K.REFUSED_AT_SELECTION, "RTX 4090 case, stock: no backend at all for the draft (fails at selection)",
                  (P.RTX4090_STOCK,), lambda r, ctx: _failure(r[0], Phase.SELECTION, ValueError)),
        *(CheckSpec(K.ON_FLASHINFER_STILL_NON_CAUSAL, f"RTX 4090 case, step {s}: runs, target and draft on FlashInfer, "
                    "drafting still non-causal", (P.rtx4090_run(s),),
                    lambda r, ctx: _both(_on_flashinfer(r[0]), _fp8_non_causal(r[0], ctx["reference"])))
          for s in dict.fromkeys((4, final))),
        CheckSpec(K.GRAPH_MODES, "CUDA graphs: the FLASH_ATTN draft keeps FULL_AND_PIECEWISE, step 4's FlashInfer draft "
                  "turns the engine PIECEWISE", (P.FLASH_ATTN_GRAPHS, P.STEP4_GRAPHS),
                  lambda r, ctx: _both(_graph_mode(r[0], "FULL_AND_PIECEWISE"), _graph_mode(r[1], "PIECEWISE"))),
        *_identity_checks(),
        *_mixed_checks(),
        *race_checks(),
    )


def check_records(records: dict[RunId, EngineRecord], reference: dict, margin: dict | None = None) -> list[Check]:
    """Every check over one walkthrough's records (by run), the reference decoder's prediction and the near-tie
    margin; a check whose records are missing is NOT RUN."""
    ctx = {"reference": reference, "margin": margin}
    results = []
    for spec in checks():
        if why := spec.missing(records):
            results.append(Check(spec.id, spec.name, Verdict.NOT_RUN, why))
            continue
        judged = spec.judge([records[run] for run in spec.needs], ctx)
        results.append(Check(spec.id, spec.name, Verdict.PASS if judged.passed else Verdict.FAIL, judged.detail,
                             judged.numbers))
    return results
