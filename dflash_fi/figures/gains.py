"""The RTX 4090 path's gain (notebook 08): what the PR makes possible where FlashInfer is the draft's only backend,
tokens/s at the median step against no speculation, read from the engine benchmark's `rtx4090` rows
(`dflash_fi.figures.costs.PathGain`) as the benchmark paired them."""

from __future__ import annotations

from dflash_fi.figures.cost_verdicts import gain_words
from dflash_fi.figures.costs import GAIN, Costs, interval_text

TAU_SAME = 0.02  # two drafts' tau this close: the same acceptance, for the verdict's words


def gain_table(costs: Costs) -> str:
    """Markdown: the RTX 4090 path per batch, tokens/s and the gains over no speculation."""
    def tps(v):
        return "-" if v is None else f"{v:.0f}"
    lines = ["| batch | no speculation, tokens/s | step 4 draft, tokens/s (over no speculation [95%]) | final draft, "
             "tokens/s (over no speculation [95%]) | final over step 4 [95%] | tau, step 4 / final |", "|---|" + "---|" * 5]
    for g in costs.gains:
        tau = " / ".join("-" if t is None else f"{t:.2f}" for t in (g.tau_step4, g.tau_final))
        lines.append(f"| {g.batch} | {tps(g.no_speculation)} | {tps(g.step4)} ({interval_text(g.step4_gain, GAIN)}) | "
                     f"{tps(g.final)} ({interval_text(g.final_gain, GAIN)}) | "
                     f"{interval_text(g.final_over_step4, GAIN)} | {tau} |")
    return "\n".join(lines)


def gain_verdict(costs: Costs, modes: dict | None = None) -> str:
    """What to see in `gain_table`: the final draft's gain, what steps 5-9 add to the PR's draft ('final over step 4'),
    whether that is time per step (the same tau, within TAU_SAME) or acceptance, and, with the path's CUDA-graph
    `modes` (`cost_engines.path_modes`), whether it holds more than the draft."""
    same = all(g.tau_step4 and g.tau_final and abs(g.tau_final / g.tau_step4 - 1) <= TAU_SAME for g in costs.gains)
    taus = ", ".join(f"{g.tau_step4:.2f} / {g.tau_final:.2f}" if g.tau_step4 and g.tau_final else "-"
                     for g in costs.gains)
    text = (f"on this path DFlash with the final draft runs at {gain_words(costs.gains, lambda g: g.final_gain)}. "
            f"What steps 5-9 add to the PR's draft there ('final over step 4') is "
            f"{gain_words(costs.gains, lambda g: g.final_over_step4, 'its tokens/s')}; "
            + (f"tau is the same in both (within {TAU_SAME:.0%}), so that is time per step, not acceptance."
               if same else f"tau, step 4 / final: {taus}, so acceptance differs too."))
    if modes and modes["pr"] != modes["path"]:
        text += (f" The two engines' CUDA graphs differ ({modes['pr']} with step 4's draft, {modes['path']} with the "
                 "final one: notebook 06's step 6), so that gain is not the draft's alone.")
    return text
