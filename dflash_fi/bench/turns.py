"""The engine benchmark's results (`dflash-fi bench e2e`: engines in turns): paired rounds, intervals and targets.

Embedded pair: tokens/s at the median step (`GenerateResult.decode_tokens_per_s`) of the final FlashInfer draft over
the FLASH_ATTN draft's. Qwen3-4B shape: time per decoding step (the median interval between engine steps), FlashInfer over FLASH_ATTN, minus 1. Host build time: the
attention metadata builds per decoding step, summed over builders, final FlashInfer draft minus FLASH_ATTN draft.
Each with a 95% interval over the measured rounds (`dflash_fi.bench.stats`), beside the A/A pair's.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from enum import Enum

from dflash_fi.bench.e2e import flash_attn_draft, flashinfer_draft
from dflash_fi.bench.stats import AtLeast, AtMost, Estimate, Verdict, median_estimate, round_to_round
from dflash_fi.engine.identity import Pair, RunId, label
from dflash_fi.engine.records import BatchRun, BuildKey, EngineRecord, Role
import dflash_fi.summary as S

TOKENS_TARGET = AtLeast(1.00, floor=0.97)  # issue #32's targets; tokens/s, final FlashInfer / FLASH_ATTN draft
STEP_GAP_TARGET = AtMost(0.02)  # Qwen3-4B shape: step time / FLASH_ATTN draft's - 1
BUILD_TARGET_MS = AtMost(0.0, ceiling=0.02)  # host build ms per step, final - FLASH_ATTN


@dataclass(frozen=True)
class Turns:
    """One committed engine benchmark: its engines by run, and where it came from."""

    engines: dict  # RunId -> EngineRecord
    warm_up_rounds: int
    file: str
    gpu: str
    compute_capability: str
    git_commit: str
    finished_at: str

    def pairs(self) -> list[Pair]:
        return list(dict.fromkeys(run.pair for run in self.engines))

    def runs(self, pair: Pair) -> list[RunId]:
        return [run for run in self.engines if run.pair is pair]

    def batches(self, pair: Pair) -> list[int]:
        return sorted({b.batch for run in self.runs(pair) for r in self.engines[run].rounds for b in r.batches})

    def measured(self, run: RunId, batch: int) -> dict[int, BatchRun]:
        """Round index -> that round's batch run, measured rounds only."""
        record = self.engines.get(run)
        return {r.index: b for r in (record.rounds if record else ()) if r.index > self.warm_up_rounds
                for b in r.batches if b.batch == batch}


def latest_turns(summary: S.Summary | None = None) -> Turns:
    """The engine benchmark of the evidence summary (its rounds are the summary's compressed rows)."""
    summary = summary or S.read()
    return turns_of(summary.rows(S.Section.BENCH_E2E), summary.rows_path.name)


def turns_of(data: dict, file: str) -> Turns:
    """A benchmark's results (`run_e2e_bench`) as `Turns`."""
    engines = {r.run: r for r in (EngineRecord.from_json(e) for e in data["engines"])}
    return Turns(engines, data["warm_up_rounds"], file, data["gpu"], data["compute_capability"],
                 data["git_commit"], data["finished_at"])


def stored_targets(summary: S.Summary | None = None) -> list["Target"]:
    """The targets as the benchmark judged them, when it ran."""
    return [Target.from_json(t) for t in (summary or S.read()).entry(S.Section.BENCH_E2E).data["targets"]]


def tokens_per_s(b: BatchRun) -> float:
    """Tokens/s at the median step: tokens per engine step over the median interval between steps."""
    return b.decode_tokens_per_s


def step_ms(b: BatchRun) -> float:
    return b.step_ms


def build_ms(b: BatchRun) -> float:
    """Host ms of the metadata builds per decoding step, all builders, median over the batch run's generates."""
    return statistics.median(g.build_ms_per_step() for g in b.generates)


def paired(turns: Turns, run: RunId, baseline: RunId, batch: int, metric=tokens_per_s) -> list[tuple[float, float]]:
    ours, theirs = turns.measured(run, batch), turns.measured(baseline, batch)
    return [(metric(ours[k]), metric(theirs[k])) for k in sorted(ours) if k in theirs]


def ratio(turns: Turns, run: RunId, baseline: RunId, batch: int, metric=tokens_per_s) -> Estimate | None:
    return median_estimate([a / b for a, b in paired(turns, run, baseline, batch, metric)])


def difference(turns: Turns, run: RunId, baseline: RunId, batch: int, metric=build_ms) -> Estimate | None:
    return median_estimate([a - b for a, b in paired(turns, run, baseline, batch, metric)])


def median_of_rounds(turns: Turns, run: RunId, batch: int, metric=tokens_per_s) -> float | None:
    values = [metric(b) for b in turns.measured(run, batch).values()]
    return statistics.median(values) if values else None


