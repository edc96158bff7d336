"""The walkthrough's checks: each step against the step before, the FLASH_ATTN draft and the reference decoder.
Every check names the runs it needs (`RunId`s); without a GPU, this list is what is not run. Tolerances, and why:
 - vLLM runs the pair in bf16, the reference decoder in fp32: greedy choices differ on near-ties, the
   sequences then diverge and draft different blocks, so tau is compared within 5% relative.
 - FLASH_ATTN and FlashInfer draft kernels sum in different orders (bf16): tau within 1% on the same output. The
   same 1% holds between engines of the same step: bf16 draft near-ties flip with the engine's memory settings,
   output tokens unchanged (runs/nvidia-h200.engine-variation.json). Where two outputs part (at near-ties, which
   the near-tie rule judges), tau is scored on other text and compared within 5%, as above.
 - fp8 KV quantises the cached K/V of target and draft, and changes the target's own output, so its tau is
   measured on other text. An fp8 row shows that non-causal drafting survives fp8: its tau must stay above
   the midpoint between the reference decoder's causal and non-causal tau.
 - Greedy speculative output must equal plain greedy output up to the kernels' rounding: the near-tie rule
   (`dflash_fi.evidence.near_ties`), against a baseline that differs in one thing only (`plan.baselines`).
"""

from __future__ import annotations

import textwrap

from dflash_fi.engine.identity import RunId, Workload, label
from dflash_fi.engine.records import EngineRecord, Phase, Role, outcome
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.check_types import Check, CheckSpec, NotCheckable, Verdict
from dflash_fi.evidence.near_ties import near_tie_verdict

REFERENCE_TOLERANCE, KERNEL_TOLERANCE = 0.05, 0.01


def _cut(text: str, width: int) -> str:  # at most `width` characters, cut between words
    return textwrap.shorten(text, width, placeholder=" ...")


def _rel(a: float, b: float) -> float:
    return abs(a - b) / b


def _failure(record: EngineRecord, phase: Phase, text: str) -> tuple[bool, str]:
    """It failed in `phase`, with vLLM's own words `text` in its message (what the walkthrough shows)."""
    f = record.failure
    return (f is not None and f.phase is phase and text in f.message,
            f"{outcome(record)}: {_cut(f.message, 200)}" if f else "it ran")


def _runs(*records: EngineRecord) -> str | None:
    failed = next((r for r in records if not r.ok), None)
    return failed and f"{label(failed.run)} did not run: {_cut(outcome(failed, True), 200)}"


def _tau(record: EngineRecord, workload: Workload) -> float | None:
    return run.tau if (run := record.generate(workload)) else None


def _same_tau(record: EngineRecord, other: EngineRecord, tolerance: float = KERNEL_TOLERANCE,
              workload: Workload = Workload.UNIFORM) -> tuple[bool, str]:
    """tau within `tolerance` where the two outputs are the same text; where they parted (at near-ties: the identity
    checks judge that), the drafts were scored on other text, and tau is compared as across diverged sequences."""
    if why := _runs(record, other):
        return False, why
    a, b = _tau(record, workload), _tau(other, workload)
    ours, theirs = record.generate(workload), other.generate(workload)
    note = ""
    if ours.tokens_sha256 != theirs.tokens_sha256:
        tolerance = max(tolerance, REFERENCE_TOLERANCE)
        parted = sum(x != y for x, y in zip(ours.tokens, theirs.tokens)) if ours.tokens and theirs.tokens else None
        note = f"; outputs parted{f' on {parted} of {ours.num_requests} requests' if parted else ''}, other text"
    return _rel(a, b) <= tolerance, f"tau {a:.4f} vs {b:.4f} ({_rel(a, b):.2%}, tolerance {tolerance:.0%}{note})"


def _identical(record: EngineRecord, baseline: EngineRecord, ctx: dict,
               workload: Workload = Workload.UNIFORM) -> tuple[bool, str]:
    if why := _runs(record, baseline):
        return False, why
    return near_tie_verdict(record, baseline, ctx.get("margin"), workload)


def _same_output_and_tau(record: EngineRecord, other: EngineRecord, ctx: dict) -> tuple[bool, str]:
    return _both(_identical(record, other, ctx), _same_tau(record, other))  # what a step that changes no kernel keeps


def _matches_reference(record: EngineRecord, predicted: float, which: str) -> tuple[bool, str]:
    if why := _runs(record):
        return False, why
    return (_rel(record.tau, predicted) <= REFERENCE_TOLERANCE,
            f"tau {record.tau:.3f} vs reference {which} {predicted:.3f} ({_rel(record.tau, predicted):.1%}, "
            f"tolerance {REFERENCE_TOLERANCE:.0%})")


def _graph_mode(record: EngineRecord, mode: str) -> tuple[bool, str]:
    return (False, why) if (why := _runs(record)) else (record.cudagraph_mode == mode,
                                                       f"{label(record.run)!r} resolved {record.cudagraph_mode}")


