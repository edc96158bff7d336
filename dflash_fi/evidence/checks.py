"""The walkthrough's checks: each step against the step before, the FLASH_ATTN draft and the reference decoder.

Every check names the runs it needs; the list of checks a machine without a GPU cannot run is this list.

Tolerances, and why:
 - vLLM runs the pair in bf16, the reference decoder in fp32: greedy choices differ on near-ties, the
   sequences then diverge and draft different blocks, so tau is compared within 5% relative.
 - FLASH_ATTN and FlashInfer draft kernels sum in different orders (bf16): tau within 1%. The same 1% holds
   between engines of the same step: bf16 draft near-ties flip with the engine's memory settings, output
   tokens unchanged (runs/nvidia-h200.engine-variation.json).
 - fp8 KV quantises the cached K/V of target and draft, and changes the target's own output, so its tau is
   measured on other text. The row shows that non-causal drafting survives fp8: its tau must stay above
   the midpoint between the reference decoder's causal and non-causal tau.
 - Greedy speculative output must equal plain greedy output; bf16 near-ties can flip a prompt, so at
   least 90% of prompts must be identical (the records show how many are).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from dflash_fi.evidence import plan as P

REFERENCE_TOLERANCE = 0.05
KERNEL_TOLERANCE = 0.01
MIN_AGREEMENT = 0.90


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
    judge: Callable[[list[dict], dict], tuple[bool, str]]  # (records in `needs` order, reference)


def agreement(record: dict, baseline: dict) -> float | None:
    """Fraction of prompts whose output is identical to the baseline's."""
    if not (record.get("ok") and baseline.get("ok")):
        return None
    return sum(a == b for a, b in zip(record["tokens"], baseline["tokens"])) / len(baseline["tokens"])


def _rel(a: float, b: float) -> float:
    return abs(a - b) / b


def _error(record: dict) -> dict:
    return record.get("error") or {}


def _failure(record: dict, phase: str, text: str) -> tuple[bool, str]:
    e = _error(record)
    return (e.get("phase") == phase and text in e.get("message", ""),
            f"{e.get('type')} at {e.get('phase')}: {e.get('message', '')[:140]}" if e else "it ran")


def _runs(*records: dict) -> str | None:
    failed = [r for r in records if not r.get("ok")]
    return None if not failed else f"{failed[0].get('label')} did not run: {str(_error(failed[0]))[:160]}"


def _same_tau(record: dict, other: dict, tolerance: float = KERNEL_TOLERANCE) -> tuple[bool, str]:
    if why := _runs(record, other):
        return False, why
    return (_rel(record["tau"], other["tau"]) <= tolerance,
            f"tau {record['tau']:.4f} vs {other['tau']:.4f} ({_rel(record['tau'], other['tau']):.2%}, "
            f"tolerance {tolerance:.0%})")


def _same_output_and_tau(record: dict, other: dict) -> tuple[bool, str]:
    if why := _runs(record, other):
        return False, why
    same = record["tokens_sha256"] == other["tokens_sha256"]
    tau_ok, detail = _same_tau(record, other)
    return same and tau_ok, f"{detail}; tokens {'identical' if same else 'differ'}"


def _matches_reference(record: dict, predicted: float, which: str) -> tuple[bool, str]:
    if why := _runs(record):
        return False, why
    return (_rel(record["tau"], predicted) <= REFERENCE_TOLERANCE,
            f"tau {record['tau']:.3f} vs reference {which} {predicted:.3f} ({_rel(record['tau'], predicted):.1%}, "
            f"tolerance {REFERENCE_TOLERANCE:.0%})")


def _mostly_identical(record: dict, baseline: dict) -> tuple[bool, str]:
    if why := _runs(record, baseline):
        return False, why
    a = agreement(record, baseline)
    return a >= MIN_AGREEMENT, f"{a:.1%} of prompts identical to {baseline['label']!r} (at least {MIN_AGREEMENT:.0%})"


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


def _fp8_non_causal(fp8: dict, bf16: dict, ref: dict) -> tuple[bool, str]:
    if why := _runs(fp8, bf16):
        return False, why
    midpoint = (ref["tau_noncausal"] + ref["tau_causal"]) / 2
    return (fp8["tau"] >= midpoint,
            f"tau {fp8['tau']:.3f} ({(fp8['tau'] - bf16['tau']) / bf16['tau']:+.2%} from bf16 {bf16['tau']:.3f}); "
            f"must be above {midpoint:.3f}, halfway between the reference decoder's causal and non-causal tau")


