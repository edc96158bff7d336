"""Pictures of how much of the drafts the target accepts (notebooks 02-04): per draft position, and tau per run.

The runs are the committed walkthrough records (`dflash_fi.proof.evidence.report.recorded_walkthrough`); the
reference is the reference decoder's result dict (`tau_noncausal`, `tau_causal`, `per_position_acceptance`).
"""

from __future__ import annotations

from dflash_fi.records.runs import FLASH_ATTN, RunId, label, step_run
from dflash_fi.records.engine import EngineRecord
from dflash_fi.figures.style import (COINCIDE_BELOW, COLORS, figure_legend, max_difference, nearest_earlier, pyplot,
                                     series_styles, short_run_label)

# A run keeps one look wherever it is drawn (02 and 03 both draw the FLASH_ATTN draft and step 2): its place here
# picks its style; runs not here follow, in the order given.
STYLE_ORDER = (FLASH_ATTN, step_run(2), step_run(3), step_run(4))
REFERENCE_CURVES = (("noncausal", "reference decoder, non-causal", COLORS["accepted"]),
                    ("causal", "reference decoder, causal", COLORS["refused"]))
CURVE_NAME = {key: name for key, name, _ in REFERENCE_CURVES}  # the legends' names, which the verdicts quote


def why_no_numbers(record: EngineRecord | None, sep: str = "\n") -> str:
    """Why a run has no acceptance to draw, in a few words: its failure's type and phase, where it has one."""
    if not record:
        return "not recorded"
    if record.failure:
        return f"{record.failure.type}{sep}at {record.failure.phase.value}"
    return "no drafts"  # e.g. a run without speculation


def _per_position(record: EngineRecord | None) -> tuple[float, ...]:
    uniform = record.generate() if record else None
    return uniform.acceptance.per_position if uniform and uniform.acceptance else ()


def _series_label(label: str, tau: float | None, near: tuple[str, float] | None, how: str = "lies on") -> str:
    text = label if tau is None else f"{label}: tau {tau:.3f}"
    if near:
        text += f"\n    {how} {near[0]}: max difference {near[1]:.3f}"
    return text


def _closest(values: list[float], series: dict[str, list[float]]) -> tuple[str, float] | None:
    """The run whose curve is nearest a reference curve (at its worst position), and how near."""
    return min(((name, max_difference(values, run)) for name, run in series.items()), key=lambda x: x[1], default=None)


def acceptance_by_position(records: dict[RunId, EngineRecord], runs: list[RunId],
                           title: str = "Acceptance at each draft position", reference: dict | None = None,
                           coincide_below: float = COINCIDE_BELOW):
    """Per-position acceptance of the runs named, from vLLM's spec-decode counters, and with `reference` (the
    reference decoder's result) its non-causal and causal predictions as dashed curves. Series closer than
    `coincide_below` at every position are named in the legend as lying on each other. A run's style is its own
    (`STYLE_ORDER`), whichever runs are drawn with it."""
    from matplotlib.lines import Line2D

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.9), layout="constrained")
    series = {label(run): list(_per_position(records.get(run))) for run in runs if _per_position(records.get(run))}
    by_name = {label(run): run for run in runs}
    curves = {name: (reference["per_position_acceptance"][key], color)
              for key, name, color in REFERENCE_CURVES} if reference else {}
    near = nearest_earlier({**series, **{name: values for name, (values, _) in curves.items()}}, coincide_below)
    order = [*STYLE_ORDER, *(run for run in runs if run not in STYLE_ORDER)]
    styles = series_styles(len(order))
    handles, texts = [], []
    for name, values in series.items():
        handles += ax.plot(range(1, len(values) + 1), values, **styles[order.index(by_name[name])])
        texts.append(_series_label(name, records[by_name[name]].tau, near.get(name)))
    for name, (values, color) in curves.items():  # thin and on top: visible across the runs' wider lines
        handles += ax.plot(range(1, len(values) + 1), values, color=color, ls="--", lw=1.4, zorder=50)
        # a prediction the runs should follow: the nearest run is named even where it is not within coincide_below
        texts.append(_series_label(name, None, near.get(name)) if name in near
                     else _series_label(name, None, _closest(values, series), how="closest to"))
    for run in runs:
        if label(run) not in series:  # named, but nothing to draw: say so rather than drop it
            handles.append(Line2D([], [], linestyle="none"))
            texts.append(f"{label(run)}: nothing to draw ({why_no_numbers(records.get(run), sep=' ')})")
    drawn = [*series.values(), *(values for values, _ in curves.values())]
    ax.set_xticks(range(1, 1 + max(map(len, drawn), default=15)))
    ax.set_ylim(0, None)
    ax.set_xlabel("draft position (1 = first drafted token)")
    ax.set_ylabel("share of drafts accepted at this position")
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3)
    if handles:
        figure_legend(fig, handles, texts, ncol=2)
    return fig


