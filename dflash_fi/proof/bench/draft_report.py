"""The draft's cost, its kernel against the kernel benchmark (each kernel's share of copy bandwidth beside it) and the
RTX 4090 path's gain, as markdown tables (`dflash_fi.proof.bench.draft_cost` and `rtx4090` hold the numbers)."""

from __future__ import annotations

from dflash_fi.proof.bench.draft_cost import KERNEL_CONTEXT, KERNEL_TOLERANCE, DraftCost, KernelShare, PathGain
from dflash_fi.proof.bench.stats import Estimate

def _interval(e: Estimate | None, fmt: str) -> str:
    return "-" if e is None else f"{fmt.format(e.value)} [{fmt.format(e.low)}, {fmt.format(e.high)}]"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def draft_cost_table(costs: list[DraftCost]) -> str:
    """Markdown: per pair and batch, the draft's attention (GPU) and builds (host) per decoding step, each engine's and
    the final FlashInfer draft's difference from the FLASH_ATTN draft [95%], beside the A/A pair's."""
    lines = ["| pair, batch | final draft's kernel | attention ms: FLASH_ATTN / final | final - FLASH_ATTN [95%] | "
             "A/A [95%] (bound) | host build ms: FLASH_ATTN / final | final - FLASH_ATTN [95%] | A/A [95%] | "
             "build: at most +0 ms (high end +0.005)? |", "|---|---|---|---|---|---|---|---|---|"]
    for c in costs:
        bound = "-" if c.aa_bound_ms is None else f"+-{c.aa_bound_ms:.4f}"
        lines.append(
            f"| {c.pair.value}, {c.batch} | {c.final.kernel or '-'} | {_ms(c.flash_attn.attention_ms)} / "
            f"{_ms(c.final.attention_ms)} | {_interval(c.attention, '{:+.4f}')} | "
            f"{_interval(c.attention_aa, '{:+.4f}')} ({bound}{'' if c.aa_within else ', **outside**'}) | "
            f"{c.flash_attn.build_ms:.3f} / {c.final.build_ms:.3f} | {_interval(c.build, '{:+.4f}')} | "
            f"{_interval(c.build_aa, '{:+.4f}')} | {c.build_outcome.value} |")
    return "\n".join(lines)


def kernel_share_table(costs: list[DraftCost]) -> str:
    """Markdown: per engine shape, the final draft's kernel against the fastest FlashInfer kernel a draft can run and
    vLLM's FlashAttention, at the kernel bench's matching shape, each with its ms and share of copy bandwidth."""
    def cell(c: DraftCost, kernel: str | None) -> str:
        s: KernelShare | None = next((k for k in c.kernels if k.kernel == kernel), None)
        return "-" if s is None else f"{s.kernel} {s.ms:.4f} ms ({s.share_of_copy:.0%})"
    lines = [f"| pair, batch x {KERNEL_CONTEXT} | final draft's kernel | fastest FlashInfer kernel | vLLM FlashAttention | "
             f"final within {KERNEL_TOLERANCE - 1:.0%} of the fastest? |", "|---|---|---|---|---|"]
    for c in costs:
        lines.append(f"| {c.pair.value}, {c.batch} | {cell(c, c.final.kernel)} | {cell(c, c.fastest_flashinfer)} | "
                     f"{cell(c, 'vllm-flash-attn')} | {c.kernel_outcome.value} |")
    return "\n".join(lines)


def gain_table(gains: list[PathGain]) -> str:
    """Markdown: the RTX 4090 path per batch, tokens/s and the gains over no speculation [95%]."""
    def tps(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    def tau(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"
    lines = ["| batch | no speculation, tokens/s | step 4 draft, tokens/s (tau) | final draft, tokens/s (tau) | "
             "step 4 / none [95%] | final / none [95%] | final / step 4 [95%] |", "|---|---|---|---|---|---|---|"]
    for g in gains:
        lines.append(f"| {g.batch} | {tps(g.no_speculation)} | {tps(g.step4)} ({tau(g.tau_step4)}) | "
                     f"{tps(g.final)} ({tau(g.tau_final)}) | {_interval(g.step4_gain, '{:.2f}x')} | "
                     f"{_interval(g.final_gain, '{:.2f}x')} | {_interval(g.final_over_step4, '{:.3f}x')} |")
    return "\n".join(lines)



def headline(found) -> str:
    """The README's line on the draft's cost and the RTX 4090 path's gain (`found`: draft_cost.DraftCosts), counted
    from the verdicts the benchmark recorded."""
    from dflash_fi.proof.bench.stats import Outcome

    costs, n = found.costs, len(found.costs)
    build = {o: sum(c.build_outcome is o for c in costs) for o in Outcome}
    text = (f"- The draft's cost inside the engine, the final FlashInfer draft against the FLASH_ATTN draft at {n} "
            f"shapes (95% intervals): its host build at most the FLASH_ATTN draft's at {build[Outcome.MET]} "
            f"({build[Outcome.MISSED]} missed, {build[Outcome.UNRESOLVED]} unresolved); its route on the fastest "
            f"FlashInfer kernel at {sum(c.kernel_outcome is Outcome.MET for c in costs)}; the A/A pair within its bound "
            f"at {sum(c.aa_within for c in costs)}.")

    def spread(pick) -> str:
        values = sorted(pick(g).value for g in found.gains if pick(g) is not None)
        return "not measured" if not values else (f"{values[0]:.2f}x" if values[0] == values[-1] else
                                                   f"{values[0]:.2f}-{values[-1]:.2f}x")
    if found.gains:
        text += (f" The RTX 4090 path (FlashAttention 2, an FP8 cache; batches "
                 f"{', '.join(str(g.batch) for g in found.gains)}): DFlash with the final draft at "
                 f"{spread(lambda g: g.final_gain)} no speculation's tokens/s, with the PR's step-4 draft at "
                 f"{spread(lambda g: g.step4_gain)}.")
    return text


def results_section(found) -> list[str]:
    """docs/RESULTS.md's part on the draft's cost: its three tables."""
    return ["## The draft's cost, inside the engine", "", "The final FlashInfer draft against the FLASH_ATTN draft, per "
            "decoding step, paired by round, with the A/A pair (the FLASH_ATTN draft's twin) beside it.", "",
            draft_cost_table(list(found.costs)), "", "### Its kernel against the kernel benchmark", "",
            kernel_share_table(list(found.costs)), "", "### The RTX 4090 path", "", gain_table(list(found.gains)), ""]