def _both(*verdicts: tuple[bool, str]) -> tuple[bool, str]:
    return all(ok for ok, _ in verdicts), "; ".join(detail for _, detail in verdicts)


S = P.step_label
CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec("step 0: FLASHINFER draft rejected at selection", (S(0),),
              lambda r, ref: _failure(r[0], "selection", "non-causal attention not supported")),
    CheckSpec("step 0: FLASH_ATTN draft runs", (P.FLASH_ATTN,),
              lambda r, ref: (bool(r[0].get("ok")), _runs(r[0]) or f"tau {r[0]['tau']:.3f}")),
    CheckSpec("step 1: selection passes, DFlash's non-causal check fails at the first draft step", (S(1),),
              lambda r, ref: _failure(r[0], "first draft step", "does not have non-causal support")),
    CheckSpec("step 2: runs, tau clearly below the FLASH_ATTN draft", (S(2), P.FLASH_ATTN),
              lambda r, ref: _step2_below(r[0], r[1], ref)),
    CheckSpec("step 2: tau matches the reference decoder's causal-block tau", (S(2),),
              lambda r, ref: _matches_reference(r[0], ref["tau_causal"], "causal")),
    CheckSpec("step 3: tau equals the FLASH_ATTN draft's (within 1%)", (S(3), P.FLASH_ATTN),
              lambda r, ref: _same_tau(r[0], r[1])),
    CheckSpec("step 3: tau matches the reference decoder's non-causal tau", (S(3),),
              lambda r, ref: _matches_reference(r[0], ref["tau_noncausal"], "non-causal")),
    CheckSpec("step 3: output identical to no speculation on at least 90% of prompts", (S(3), P.NO_SPEC),
              lambda r, ref: _mostly_identical(r[0], r[1])),
    CheckSpec("step 4: same output as step 3, tau within 1% (TRTLLM gating changes no kernel here)", (S(4), S(3)),
              lambda r, ref: _same_output_and_tau(r[0], r[1])),
    CheckSpec("step 4: fp8 KV cache runs, drafting still non-causal", (P.FP8, S(4)),
              lambda r, ref: _fp8_non_causal(r[0], r[1], ref)),
    CheckSpec("step 5: FA2 draft kernel, same output as step 4, tau within 1%", (S(5), S(4)),
              lambda r, ref: _same_output_and_tau(r[0], r[1])),
    CheckSpec("step 6: without graphs, same output as step 5, tau within 1%", (S(6), S(5)),
              lambda r, ref: _same_output_and_tau(r[0], r[1])),
    CheckSpec("CUDA graphs: the FLASH_ATTN draft keeps FULL_AND_PIECEWISE, step 4's FlashInfer draft turns the "
              "engine PIECEWISE", (P.FLASH_ATTN_GRAPHS, P.STEP4_GRAPHS),
              lambda r, ref: _both(_graph_mode(r[0], "FULL_AND_PIECEWISE"), _graph_mode(r[1], "PIECEWISE"))),
    CheckSpec("step 6, CUDA graphs: the engine keeps FULL_AND_PIECEWISE", (P.FINAL_GRAPHS,),
              lambda r, ref: _graph_mode(r[0], "FULL_AND_PIECEWISE")),
    CheckSpec("step 6, CUDA graphs: output identical to no speculation on at least 90% of prompts",
              (P.FINAL_GRAPHS, P.NO_SPEC_GRAPHS), lambda r, ref: _mostly_identical(r[0], r[1])),
    CheckSpec("step 6, CUDA graphs: tau within 1% of the FLASH_ATTN draft's", (P.FINAL_GRAPHS, P.FLASH_ATTN_GRAPHS),
              lambda r, ref: _same_tau(r[0], r[1])),
    CheckSpec("step 6, CUDA graphs, FlashInfer target too: FULL_AND_PIECEWISE, output identical to no "
              "speculation on at least 90% of prompts", (P.FINAL_GRAPHS_FI_TARGET, P.NO_SPEC_GRAPHS),
              lambda r, ref: _both(_graph_mode(r[0], "FULL_AND_PIECEWISE"), _mostly_identical(r[0], r[1]))),
)


def check_records(records: dict[str, dict], reference: dict) -> list[Check]:
    """Every check over one walkthrough's records (label -> record) and the reference decoder's prediction."""
    results = []
    for spec in CHECKS:
        missing = [label for label in spec.needs if label not in records]
        if missing:
            results.append(Check(spec.name, None, f"no record of {', '.join(map(repr, missing))}"))
            continue
        passed, detail = spec.judge([records[label] for label in spec.needs], reference)
        results.append(Check(spec.name, bool(passed), detail))
    return results
