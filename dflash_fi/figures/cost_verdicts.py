"""What notebook 08's figure and tables say, from their numbers (`dflash_fi.figures.costs`): one noise rule for every
verdict (a difference is real only where its whole interval lies beyond the A/A pair's bound), the targets as the
benchmark judged them, and the bottom line."""

from __future__ import annotations

from dflash_fi.figures.costs import FLASH_ATTN_KERNEL, GAIN, KERNEL_NAMES, Costs, Interval, ShapeCost, interval_text
from dflash_fi.records.checks import Outcome


def beyond_noise(e: Interval | None, bound: float | None) -> int:
    """+1 where the whole interval lies above the A/A pair's bound (a real cost), -1 where it lies below minus it (a
    real saving), 0 where it reaches into the noise (level) or was not measured."""
    bound = bound or 0.0
    return 0 if e is None else (e.low > bound) - (e.high < -bound)


def _side(s: ShapeCost) -> int:
    """+1 where the final draft costs more (its build or its attention), -1 where it costs less, 0 where level."""
    sides = {beyond_noise(s.build, s.build_bound), beyond_noise(s.attention, s.aa_bound_ms)}
    return 1 if 1 in sides else -1 if -1 in sides else 0


def figure_verdict(costs: Costs) -> str:
    """What to see in `cost_figure`, from its numbers."""
    noise = max((aa.high - aa.low for s in costs.shapes for aa in (s.build_aa, s.attention_aa) if aa), default=0.0)
    real = [s.name for s in costs.shapes if _side(s)]
    bounds = sorted({f"{s.aa_bound_ms:.3f}" for s in costs.shapes if s.aa_bound_ms is not None})
    bound = " to ".join(bounds[::max(len(bounds) - 1, 1)]) or "?"
    n, within = len(costs.shapes), sum(s.aa_within for s in costs.shapes)
    return (f"the grey bars are noise: two FLASH_ATTN drafts that differ in nothing give intervals up to {noise:.3f} ms "
            f"wide, within their bound (±{bound} ms{_bound_rule(costs)}) at {within} of {n} shapes. A marker is a "
            f"real difference only where its whole interval lies beyond that bound: at {len(real)} of {n} shapes"
            f"{_which(costs, real)}; elsewhere the two drafts are level.")


def _bound_rule(costs: Costs) -> str:
    """How the benchmark sets the A/A bound, from its method: ', 2% of the FLASH_ATTN draft's cost or 0.005 ms, the
    larger'."""
    m = costs.method
    if "aa_share" not in m or "aa_ms" not in m:
        return ""
    return f": {m['aa_share']:.0%} of the FLASH_ATTN draft's cost or {m['aa_ms']} ms, the larger"


def _which(costs: Costs, names: list[str]) -> str:
    """': a; b', or ', all but c' where that is the shorter list: the reader is told the few."""
    rest = [s.name for s in costs.shapes if s.name not in names]
    if not names or not rest:
        return ""
    return ": " + "; ".join(names) if len(names) <= len(rest) else ", all but " + "; ".join(rest)


def targets_verdict(costs: Costs) -> str:
    """What to see in `cost_table`: each target's outcomes, with the bounds the benchmark judged them by."""
    m, n = costs.method, len(costs.shapes)
    count = {o: sum(s.build_outcome is o for s in costs.shapes) for o in Outcome}
    bounds = (f" (at most 0 ms, the interval's high end at most +{m['build_ceiling_ms']} ms)"
              if "build_ceiling_ms" in m else "")
    within = f" (within {m['kernel_tolerance'] - 1:.0%})" if "kernel_tolerance" in m else ""
    return (f"the host-build target{bounds} is met at {count[Outcome.MET]} of {n} shapes, missed at "
            f"{count[Outcome.MISSED]}, unresolved at {count[Outcome.UNRESOLVED]} (its interval too wide to say; the "
            f"target asks more than the figure's 'level'); the route runs the fastest FlashInfer kernel{within} at {sum(s.kernel_outcome is Outcome.MET for s in costs.shapes)}"
            f". The A/A pair stayed within its bound at {sum(s.aa_within for s in costs.shapes)}"
            + ("." if all(s.aa_within for s in costs.shapes) else ": where it did not, that shape's intervals are as "
               "wide as noise."))


