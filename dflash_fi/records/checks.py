"""What a walkthrough check said, as data: `Check` (PASS, FAIL or NOT RUN, with the numbers it compared), identified by
its `CheckId` (what it asks, `CheckKind`, of which runs), never by its name. How a check judges:
`dflash_fi.proof.evidence.check_spec` and `dflash_fi.proof.evidence.checks`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from dflash_fi.records.runs import RunId

class Verdict(Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    NOT_RUN = "NOT RUN"  # a record it needs is missing


class Outcome(Enum):
    """How a benchmark target fared (stored by name): the benchmarks judge it, the lesson reads it."""

    MET = "met"
    MISSED = "missed"
    UNRESOLVED = "unresolved"  # the interval straddles the target
    NOT_MEASURED = "not measured"


class CheckKind(Enum):
    """What a check asks of its runs."""

    REFUSED_AT_SELECTION = "refused at selection"
    RUNS = "runs"
    DFLASH_CHECK_FAILS = "DFlash's non-causal check fails"
    TAU_BELOW_FLASH_ATTN = "tau clearly below the FLASH_ATTN draft's"
    TAU_MATCHES_REFERENCE = "tau matches the reference decoder's"
    SAME_TAU = "same tau"
    SAME_OUTPUT_AND_TAU = "same output and tau"
    SAME_OUTPUT = "same output (near-tie rule)"
    STILL_NON_CAUSAL = "drafting still non-causal"
    ON_FLASHINFER_STILL_NON_CAUSAL = "on FlashInfer, drafting still non-causal"
    GRAPH_MODES = "the CUDA-graph modes resolved"
    MIXED_SAME_OUTPUT = "mixed batches: same output (near-tie rule)"
    MIXED_SAME_TAU = "mixed batches: same tau, the batch changed shape"
    NO_HARMFUL_REPLAN = "mixed batches, async scheduling: no plan rewrote a queued one for another batch"


@dataclass(frozen=True)
class CheckId:
    kind: CheckKind
    runs: tuple[RunId, ...]

    def to_json(self) -> dict:
        return {"kind": self.kind.name, "runs": [r.to_json() for r in self.runs]}

    @classmethod
    def from_json(cls, data: dict) -> "CheckId":
        return cls(CheckKind[data["kind"]], tuple(RunId.from_json(r) for r in data["runs"]))


@dataclass(frozen=True)
class Check:
    id: CheckId
    name: str  # shown, never matched
    verdict: Verdict
    detail: str
    numbers: dict = field(default_factory=dict)

    passed = property(lambda self: self.verdict is Verdict.PASS)

    def line(self) -> str:
        return f"{self.verdict.value}  {self.name}: {self.detail}"

    def to_json(self) -> dict:
        return {"id": self.id.to_json(), "name": self.name, "verdict": self.verdict.name, "detail": self.detail,
                "numbers": self.numbers}

    @classmethod
    def from_json(cls, data: dict) -> "Check":
        return cls(CheckId.from_json(data["id"]), data["name"], Verdict[data["verdict"]], data["detail"],
                   data.get("numbers") or {})


@dataclass(frozen=True)
class Sameness:
    """A run's greedy output against a baseline's on one workload, counted once while the tokens were there: how
    many requests parted, the largest gap at a parting, how many at a confident token (no recorded gap)."""

    run: RunId
    baseline: RunId
    workload: str  # records.runs.Workload's value
    requests: int
    parted: int
    largest_gap: float | None
    confident: int
    logprobs: bool  # whether the baseline recorded its near-ties

    @property
    def identical(self) -> int:
        return self.requests - self.parted

    def to_json(self) -> dict:
        return {**self.__dict__, "run": self.run.to_json(), "baseline": self.baseline.to_json()}

    @classmethod
    def from_json(cls, data: dict) -> "Sameness":
        return cls(**{**data, "run": RunId.from_json(data["run"]), "baseline": RunId.from_json(data["baseline"])})
