"""The walkthrough's checks: each step against the step before, the FLASH_ATTN draft and the reference decoder.

Every check names the runs it needs; the list of checks a machine without a GPU cannot run is this list.

Tolerances, and why:
 - vLLM runs the pair in bf16, the reference decoder in fp32: greedy choices differ on near-ties, the
   sequences then diverge and draft different blocks, so tau is compared within 5% relative.
 - FLASH_ATTN and FlashInfer draft kernels sum in different orders (bf16): tau within 1%. The same 1% holds
   between engines of the same step: bf16 draft near-ties flip with the engine's memory settings, output
   tokens unchanged (runs/nvidia-h200.engine-variation.json).
 - fp8 KV quantises the cached K/V of target and draft, and changes the target's own output, so its tau is
   measured on other text. An fp8 row shows that non-causal drafting survives fp8: its tau must stay above
   the midpoint between the reference decoder's causal and non-causal tau.
 - Greedy speculative output must equal plain greedy output up to the kernels' rounding: the near-tie rule
   (`dflash_fi.evidence.near_ties`), against a baseline that differs in one thing only (`plan.BASELINES`).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Callable

from dflash_fi.evidence import plan as P
from dflash_fi.evidence.near_ties import near_tie_verdict

REFERENCE_TOLERANCE = 0.05
KERNEL_TOLERANCE = 0.01


@dataclass
class Check:
    name: str
    passed: bool | None  # None: not run (a record it needs is missing)
    detail: str

    def line(self) -> str:
        verdict = {True: "PASS", False: "FAIL", None: "NOT RUN"}[self.passed]
        return f"{verdict}  {self.name}: {self.detail}"


@dataclass(frozen=True)
class CheckSpec:
    name: str
    needs: tuple[str, ...]
    judge: Callable[[list[dict], dict], tuple[bool, str]]  # (records in `needs` order, context)


def _cut(text: str, width: int) -> str:
    """At most `width` characters, cut between words."""
    return textwrap.shorten(text, width, placeholder=" ...")


def _rel(a: float, b: float) -> float:
    return abs(a - b) / b


def _error(record: dict) -> dict:
    return record.get("error") or {}


def _failure(record: dict, phase: str, text: str) -> tuple[bool, str]:
    e = _error(record)
    return (e.get("phase") == phase and text in e.get("message", ""),
            f"{e.get('type')} at {e.get('phase')}: {_cut(e.get('message', ''), 200)}" if e else "it ran")


def _runs(*records: dict) -> str | None:
    failed = [r for r in records if not r.get("ok")]
    return None if not failed else f"{failed[0].get('label')} did not run: {_cut(str(_error(failed[0])), 200)}"


def _tau(record: dict, workload: str) -> float | None:
    return (record if workload == "uniform" else record.get(workload) or {}).get("tau")


def _same_tau(record: dict, other: dict, tolerance: float = KERNEL_TOLERANCE,
              workload: str = "uniform") -> tuple[bool, str]:
    if why := _runs(record, other):
        return False, why
    a, b = _tau(record, workload), _tau(other, workload)
    return _rel(a, b) <= tolerance, f"tau {a:.4f} vs {b:.4f} ({_rel(a, b):.2%}, tolerance {tolerance:.0%})"


def _identical(record: dict, baseline: dict, ctx: dict, workload: str = "uniform") -> tuple[bool, str]:
    if why := _runs(record, baseline):
        return False, why
    return near_tie_verdict(record, baseline, ctx.get("margin"), workload)


def _same_output_and_tau(record: dict, other: dict, ctx: dict) -> tuple[bool, str]:
    return _both(_identical(record, other, ctx), _same_tau(record, other))


def _matches_reference(record: dict, predicted: float, which: str) -> tuple[bool, str]:
    if why := _runs(record):
        return False, why
    return (_rel(record["tau"], predicted) <= REFERENCE_TOLERANCE,
            f"tau {record['tau']:.3f} vs reference {which} {predicted:.3f} ({_rel(record['tau'], predicted):.1%}, "
            f"tolerance {REFERENCE_TOLERANCE:.0%})")


def _graph_mode(record: dict, mode: str) -> tuple[bool, str]:
    if why := _runs(record):
        return False, why
    return record.get("cudagraph_mode") == mode, f"{record['label']!r} resolved {record.get('cudagraph_mode')}"


def _step2_below(s2: dict, fa: dict, ref: dict) -> tuple[bool, str]:
    if why := _runs(s2, fa):
        return False, why
    gap = 0.5 * (ref["tau_noncausal"] - ref["tau_causal"])
    return (s2["tau"] <= fa["tau"] - gap,
            f"tau {s2['tau']:.3f} vs FLASH_ATTN {fa['tau']:.3f} (must be at least {gap:.3f} below: half the "
            "reference decoder's causal gap)")


def _fp8_non_causal(fp8: dict, ref: dict) -> tuple[bool, str]:
    if why := _runs(fp8):
        return False, why
    midpoint = (ref["tau_noncausal"] + ref["tau_causal"]) / 2
    return (fp8["tau"] >= midpoint, f"tau {fp8['tau']:.3f}; must be above {midpoint:.3f}, halfway between the "
            f"reference decoder's causal ({ref['tau_causal']:.3f}) and non-causal ({ref['tau_noncausal']:.3f}) tau")


def _on_flashinfer(record: dict) -> tuple[bool, str]:
    if why := _runs(record):
        return False, why
    backends = record.get("backends") or {}
    names = {role: sorted({b.rsplit(".", 1)[-1] for b in backends.get(role, [])}) for role in ("target", "draft")}
    ok = all(names[role] == ["FlashInferBackend"] for role in names)
    return ok, (f"target on {', '.join(names['target'])}, draft on {', '.join(names['draft'])}; FlashAttention "
                f"version vLLM answers: {record.get('flash_attn_version')}")


def _mixed_batches_happened(record: dict) -> tuple[bool, str]:
    """The mixed workload changed the batch: prompts with decodes, and steps above the largest captured graph."""
    mixed = record.get("mixed") or {}
    larger = sum(v for w, v in (mixed.get("builds_larger_than_largest_graph") or {}).items() if w.startswith("target"))
    return larger > 0, (f"{mixed.get('num_requests')} requests (max_num_seqs {record['spec'].get('max_num_seqs')}); "
                        f"{larger} target-step builds above the largest captured graph "
                        f"({record.get('max_cudagraph_capture_size')} tokens)")


def _both(*verdicts: tuple[bool, str]) -> tuple[bool, str]:
    return all(ok for ok, _ in verdicts), "; ".join(detail for _, detail in verdicts)


def _identity_checks() -> list[CheckSpec]:
    return [CheckSpec(f"{run}: output identical to {baseline!r} (near-tie rule)", (run, baseline),
                      lambda r, ctx: _identical(r[0], r[1], ctx))
            for run, baselines in P.BASELINES.items() for baseline in baselines]


def _mixed_checks() -> list[CheckSpec]:
    out = []
    for run in P.MIXED_ROWS:
        for baseline in P.BASELINES[run]:
            out.append(CheckSpec(f"{run}, mixed batches: output identical to {baseline!r} (near-tie rule)",
                                 (run, baseline), lambda r, ctx: _identical(r[0], r[1], ctx, "mixed")))
        fi_target = "target" in run.split(" FLASHINFER ")[1]
        tolerance = REFERENCE_TOLERANCE if fi_target else KERNEL_TOLERANCE  # the target's own output differs
        out.append(CheckSpec(f"{run}, mixed batches: tau within {tolerance:.0%} of the FLASH_ATTN draft's, and "
                             "the batch changed shape", (run, P.FLASH_ATTN_GRAPHS),
                             lambda r, ctx, t=tolerance: _both(_same_tau(r[0], r[1], t, "mixed"),
                                                               _mixed_batches_happened(r[0]))))
    return out


S, G, GF = P.step_label, P.graphs_label, P.graphs_fi_target_label
CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec("step 0: FLASHINFER draft rejected at selection", (S(0),),
              lambda r, ctx: _failure(r[0], "selection", "non-causal attention not supported")),
    CheckSpec("step 0: FLASH_ATTN draft runs", (P.FLASH_ATTN,),
              lambda r, ctx: (bool(r[0].get("ok")), _runs(r[0]) or f"tau {r[0]['tau']:.3f}")),
    CheckSpec("step 1: selection passes, DFlash's non-causal check fails at the first draft step", (S(1),),
              lambda r, ctx: _failure(r[0], "first draft step", "does not have non-causal support")),
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
    CheckSpec("step 5: FA2 draft kernel, same output as step 4, tau within 1%", (S(5), S(4)),
              lambda r, ctx: _same_output_and_tau(r[0], r[1], ctx)),
    CheckSpec("step 6: without graphs, same output as step 5, tau within 1%", (S(6), S(5)),
              lambda r, ctx: _same_output_and_tau(r[0], r[1], ctx)),
    CheckSpec("step 7: without graphs, same output as step 6, tau within 1%", (S(7), S(6)),
              lambda r, ctx: _same_output_and_tau(r[0], r[1], ctx)),
    CheckSpec("RTX 4090 case, stock: no backend at all for the draft (fails at selection)", (P.RTX4090_STOCK,),
              lambda r, ctx: _failure(r[0], "selection", "No valid attention backend")),
    CheckSpec("RTX 4090 case, step 4: runs, target and draft on FlashInfer, drafting still non-causal",
              (P.RTX4090_STEP4,), lambda r, ctx: _both(_on_flashinfer(r[0]), _fp8_non_causal(r[0], ctx["reference"]))),
    CheckSpec("CUDA graphs: the FLASH_ATTN draft keeps FULL_AND_PIECEWISE, step 4's FlashInfer draft turns the "
              "engine PIECEWISE", (P.FLASH_ATTN_GRAPHS, P.STEP4_GRAPHS),
              lambda r, ctx: _both(_graph_mode(r[0], "FULL_AND_PIECEWISE"), _graph_mode(r[1], "PIECEWISE"))),
    *(CheckSpec(f"step {s}, CUDA graphs: the engine keeps FULL_AND_PIECEWISE, with FlashInfer as target too",
                (G(s), GF(s)), lambda r, ctx: _both(_graph_mode(r[0], "FULL_AND_PIECEWISE"),
                                                    _graph_mode(r[1], "FULL_AND_PIECEWISE")))
      for s in P.GRAPH_STEPS),
    *(CheckSpec(f"step {s}, CUDA graphs: tau within 1% of the FLASH_ATTN draft's", (G(s), P.FLASH_ATTN_GRAPHS),
                lambda r, ctx: _same_tau(r[0], r[1])) for s in P.GRAPH_STEPS),
    CheckSpec("step 7, CUDA graphs: same output as step 6, tau within 1%", (G(7), G(6)),
              lambda r, ctx: _same_output_and_tau(r[0], r[1], ctx)),
    CheckSpec("step 7, CUDA graphs, FlashInfer target too: same output as step 6", (GF(7), GF(6)),
              lambda r, ctx: _identical(r[0], r[1], ctx)),
    *_identity_checks(),
    *_mixed_checks(),
)


def check_records(records: dict[str, dict], reference: dict, margin: dict | None = None) -> list[Check]:
    """Every check over one walkthrough's records (label -> record), the reference decoder's prediction and the
    committed near-tie margin."""
    ctx = {"reference": reference, "margin": margin}
    results = []
    for spec in CHECKS:
        missing = [label for label in spec.needs if label not in records]
        if missing:
            results.append(Check(spec.name, None, f"no record of {', '.join(map(repr, missing))}"))
            continue
        passed, detail = spec.judge([records[label] for label in spec.needs], ctx)
        results.append(Check(spec.name, bool(passed), detail))
    return results
