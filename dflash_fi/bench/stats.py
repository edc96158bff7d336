"""Paired rounds, their 95% intervals, and whether a target is met, missed or unresolved.

A benchmark in turns gives, per measured round r, one value of each engine; a comparison is one value per round
(a ratio of two engines, or a difference), and its estimate is the median over the rounds, with a 95%
percentile-bootstrap interval over the rounds, resampled with a fixed seed. The median, because a round in which the
host changed speed between two turns gives a ratio far off the rest: it should count as one round, not pull the
estimate by its size. An A/A pair, two engines of the same configuration, shows how far that interval reaches when
nothing differs.

A target is met when the interval lies on its side, missed when the interval lies on the other side, and
unresolved when the interval straddles it; a floor (`AtLeast.floor`) must hold for the interval's low end too.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from enum import Enum

BOOTSTRAP_SAMPLES = 10_000
SEED = 0


@dataclass(frozen=True)
class Estimate:
    """A paired comparison over rounds: the estimate, its 95% interval, and every round's value."""

    value: float
    low: float
    high: float
    rounds: tuple[float, ...]


def _bootstrap(values: list[float], statistic) -> tuple[float, float]:
    rng = random.Random(SEED)
    samples = sorted(statistic([rng.choice(values) for _ in values]) for _ in range(BOOTSTRAP_SAMPLES))
    return samples[int(0.025 * len(samples))], samples[int(0.975 * len(samples)) - 1]


def median_estimate(values: list[float]) -> Estimate | None:
    """Median of per-round values (ratios, differences), with its bootstrap interval."""
    if not values:
        return None
    low, high = _bootstrap(values, statistics.median) if len(values) > 1 else (values[0], values[0])
    return Estimate(statistics.median(values), low, high, tuple(values))


class Verdict(Enum):
    MET = "met"
    MISSED = "missed"
    UNRESOLVED = "unresolved"  # the interval straddles the target
    NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class AtLeast:
    """estimate >= threshold, and the interval's low end >= floor."""

    threshold: float
    floor: float | None = None

    def judge(self, e: Estimate | None) -> Verdict:
        if e is None:
            return Verdict.NOT_MEASURED
        floor = self.threshold if self.floor is None else self.floor
        if e.value >= self.threshold and e.low >= floor:
            return Verdict.MET
        if e.high < self.threshold:
            return Verdict.MISSED
        return Verdict.UNRESOLVED


@dataclass(frozen=True)
class AtMost:
    """estimate <= threshold, and the interval's high end <= ceiling (default: the threshold)."""

    threshold: float
    ceiling: float | None = None

    def judge(self, e: Estimate | None) -> Verdict:
        if e is None:
            return Verdict.NOT_MEASURED
        ceiling = self.threshold if self.ceiling is None else self.ceiling
        if e.value <= self.threshold and e.high <= ceiling:
            return Verdict.MET
        if e.low > self.threshold:
            return Verdict.MISSED
        return Verdict.UNRESOLVED


def round_to_round(values: list[float]) -> tuple[float, float] | None:
    """How far one engine's value moves between its rounds: the median and the largest relative change from one round
    to the next."""
    if len(values) < 2:
        return None
    moves = [abs(b / a - 1) for a, b in zip(values, values[1:])]
    return statistics.median(moves), max(moves)
