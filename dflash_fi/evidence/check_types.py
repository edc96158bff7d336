"""What a walkthrough check is (`CheckSpec`: its id, a name to show, the runs and workloads it needs, its judge) and
what it says (`Check`: PASS, FAIL or NOT RUN, with the numbers it compared). A check is identified by its `CheckId`
(what it asks, `CheckKind`, of which runs), never by its name. The checks themselves: `dflash_fi.evidence.checks`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

from dflash_fi.engine.identity import RunId, Workload, label
from dflash_fi.engine.records import EngineRecord


class Verdict(Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    NOT_RUN = "NOT RUN"  # a record it needs is missing


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
class Judged:
    """What a judge saw: passed or not, the numbers it compared (by name), and a sentence for the reader."""

    passed: bool
    detail: str
    numbers: dict = field(default_factory=dict)


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
class CheckSpec:
    kind: CheckKind
    name: str
    needs: tuple[RunId, ...]
    judge: Callable[[list[EngineRecord], dict], Judged]  # (records in `needs` order, context)
    workloads: tuple[Workload, ...] = (Workload.UNIFORM,)  # what each record in `needs` must have generated

    @property
    def id(self) -> CheckId:
        return CheckId(self.kind, self.needs)

    def missing(self, records: dict[RunId, EngineRecord]) -> str | None:
        """Why these records cannot be checked (a run, or a workload of one, not recorded), or None."""
        if absent := [run for run in self.needs if run not in records]:
            return f"no record of {', '.join(repr(label(r)) for r in absent)}"
        if absent := [(run, w) for run in self.needs for w in self.workloads if records[run].generate(w) is None
                      and records[run].ok]:
            return "no " + ", ".join(f"{w.value} workload in {label(run)!r}" for run, w in absent)
        return None