def stability(turns: Turns, run: RunId, batch: int, metric=step_ms) -> tuple[float, float] | None:
    """The median and the largest move of one engine's value (default its step time, which the host moves and the
    prompt hardly does: batch-1 turns change prompt every two rounds) from one measured round to the next."""
    rounds = turns.measured(run, batch)
    return round_to_round([metric(rounds[k]) for k in sorted(rounds)])


class Metric(Enum):
    TOKENS = "tokens/s"
    STEP_TIME = "step time"
    HOST_BUILD = "host build"


@dataclass(frozen=True)
class Target:
    pair: Pair
    batch: int
    what: Metric
    estimate: Estimate | None
    aa: Estimate | None  # the same comparison between the two FLASH_ATTN draft engines
    verdict: Verdict

    def to_json(self) -> dict:
        def est(e):
            return None if e is None else {"value": e.value, "low": e.low, "high": e.high}
        return {"pair": self.pair.value, "batch": self.batch, "what": self.what.name, "estimate": est(self.estimate),
                "aa": est(self.aa), "verdict": self.verdict.name}

    @classmethod
    def from_json(cls, d: dict) -> "Target":
        def est(e):
            return None if e is None else Estimate(e["value"], e["low"], e["high"], ())
        return cls(Pair(d["pair"]), d["batch"], Metric[d["what"]], est(d["estimate"]), est(d["aa"]), Verdict[d["verdict"]])


def targets(turns: Turns) -> list[Target]:
    """Every target, judged on a benchmark's rounds: the final FlashInfer draft against the FLASH_ATTN draft."""
    out = []
    for pair in turns.pairs():
        fa, aa, final = flash_attn_draft(pair), flash_attn_draft(pair, 1), flashinfer_draft(pair)
        for batch in turns.batches(pair):
            if pair is Pair.EMBEDDED:
                e = ratio(turns, final, fa, batch)
                out.append(Target(pair, batch, Metric.TOKENS, e, ratio(turns, aa, fa, batch), TOKENS_TARGET.judge(e)))
            else:
                r = ratio(turns, final, fa, batch, step_ms)
                e = r and Estimate(r.value - 1, r.low - 1, r.high - 1, tuple(v - 1 for v in r.rounds))
                a = ratio(turns, aa, fa, batch, step_ms)
                a = a and Estimate(a.value - 1, a.low - 1, a.high - 1, tuple(v - 1 for v in a.rounds))
                out.append(Target(pair, batch, Metric.STEP_TIME, e, a, STEP_GAP_TARGET.judge(e)))
            d = difference(turns, final, fa, batch)
            out.append(Target(pair, batch, Metric.HOST_BUILD, d, difference(turns, aa, fa, batch), BUILD_TARGET_MS.judge(d)))
    return out


def _interval(e: Estimate | None, fmt: str) -> str:
    return "-" if e is None else f"{fmt.format(e.value)} [{fmt.format(e.low)}, {fmt.format(e.high)}]"


def targets_table(found: list[Target]) -> str:
    """Markdown: each target, the final FlashInfer draft's estimate and 95% interval, the A/A pair's, the verdict."""
    wanted = {Metric.TOKENS: f"tokens/s at the median step at least {TOKENS_TARGET.threshold}x "
                             f"(low end {TOKENS_TARGET.floor}x)",
              Metric.STEP_TIME: f"step time at most {STEP_GAP_TARGET.threshold:+.0%}",
              Metric.HOST_BUILD: f"host build per step at most {BUILD_TARGET_MS.threshold:+.2f} ms (high end {BUILD_TARGET_MS.ceiling:+.2f} ms)"}
    fmt = {Metric.TOKENS: "{:.4f}x", Metric.STEP_TIME: "{:+.1%}", Metric.HOST_BUILD: "{:+.3f} ms"}  # 0.9699x, not 0.970x
    lines = ["| pair, batch | target, against the FLASH_ATTN draft | final FlashInfer draft [95%] | A/A pair [95%] | "
             "verdict |", "|---|---|---|---|---|"]
    for t in found:
        lines.append(f"| {t.pair.value}, {t.batch} | {wanted[t.what]} | {_interval(t.estimate, fmt[t.what])} | "
                     f"{_interval(t.aa, fmt[t.what])} | {t.verdict.value} |")
    return "\n".join(lines)