def bottom_line(costs: Costs | None) -> str:
    """Where the final draft stands against the FLASH_ATTN draft (beyond the A/A pair's noise, or level) and why (its
    host build or its kernel, with the kernels' shares of copy bandwidth), then the RTX 4090 path's gain; without
    `costs`, that it is not recorded yet."""
    if costs is None:
        return "where the final draft stands is not recorded yet: the GPU pass measures it."
    shapes, n = costs.shapes, len(costs.shapes)
    behind = [s for s in shapes if _side(s) == 1]
    ahead = [s for s in shapes if _side(s) == -1]
    kernel = [s for s in behind if beyond_noise(s.attention, s.aa_bound_ms) == 1]
    share = {s: (_gap(s, "value"), _gap(s, "high")) for s in behind if s.step_ms}  # of the FLASH_ATTN draft's step
    level = n - len(behind) - len(ahead)
    text = (f"beyond the noise, the final FlashInfer draft costs more per decoding step than the FLASH_ATTN draft at "
            f"{len(behind)} of {n} shapes, less at {len(ahead)}" + (f", and is level at {level}." if level else "."))
    if behind:
        why = ("the kernel" if len(kernel) == len(behind) else "the host build" if not kernel else
               f"the kernel at {len(kernel)} of them and the host build at {len(behind) - len(kernel)}")
        worst = max(behind, key=lambda s: max(s.attention.value if s.attention else 0, s.build.value if s.build else 0))
        ran, fa = worst.kernel(worst.route), worst.kernel(FLASH_ATTN_KERNEL)
        text += (f" Where it costs more, it is {why}. The largest gap, at {worst.name}, is "
                 f"{interval_text(worst.attention)} ms of attention and {interval_text(worst.build)} ms of build a "
                 f"step, on {KERNEL_NAMES.get(worst.route, worst.route or 'a kernel not recorded')}"
                 + (f" at {ran.share_of_copy:.0%} of copy bandwidth" if ran else "")
                 + (f" where FlashAttention reaches {fa.share_of_copy:.0%}" if fa else "") + ".")
    if share:
        most = max(share, key=lambda s: share[s][0] / s.step_ms)
        text += (f" That is {share[most][0] / most.step_ms:.1%} of the FLASH_ATTN draft's {most.step_ms:.2f}-ms "
                 f"decoding step ({most.name}; {share[most][1] / most.step_ms:.1%} at the intervals' high ends; less "
                 "where the host build overlaps the GPU's work).")
    text += (f" So on the {costs.gpu} the FLASH_ATTN draft stays the better backend for the draft where they differ;"
             if behind and not ahead else f" So on the {costs.gpu} neither draft is better everywhere;" if behind
             else f" So on the {costs.gpu} the final FlashInfer draft is as good a backend for the draft as FLASH_ATTN;")
    return text + " FlashInfer's own case is the RTX 4090 path. " + gains_sentence(costs)


def _gap(s: ShapeCost, end: str) -> float:
    """The final draft's extra ms a step, attention and build, at the intervals' `end` ('value' or 'high'); a part
    below 0 counts 0."""
    return sum(max(getattr(e, end), 0) for e in (s.attention, s.build) if e is not None)


def gain_words(gains, pick, what: str = "no speculation's tokens/s") -> str:
    """'2.20x <what> at every batch', or '1.90x, 2.20x <what> at batch 1, 8': `pick(gain)`'s medians."""
    shown = ["-" if pick(g) is None else GAIN.format(pick(g).value) for g in gains]
    if len(set(shown)) == 1:
        return f"{shown[0]} {what} at every batch"
    return f"{', '.join(shown)} {what} at batch {', '.join(str(g.batch) for g in gains)}"


def gains_sentence(costs: Costs) -> str:
    """The bottom line's sentence on the RTX 4090 path: both drafts' gains."""
    if not costs.gains:
        return "That path's gain is not recorded yet."
    return (f"On that path FlashInfer is the draft's only backend, and DFlash with the final draft runs at "
            f"{gain_words(costs.gains, lambda g: g.final_gain)}; with the PR's own step-4 draft at "
            f"{gain_words(costs.gains, lambda g: g.step4_gain)}.")
