"""The ledger as types: engine records, and the walkthrough manifests they point to.

A walkthrough writes its manifest (`Walkthrough`: id, the runs it planned, the reference decoder's prediction,
the near-tie margin, the commit) to the GPU's ledger before its engines start, and each engine record names the
manifest's id. Walkthroughs recorded before manifests kept the id, the planned count and the prediction in every
engine's spec; `read_ledger` makes manifests of those too.
"""

from __future__ import annotations

from dataclasses import dataclass

from dflash_fi.engine.identity import RunId
from dflash_fi.engine.records import EngineRecord
from dflash_fi.runs import Runs

# Walkthroughs recorded before the plan grew to steps 5 and 6 and CUDA graphs had 8 runs, and did not say so.
EARLIER_PLAN_RUNS = 8


@dataclass(frozen=True)
class Walkthrough:
    id: str
    planned: tuple[RunId, ...] | None  # None: recorded before manifests (only their number is known)
    planned_count: int
    reference: dict  # the reference decoder's prediction: tau_noncausal, tau_causal, ...
    margin: dict | None  # the committed near-tie margin its checks used: {"margin": nats, "file": name}
    commit: str | None
    started_at: str = ""

    def to_json(self) -> dict:
        return {"schema": 2, "kind": "walkthrough", "id": self.id, "planned": [r.to_json() for r in self.planned or ()],
                "planned_count": self.planned_count, "reference": self.reference, "margin": self.margin,
                "commit": self.commit, "started_at": self.started_at}

    @classmethod
    def from_json(cls, data: dict) -> "Walkthrough":
        return cls(data["id"], tuple(RunId.from_json(r) for r in data["planned"]), data["planned_count"],
                   data["reference"], data.get("margin"), data.get("commit"), data.get("started_at", ""))


def read_ledger(runs: Runs | None = None) -> tuple[list[EngineRecord], dict[str, Walkthrough]]:
    """Every engine record under runs/, and every walkthrough's manifest by id."""
    records, manifests = [], {}
    for line in (runs or Runs()).ledger():
        if line.get("kind") == "walkthrough":
            manifests[line["id"]] = Walkthrough.from_json(line)
            continue
        records.append(EngineRecord.from_json(line))
        extra = (line.get("spec") or {}).get("extra") or {}
        if line.get("schema") is None and extra.get("walkthrough_id") and extra["walkthrough_id"] not in manifests:
            manifests[extra["walkthrough_id"]] = Walkthrough(
                extra["walkthrough_id"], None, extra.get("planned_runs", EARLIER_PLAN_RUNS), extra.get("reference"),
                None, line.get("git_commit"))
    return records, manifests


def latest_walkthrough(runs: Runs | None = None) -> tuple[Walkthrough, dict[RunId, EngineRecord]] | None:
    """The most recent complete walkthrough (every planned run recorded): its manifest, and its records by run in
    the order of the plan's table."""
    from dflash_fi.evidence.plan import walkthrough_runs

    records, manifests = read_ledger(runs)
    by_id: dict[str, dict[RunId, EngineRecord]] = {}
    for r in records:
        if r.walkthrough in manifests:
            by_id.setdefault(r.walkthrough, {})[r.run] = r
    complete = [(manifests[wid], recs) for wid, recs in by_id.items()
                if len(recs) == manifests[wid].planned_count
                and (manifests[wid].planned is None or set(manifests[wid].planned) == set(recs))]
    if not complete:
        return None
    # one ledger file per GPU kind, so file order says nothing of time: the last one to finish wins
    manifest, recs = max(complete, key=lambda c: max(r.provenance.finished_at for r in c[1].values()))
    order = {run: i for i, run in enumerate(manifest.planned or walkthrough_runs())}
    return manifest, dict(sorted(recs.items(), key=lambda kv: order.get(kv[0], len(order))))
