"""The RTX 4090 path's gain (`dflash-fi bench e2e`): on this GPU, FlashAttention forced to version 2 and an FP8 cache,
the draft's backend left to vLLM's selector (FlashInfer, the only one there: what PR #43081 makes possible); tokens/s at
the median step of DFlash with step 4's draft and with the final step's, over no speculation, paired by round.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from dflash_fi.proof.bench.e2e import rtx4090_runs
from dflash_fi.proof.bench.routes import kernel_of, most_common
from dflash_fi.proof.bench.stats import Estimate, estimate_json, estimate_of, median_estimate
from dflash_fi.proof.bench.turns import Turns, paired, tokens_per_s
from dflash_fi.records.outputs import BatchRun
from dflash_fi.records.runs import Pair, RunId


@dataclass(frozen=True)
class PathGain:
    """The RTX 4090 path at one batch size: tokens/s at the median step (medians over measured rounds) and the gains
    over no speculation, paired by round."""

    batch: int
    no_speculation: float | None
    step4: float | None
    final: float | None
    step4_gain: Estimate | None
    final_gain: Estimate | None
    final_over_step4: Estimate | None
    tau_step4: float | None
    tau_final: float | None
    draft_kernel_step4: str | None = None  # what the drafts' builds made (kernel-bench names, `routes.kernel_of`)
    draft_kernel_final: str | None = None

    def to_json(self) -> dict:
        return {**asdict(self), **{k: estimate_json(getattr(self, k))
                                   for k in ("step4_gain", "final_gain", "final_over_step4")}}

    @classmethod
    def from_json(cls, d: dict) -> "PathGain":
        return cls(**{**d, **{k: estimate_of(d[k]) for k in ("step4_gain", "final_gain", "final_over_step4")}})


def _ratio(turns: Turns, run: RunId, baseline: RunId, batch: int) -> Estimate | None:
    return median_estimate([a / b for a, b in paired(turns, run, baseline, batch, tokens_per_s) if b])


def _median(turns: Turns, run: RunId, batch: int, metric) -> float | None:
    values = [v for v in (metric(b) for b in turns.measured(run, batch).values()) if v is not None]
    return statistics.median(values) if values else None


def _tau(b: BatchRun) -> float | None:
    taus = [g.tau for g in b.generates if g.tau is not None]
    return statistics.median(taus) if taus else None


def path_gains(turns: Turns) -> list[PathGain]:
    """Per batch of the embedded pair: the RTX 4090 path's engines (`e2e.rtx4090_runs`)."""
    plain, step4, final = rtx4090_runs()
    if plain not in turns.engines:
        return []

    def kernel(run: RunId, batch: int) -> str | None:
        return most_common([kernel_of(b, final=run == final) for b in turns.measured(run, batch).values()])
    return [PathGain(batch, *(_median(turns, r, batch, tokens_per_s) for r in (plain, step4, final)),
                     _ratio(turns, step4, plain, batch), _ratio(turns, final, plain, batch),
                     _ratio(turns, final, step4, batch), _median(turns, step4, batch, _tau),
                     _median(turns, final, batch, _tau), kernel(step4, batch), kernel(final, batch))
            for batch in turns.batches(Pair.EMBEDDED)]
