"""Pictures of how much of the drafts the target accepts (notebooks 02-04): per draft position, and tau per run.

The runs are the committed walkthrough records (`dflash_fi.evidence.report.recorded_walkthrough`); the
reference is the reference decoder's result dict (`tau_noncausal`, `tau_causal`, `per_position_acceptance`).
"""

from __future__ import annotations

from dflash_fi.engine.identity import RunId, label
from dflash_fi.engine.records import EngineRecord
from dflash_fi.figures.style import (COINCIDE_BELOW, COLORS, figure_legend, nearest_earlier, pyplot, series_styles,
                                     short_run_label)

REFERENCE_CURVES = (("noncausal", "reference decoder, non-causal", COLORS["accepted"]),
                    ("causal", "reference decoder, causal", COLORS["refused"]))


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


def _series_label(label: str, tau: float | None, near: tuple[str, float] | None) -> str:
    text = label if tau is None else f"{label}: tau {tau:.2f}"
    if near:
        text += f"\n    lies on {near[0]}: max difference {near[1]:.3f}"
    return text


def acceptance_by_position(records: dict[RunId, EngineRecord], runs: list[RunId],
                           title: str = "Acceptance at each draft position", reference: dict | None = None,
                           coincide_below: float = COINCIDE_BELOW):
    """Per-position acceptance of the runs named, from vLLM's spec-decode counters, and with `reference` (the
    reference decoder's result) its non-causal and causal predictions as dashed curves. Series closer than
    `coincide_below` at every position are named in the legend as lying on each other."""
    from matplotlib.lines import Line2D

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.6), layout="constrained")
    series = {label(run): list(_per_position(records.get(run))) for run in runs if _per_position(records.get(run))}
    by_name = {label(run): run for run in runs}
    curves = {name: (reference["per_position_acceptance"][key], color)
              for key, name, color in REFERENCE_CURVES} if reference else {}
    near = nearest_earlier({**series, **{name: values for name, (values, _) in curves.items()}}, coincide_below)
    handles, texts = [], []
    for (name, values), style in zip(series.items(), series_styles(len(series))):
        handles += ax.plot(range(1, len(values) + 1), values, **style)
        texts.append(_series_label(name, records[by_name[name]].tau, near.get(name)))
    for name, (values, color) in curves.items():  # thin and on top: visible across the runs' wider lines
        handles += ax.plot(range(1, len(values) + 1), values, color=color, ls="--", lw=1.4, zorder=50)
        texts.append(_series_label(name, None, near.get(name)))
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
        inside = tau - 1 > 0.15 * (top - 1)  # inside the bar, clear of the reference lines above
        ax.text(x, tau - 0.02 * (top - 1) if inside else tau, f"{tau:.2f}", ha="center",
                va="top" if inside else "bottom", fontsize=8, color="white" if inside else "black")
    for key, name, color in (("tau_noncausal", "reference decoder, non-causal block", COLORS["accepted"]),
                             ("tau_causal", "reference decoder, causal block", COLORS["refused"])):
        ax.axhline(reference[key], color=color, ls="--", lw=1.4, label=f"{name} ({reference[key]:.2f})")
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