def _step2_below(s2: EngineRecord, fa: EngineRecord, ref: dict) -> tuple[bool, str]:
    if why := _runs(s2, fa):
        return False, why
    gap = 0.5 * (ref["tau_noncausal"] - ref["tau_causal"])
    return (s2.tau <= fa.tau - gap,
            f"tau {s2.tau:.3f} vs FLASH_ATTN {fa.tau:.3f} (must be at least {gap:.3f} below: half the "
            "reference decoder's causal gap)")


def _fp8_non_causal(fp8: EngineRecord, ref: dict) -> tuple[bool, str]:
    if why := _runs(fp8):
        return False, why
    midpoint = (ref["tau_noncausal"] + ref["tau_causal"]) / 2
    return (fp8.tau >= midpoint, f"tau {fp8.tau:.3f}; must be above {midpoint:.3f}, halfway between the "
            f"reference decoder's causal ({ref['tau_causal']:.3f}) and non-causal ({ref['tau_noncausal']:.3f}) tau")


def _on_flashinfer(record: EngineRecord) -> tuple[bool, str]:
    if why := _runs(record):
        return False, why
    backends = {"target": record.target_backends, "draft": record.draft_backends}
    if any(b.name is None for role in backends.values() for b in role):
        raise NotCheckable("recorded before backends were recorded by name")
    names = {role: sorted({b.name for b in found}) for role, found in backends.items()}
    return (all(found == ["FLASHINFER"] for found in names.values()),
            f"target on {', '.join(names['target'])}, draft on {', '.join(names['draft'])}; FlashAttention "
            f"version vLLM answers: {record.flash_attn_version}")


def _mixed_batches_happened(record: EngineRecord) -> tuple[bool, str]:
    """The mixed workload changed the batch: prompts with decodes, and steps above the largest captured graph."""
    mixed = record.generate(Workload.MIXED)
    if mixed is None:
        return False, "no mixed workload recorded"
    if mixed.legacy_builds is not None:
        raise NotCheckable("recorded before builder timings were keyed by role")
    larger = sum(b.above_largest_graph for b in mixed.builds if b.key.role is Role.TARGET)
    return larger > 0, (f"{mixed.num_requests} requests (max_num_seqs {record.spec.max_num_seqs}); "
                        f"{larger} target-step builds above the largest captured graph "
                        f"({record.max_cudagraph_capture_size} tokens)")


def _both(*verdicts: tuple[bool, str]) -> tuple[bool, str]:
    return all(ok for ok, _ in verdicts), "; ".join(d for _, d in verdicts)


def _identity_checks() -> list[CheckSpec]:
    return [CheckSpec(f"{label(run)}: output identical to {label(baseline)!r} (near-tie rule)", (run, baseline),
                      lambda r, ctx: _identical(r[0], r[1], ctx))
            for run, baselines in P.baselines().items() for baseline in baselines]


def _mixed_checks() -> list[CheckSpec]:
    out = []
    for run in P.mixed_rows():
        for baseline in P.baselines()[run]:
            out.append(CheckSpec(f"{label(run)}, mixed batches: output identical to {label(baseline)!r} (near-tie rule)",
                                 (run, baseline), lambda r, ctx: _identical(r[0], r[1], ctx, Workload.MIXED),
                                 (Workload.MIXED,)))
        # A FlashInfer target changes the target's own output, so its tau is measured on other text.
        tolerance = REFERENCE_TOLERANCE if run.target_backend == "FLASHINFER" else KERNEL_TOLERANCE
        out.append(CheckSpec(f"{label(run)}, mixed batches: tau within {tolerance:.0%} of the FLASH_ATTN draft's, "
                             "and the batch changed shape", (run, P.FLASH_ATTN_GRAPHS),
                             lambda r, ctx, t=tolerance: _both(_same_tau(r[0], r[1], t, Workload.MIXED),
                                                               _mixed_batches_happened(r[0])), (Workload.MIXED,)))
    return out


