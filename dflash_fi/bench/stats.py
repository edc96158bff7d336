"""Paired rounds, their 95% intervals, and whether a target is met, missed or unresolved.

A benchmark in turns gives, per measured round r, one value of each engine; a comparison is one value per round
(a ratio of two engines, or a difference), and its estimate is the geometric mean of the ratios (the mean of the
differences) with a 95% percentile-bootstrap interval over the rounds, resampled with a fixed seed. An A/A pair,
two engines of the same configuration, shows how far that interval reaches when nothing differs.

A target is met when the interval lies on its side, missed when the interval lies on the other side, and
unresolved when the interval straddles it; a floor (`AtLeast.floor`) must hold for the interval's low end too.
"""

from __future__ import annotations

import math
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


def _geometric_mean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def ratio_estimate(ratios: list[float]) -> Estimate | None:
    """Geometric mean of per-round ratios, with its bootstrap interval."""
    if not ratios:
        return None
    low, high = _bootstrap(ratios, _geometric_mean) if len(ratios) > 1 else (ratios[0], ratios[0])
    return Estimate(_geometric_mean(ratios), low, high, tuple(ratios))


def difference_estimate(differences: list[float]) -> Estimate | None:
    """Mean of per-round differences, with its bootstrap interval."""
    if not differences:
        return None
    low, high = _bootstrap(differences, statistics.fmean) if len(differences) > 1 else (differences[0],) * 2
    return Estimate(statistics.fmean(differences), low, high, tuple(differences))


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
    """The whole interval at or below threshold."""

    threshold: float

    def judge(self, e: Estimate | None) -> Verdict:
        if e is None:
            return Verdict.NOT_MEASURED
        if e.high <= self.threshold:
            return Verdict.MET
        if e.low > self.threshold:
            return Verdict.MISSED
        return Verdict.UNRESOLVED


def round_to_round(values: list[float]) -> float | None:
    """How far one engine's value moves between its rounds: the largest relative change from one round to the next."""
    if len(values) < 2:
        return None
    return max(abs(b / a - 1) for a, b in zip(values, values[1:]))