def turns_table(turns: Turns, pair: Pair) -> str:
    """Markdown, one row per batch: each engine's median over measured rounds (tokens/s, or ms per step for the
    Qwen3-4B shape) and how far its step time moved from one round to the next (median, largest)."""
    runs = turns.runs(pair)
    metric, fmt = (tokens_per_s, "{:.0f}") if pair is Pair.EMBEDDED else (step_ms, "{:.3f}")
    unit = "tokens/s at the median step" if pair is Pair.EMBEDDED else "ms per step"
    lines = ["| batch | " + " | ".join(f"{label(run)}, {unit} (step time's move between rounds: median, largest)"
                                       for run in runs) + " |",
             "|---|" + "---|" * len(runs)]
    for batch in turns.batches(pair):
        cells = []
        for run in runs:
            value, move = median_of_rounds(turns, run, batch, metric), stability(turns, run, batch)
            moved = f" ({move[0]:.1%}, {move[1]:.1%})" if move else ""
            cells.append("-" if value is None else fmt.format(value) + moved)
        lines.append(f"| {batch} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def builds_per_step(turns: Turns, run: RunId, batch: int) -> dict[BuildKey, tuple[float, float]]:
    """Each builder of one engine at this batch: (builds, host ms) per decoding step, medians over the measured rounds'
    generates; the model runner's builders (one per attention group) first, then the drafter's."""
    rounds = list(turns.measured(run, batch).values())
    keys = dict.fromkeys(t.key for b in rounds for g in b.generates for t in g.builds)
    out = {}
    for key in sorted(keys, key=lambda k: k.role is not Role.TARGET):
        per = [(t.builds / max(g.steps, 1), t.seconds * 1000 / max(g.steps, 1))
               for b in rounds for g in b.generates for t in g.builds if t.key == key]
        out[key] = (statistics.median(p[0] for p in per), statistics.median(p[1] for p in per))
    return out


def build_table(turns: Turns, pair: Pair, batch: int, runs: list[RunId] | None = None) -> str:
    """Markdown: where each engine's (default every engine of the pair) metadata builds spend host time per decoding
    step (median of measured rounds), by builder, beside the step time."""
    lines = ["| run | builder | builds per step | host ms per step | step ms |", "|---|---|---|---|---|"]
    for run in runs or turns.runs(pair):
        rounds = list(turns.measured(run, batch).values())
        if not rounds:
            continue
        step = statistics.median(b.step_ms for b in rounds)
        for key, (count, ms) in builds_per_step(turns, run, batch).items():
            lines.append(f"| {label(run)} | {key.role.value}, {key.backend} ({key.layers} layers) | {count:.2f} | "
                         f"{ms:.3f} | {step:.3f} |")
    return "\n".join(lines)


def idle_cpu(turns: Turns) -> dict[str, float]:
    """CPU seconds the idle engines used per round: while they ran free (round 1) and while stopped (the rest)."""
    first = [r.others_cpu_s for e in turns.engines.values() for r in e.rounds if r.index == 1 and r.others_cpu_s is not None]
    later = [r.others_cpu_s for e in turns.engines.values() for r in e.rounds if r.index > 1 and r.others_cpu_s is not None]
    return {"free": statistics.median(first) if first else float("nan"),
            "stopped": statistics.median(later) if later else float("nan")}


def vcpu_spread(turns: Turns) -> dict[str, float] | None:
    """Over the measured turns (`dflash_fi.engine.vcpus`): the loop's ms on the vCPU each turn ran on and on the other
    vCPUs then (medians), the share of turns whose vCPU was at most 10% slower after the turn than before it, and the
    steal time on their vCPUs over all of them (None where not recorded). None for a benchmark that did not choose
    vCPUs."""
    held = [b.cpu for e in turns.engines.values() for r in e.rounds if r.index > turns.warm_up_rounds
            for b in r.batches if b.cpu]
    if not held:
        return None
    stolen = [c.steal_ms for c in held if c.steal_ms is not None]
    return {"chosen": statistics.median(c.loop_ms for c in held),
            "others": statistics.median(c.others_median_loop_ms for c in held),
            "after": statistics.median(c.loop_ms_after for c in held),
            "stayed": sum(c.loop_ms_after <= 1.1 * c.loop_ms for c in held) / len(held),
            "steal_ms": sum(stolen) if stolen else None}


def vcpu_summary(turns: Turns) -> str:
    """One paragraph on the vCPUs the turns ran on (`vcpu_spread`), for the README's results page and notebook 9."""
    spread = vcpu_spread(turns)
    if spread is None:
        return "Engines ran on whichever vCPU the kernel gave them."
    steal = ("" if spread["steal_ms"] is None else f" The hypervisor counted {spread['steal_ms']:.0f} ms of steal "
             "time on those vCPUs over all the turns.")
    return (f"Each round's engines ran their main thread on the vCPU fastest at the round's start: a loop of pure "
            f"Python took {spread['chosen']:.2f} ms there before a turn against {spread['others']:.2f} ms on the other "
            f"vCPUs at the round's start (medians), and {spread['after']:.2f} ms on it after the turn; "
            f"{spread['stayed']:.0%} of turns' vCPUs were at most 10% slower after than before.{steal}")
