"""What a walkthrough check is (`CheckSpec`: a name, the runs and workloads it needs, its judge) and what it says
(`Check`: PASS, FAIL or NOT RUN, with why). The checks themselves: `dflash_fi.evidence.checks`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable

from dflash_fi.engine.identity import RunId, Workload, label
from dflash_fi.engine.records import EngineRecord


class Verdict(Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    NOT_RUN = "NOT RUN"  # a record it needs is missing, or was recorded before what it reads was


@dataclass(frozen=True)
class Check:
    name: str
    verdict: Verdict
    detail: str

    passed = property(lambda self: self.verdict is Verdict.PASS)

    def line(self) -> str:
        return f"{self.verdict.value}  {self.name}: {self.detail}"


class NotCheckable(Exception):
    """A record lacks what a check reads (recorded before it was): the check is not run, not failed."""


@dataclass(frozen=True)
class CheckSpec:
    name: str
    needs: tuple[RunId, ...]
    judge: Callable[[list[EngineRecord], dict], tuple[bool, str]]  # (records in `needs` order, context)
    workloads: tuple[Workload, ...] = (Workload.UNIFORM,)  # what each record in `needs` must have generated

    def missing(self, records: dict[RunId, EngineRecord]) -> str | None:
        """Why these records cannot be checked (a run, or a workload of one, not recorded), or None."""
        if absent := [run for run in self.needs if run not in records]:
            return f"no record of {', '.join(repr(label(r)) for r in absent)}"
        if absent := [(run, w) for run in self.needs for w in self.workloads if records[run].generate(w) is None
                      and records[run].ok]:
            return "no " + ", ".join(f"{w.value} workload in {label(run)!r}" for run, w in absent)
        return None
