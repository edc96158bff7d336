"""How a walkthrough check judges: `CheckSpec` (its id, a name to show, the runs and workloads it needs, its judge)
and what a judge returns (`Judged`). What a check said is `dflash_fi.records.checks.Check`; the checks themselves:
`dflash_fi.proof.evidence.checks`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from dflash_fi.records.checks import CheckId, CheckKind
from dflash_fi.records.engine import EngineRecord
from dflash_fi.records.runs import RunId, Workload, label


@dataclass(frozen=True)
class Judged:
    """What a judge saw: passed or not, the numbers it compared (by name), and a sentence for the reader."""

    passed: bool
    detail: str
    numbers: dict = field(default_factory=dict)


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