def _step_checks() -> list[CheckSpec]:
    """Each step from 5 on: the same output as the step before, eager, and with graphs where it keeps them."""
    from dflash_fi.steps import STEPS

    out = [CheckSpec(f"step {s}: without graphs, same output as step {s - 1}, tau within 1%",
                     (P.step_run(s), P.step_run(s - 1)), lambda r, ctx: _same_output_and_tau(r[0], r[1], ctx))
           for s in STEPS if s >= 5]
    graph_steps = P.graph_steps()
    for s in graph_steps:
        out += [
            CheckSpec(f"step {s}, CUDA graphs: the engine keeps FULL_AND_PIECEWISE, with FlashInfer as target too",
                      (P.graphs_run(s), P.graphs_fi_target_run(s)),
                      lambda r, ctx: _both(_graph_mode(r[0], "FULL_AND_PIECEWISE"), _graph_mode(r[1], "FULL_AND_PIECEWISE"))),
            CheckSpec(f"step {s}, CUDA graphs: tau within 1% of the FLASH_ATTN draft's (5% where outputs parted)",
                      (P.graphs_run(s), P.FLASH_ATTN_GRAPHS),
                      lambda r, ctx: _same_tau(r[0], r[1]))]
    for s in graph_steps[1:]:
        out += [
            CheckSpec(f"step {s}, CUDA graphs: same output as step {s - 1}, tau within 1%",
                      (P.graphs_run(s), P.graphs_run(s - 1)), lambda r, ctx: _same_output_and_tau(r[0], r[1], ctx)),
            CheckSpec(f"step {s}, CUDA graphs, FlashInfer target too: same output as step {s - 1}",
                      (P.graphs_fi_target_run(s), P.graphs_fi_target_run(s - 1)),
                      lambda r, ctx: _identical(r[0], r[1], ctx))]
    return out


def checks() -> tuple[CheckSpec, ...]:
    """Every check of the walkthrough, in the order a reader meets the steps."""
    S, final = P.step_run, P.final_step()
    return (
        CheckSpec("step 0: FLASHINFER draft rejected at selection", (S(0),),
                  lambda r, ctx: _failure(r[0], Phase.SELECTION, "non-causal attention not supported")),
        CheckSpec("step 0: FLASH_ATTN draft runs", (P.FLASH_ATTN,),
                  lambda r, ctx: (r[0].ok, _runs(r[0]) or f"tau {r[0].tau:.3f}")),
        CheckSpec("step 1: selection passes, DFlash's non-causal check fails at the first draft step", (S(1),),
                  lambda r, ctx: _failure(r[0], Phase.FIRST_DRAFT_STEP, "does not have non-causal support")),
        CheckSpec("step 2: runs, tau clearly below the FLASH_ATTN draft", (S(2), P.FLASH_ATTN),
                  lambda r, ctx: _step2_below(r[0], r[1], ctx["reference"])),
        CheckSpec("step 2: tau matches the reference decoder's causal-block tau", (S(2),),
                  lambda r, ctx: _matches_reference(r[0], ctx["reference"]["tau_causal"], "causal")),
        CheckSpec("step 3: tau equals the FLASH_ATTN draft's (within 1%)", (S(3), P.FLASH_ATTN),
                  lambda r, ctx: _same_tau(r[0], r[1])),
        CheckSpec("step 3: tau matches the reference decoder's non-causal tau", (S(3),),
                  lambda r, ctx: _matches_reference(r[0], ctx["reference"]["tau_noncausal"], "non-causal")),
        CheckSpec("step 4: same output as step 3, tau within 1% (TRTLLM gating changes no kernel here)", (S(4), S(3)),
                  lambda r, ctx: _same_output_and_tau(r[0], r[1], ctx)),
        CheckSpec("step 4, fp8 KV: runs, drafting still non-causal", (P.FP8,),
                  lambda r, ctx: _fp8_non_causal(r[0], ctx["reference"])),
        *_step_checks(),
        CheckSpec("RTX 4090 case, stock: no backend at all for the draft (fails at selection)", (P.RTX4090_STOCK,),
                  lambda r, ctx: _failure(r[0], Phase.SELECTION, "No valid attention backend")),
        *(CheckSpec(f"RTX 4090 case, step {s}: runs, target and draft on FlashInfer, drafting still non-causal",
                    (P.rtx4090_run(s),), lambda r, ctx: _both(_on_flashinfer(r[0]), _fp8_non_causal(r[0], ctx["reference"])))
          for s in dict.fromkeys((4, final))),
        CheckSpec("CUDA graphs: the FLASH_ATTN draft keeps FULL_AND_PIECEWISE, step 4's FlashInfer draft turns the "
                  "engine PIECEWISE", (P.FLASH_ATTN_GRAPHS, P.STEP4_GRAPHS),
                  lambda r, ctx: _both(_graph_mode(r[0], "FULL_AND_PIECEWISE"), _graph_mode(r[1], "PIECEWISE"))),
        *_identity_checks(),
        *_mixed_checks(),
    )


def check_records(records: dict[RunId, EngineRecord], reference: dict, margin: dict | None = None) -> list[Check]:
    """Every check over one walkthrough's records (by run), the reference decoder's prediction and the committed
    near-tie margin."""
    ctx = {"reference": reference, "margin": margin}
    results = []
    for spec in checks():
        if why := spec.missing(records):
            results.append(Check(spec.name, Verdict.NOT_RUN, why))
            continue
        try:
            passed, detail = spec.judge([records[run] for run in spec.needs], ctx)
        except NotCheckable as why:
            results.append(Check(spec.name, Verdict.NOT_RUN, str(why)))
            continue
        results.append(Check(spec.name, Verdict.PASS if passed else Verdict.FAIL, detail))
    return results