def tau_by_step(records: dict[RunId, EngineRecord], reference: dict, runs: list[RunId],
                title: str = "Acceptance length tau of each run, against the reference decoder"):
    """tau of each run named, against the reference decoder's two predictions; a run without a tau keeps its
    place on the x axis and says why it has none (its error's type and phase)."""
    import textwrap

    from matplotlib.patches import Patch

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(9.0, 1.1 * len(runs) + 2), 4.6), layout="constrained")
    taus = {run: records[run].tau if run in records else None for run in runs}
    top = max(reference["tau_noncausal"], reference["tau_causal"], *(t for t in taus.values() if t is not None))
    for x, run in enumerate(runs):
        tau = taus[run]
        if tau is None:
            ax.text(x, 1 + 0.03 * (top - 1), f"no tau:\n{why_no_numbers(records.get(run))}", ha="center",
                    va="bottom", fontsize=8, color=COLORS["refused"])
            continue
        ax.bar(x, tau - 1, bottom=1, width=0.6, color=COLORS["bar"])
        # at the bar's foot: its top sits on a reference line wherever the run matches a prediction
        inside = tau - 1 > 0.15 * (top - 1)
        ax.text(x, 1 + 0.02 * (top - 1) if inside else tau, f"{tau:.2f}", ha="center", va="bottom", fontsize=8,
                color="white" if inside else "black")
    for key, name, color in REFERENCE_CURVES:
        tau = reference[f"tau_{key}"]
        ax.axhline(tau, color=color, ls="--", lw=1.4, label=f"{name} ({tau:.2f})")
    ax.set_xticks(range(len(runs)))
    # Wrapped, not rotated: a rotated long label takes the figure's height and runs off its side.
    ax.set_xticklabels([textwrap.fill(short_run_label(run), 19) for run in runs], fontsize=8)
    ax.set_xlim(-0.6, len(runs) - 0.4)
    ax.set_ylim(1, 1 + (top - 1) * 1.08)
    ax.set_xlabel("engine run (step N: the FLASHINFER draft with the patch up to step N)")
    ax.set_ylabel("acceptance length tau\n(tokens per target forward)")
    ax.set_title(title, fontsize=11)
    handles, texts = ax.get_legend_handles_labels()
    figure_legend(fig, [Patch(color=COLORS["bar"]), *handles], ["tau of the run (vLLM's counters)", *texts])
    return fig


def pr_tau_verdict(records: dict[RunId, EngineRecord], reference: dict) -> str:
    """What the PR's eager runs' tau says against the reference decoder's two predictions (notebook 04): step 2 at
    the causal one, steps 3 and 4 at the non-causal one, and how far an FP8 cache moves it."""
    from dflash_fi.records.runs import FP8, RTX4090_STEP4, step_run

    tau = {run: r.tau for run, r in records.items() if r.tau is not None}
    if not all(step_run(s) in tau for s in (2, 3, 4)):
        return "steps 2-4 have no tau recorded here"
    prompts = f"{reference['n_prompts']} prompts x {reference['n_new_tokens']} tokens"
    fp8 = [(name, tau[run]) for name, run in (("FP8 cache", FP8), ("the RTX 4090 case", RTX4090_STEP4)) if run in tau]
    return (f"on {prompts}: step 2 sits at '{CURVE_NAME['causal']}' ({tau[step_run(2)]:.3f} against "
            f"{reference['tau_causal']:.3f}), steps 3 and 4 at '{CURVE_NAME['noncausal']}' ({tau[step_run(3)]:.3f} and "
            f"{tau[step_run(4)]:.3f}, against {reference['tau_noncausal']:.3f}); "
            + "; ".join(f"{name} {t:.3f} ({t / tau[step_run(4)] - 1:+.1%} from step 4)" for name, t in fp8)
            + ": an FP8 cache rounds what both models attend over, so tau moves a few percent, far above the causal "
            "line.")


def causal_drift_verdict(records: dict[RunId, EngineRecord], runs, reference: dict) -> str:
    """Notebook 02's verdict on its figure: `runs` = (the FLASH_ATTN draft, step 2); how close each lies to the
    reference decoder's curve it should match, and whether step 2 is nearer the causal curve or the non-causal one."""
    fa, s2 = (records[run].generate().acceptance.per_position for run in runs)
    ref = reference["per_position_acceptance"]
    mean = {k: sum(abs(x - y) for x, y in zip(s2, ref[k])) / len(s2) for k in ("causal", "noncausal")}
    under = {k: max(abs(x - y) for x, y in zip(run, ref[k])) for k, run in (("noncausal", fa), ("causal", s2))}
    drafts = "causally" if mean["causal"] < mean["noncausal"] else "not causally"
    return (f"in the figure the dashed '{CURVE_NAME['noncausal']}' lies under the FLASH_ATTN draft's line (at most "
            f"{under['noncausal']:.3f} apart) and the dashed '{CURVE_NAME['causal']}' under step 2's (at most "
            f"{under['causal']:.3f}). On {reference['n_prompts']} prompts x {reference['n_new_tokens']} tokens, step 2 "
            f"is on average {mean['causal']:.3f} from '{CURVE_NAME['causal']}' and {mean['noncausal']:.3f} from "
            f"'{CURVE_NAME['noncausal']}': it drafts {drafts}. At the first position it accepts {s2[0]:.2f} of drafts "
            f"against the FLASH_ATTN draft's {fa[0]:.2f}.")


def noncausal_fix_verdict(records: dict[RunId, EngineRecord], runs, reference: dict) -> str:
    """Notebook 03's verdict on its figure: `runs` = (the FLASH_ATTN draft, step 2, step 3); how close step 3 lies to
    the FLASH_ATTN draft and to the reference decoder's non-causal curve, and how far below step 2 starts."""
    fa, s2, s3 = (records[run].generate().acceptance.per_position for run in runs)
    to_fa, to_ref = (max_difference(curve, s3) for curve in (fa, reference["per_position_acceptance"]["noncausal"]))
    return (f"on {reference['n_prompts']} prompts x {reference['n_new_tokens']} tokens, step 3 (tau "
            f"{records[runs[2]].tau:.3f}) lies within {to_fa:.3f} of the FLASH_ATTN draft (tau "
            f"{records[runs[0]].tau:.3f}) and {to_ref:.3f} of '{CURVE_NAME['noncausal']}' at all {len(s3)} "
            f"positions; step 2 starts {'below' if s2[0] < s3[0] else 'NOT below'} step 3 ({s2[0]:.3f} against "
            f"{s3[0]:.3f} at the first).")
