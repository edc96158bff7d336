"""The evidence summary: one small typed file per GPU (`evidence/<gpu>.json`), its one reader and its one writer.

A GPU evidence pass (`.ci/gpu-pass`: the walkthrough, `pytest tests/gpu`, the benchmarks, the notebooks) writes one
`Section` per command, each with its `Provenance`: the GPU, versions, commit, the command, its time, and `inputs`, a
hash of each thing the command ran (`dflash_fi.freshness`). A new pass replaces the sections it wrote; git keeps the
history. Bulky rows that tables read go beside it, compressed (`<gpu>.rows.json.gz`).

The lesson reads evidence only through `read()`: the walkthrough (`Walkthrough`: records, checks as judged), the
notebooks' runs (`NotebookRun`), a section's rows, and `stale(now)`: which sections ran other inputs than `now`'s,
and which inputs. Nothing here judges again; nothing here runs at import.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import re
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Callable

from dflash_fi.errors import BadInput, NoRecord
from dflash_fi.records.checks import Check, Sameness
from dflash_fi.records.engine import EngineRecord
from dflash_fi.records.provenance import Provenance, describe  # noqa: F401 (describe: read with the summary)
from dflash_fi.records.raw import keep, raw_dir, replace_file, Tee  # noqa: F401 (the pass's other files)

EVIDENCE_DIR = Path(__file__).resolve().parents[2] / "evidence"
SCHEMA = 2
READS = (1, 2)  # schema 1: a provenance's `step_hash` in place of `inputs` (read as stale, never trusted)
# What one pass may add to the repository (its summary as git stores it, zlib-compressed, and its compressed rows), and
# what the committed evidence may weigh in all: tests/test_summary.py holds the committed files to these.
PASS_CAP_BYTES, EVIDENCE_CAP_BYTES = 100_000, 1_500_000


class Section(Enum):
    """What one command of a pass writes: (key, the command that writes it)."""

    WALKTHROUGH = ("walkthrough", "dflash-fi walkthrough")
    GPU_TESTS = ("gpu-tests", "dflash-fi record gpu-tests --junit FILE --ran 'pytest tests/gpu ...'")
    BENCH_E2E = ("bench-e2e", "dflash-fi bench e2e --record")
    BENCH_KERNELS = ("bench-kernels", "dflash-fi bench kernels --record")
    PROFILE = ("profile", "dflash-fi profile --record")
    NOTEBOOKS = ("notebooks", "dflash-fi notebooks")

    @property
    def key(self) -> str:
        return self.value[0]

    @property
    def command(self) -> str:
        return self.value[1]


@dataclass(frozen=True)
class Entry:
    section: Section
    provenance: Provenance
    data: dict


@dataclass(frozen=True)
class Stale:
    """A section (or a notebook's run) whose inputs differ from those at hand: the names of those that differ (all of
    them when the pass recorded none: `recorded` False)."""

    section: Section
    changed: tuple[str, ...]
    notebook: str | None = None
    recorded: bool = True


@dataclass(frozen=True)
class Walkthrough:
    """The walkthrough section, typed."""

    records: dict  # RunId -> EngineRecord
    reference: dict  # the reference decoder's prediction
    margin: float | None  # the near-tie margin
    checks: tuple[Check, ...]  # as the pass judged them
    provenance: Provenance
    sameness: tuple[Sameness, ...] = ()  # each run's output against its baselines', counted in the pass


class NotebookStatus(Enum):
    RAN = "ran"  # every cell ran
    FAILED = "failed"  # a cell raised


@dataclass(frozen=True)
class NotebookRun:
    """One notebook's execution in a pass: how it ended, where, and what it ran (`inputs`: its own source too)."""

    status: NotebookStatus
    executed_on: str
    seconds: float
    inputs: dict
    error: str | None = None  # the failing cell's first line

    def to_json(self) -> dict:
        return {"status": self.status.value, "executed_on": self.executed_on, "seconds": self.seconds,
                "inputs": self.inputs, **({"error": self.error} if self.error else {})}

    @classmethod
    def from_json(cls, data: dict) -> "NotebookRun":
        if "inputs" not in data:  # schema 1: "ok" or "FAILED: <line>", and hashes not comparable to inputs
            ok = data["status"] == "ok"
            return cls(NotebookStatus.RAN if ok else NotebookStatus.FAILED, data["executed_on"], data["seconds"], {},
                       None if ok else data["status"].removeprefix("FAILED: "))
        return cls(NotebookStatus(data["status"]), data["executed_on"], data["seconds"], data["inputs"],
                   data.get("error"))


def changed(ran: dict, now: dict) -> tuple[str, ...]:
    """The inputs (by name) whose hash differs between what ran and what is at hand."""
    return tuple(sorted(k for k in now if ran.get(k) != now[k]))


def gpu_slug(gpu_name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-") or "unknown-gpu"


@dataclass(frozen=True)
class Summary:
    """One GPU's summary: its entries by section, and the compressed rows beside it."""

    path: Path
    entries: dict  # Section -> Entry

    @property
    def rows_path(self) -> Path:
        return self.path.with_name(self.path.name.removesuffix(".json") + ".rows.json.gz")

    def entry(self, section: Section) -> Entry:
        if section not in self.entries:
            raise NoRecord(f"the evidence summary {self.path.name} has no {section.key} section: run "
                           f"`{section.command}` on a GPU")
        return self.entries[section]

    def rows(self, section: Section) -> dict:
        """The bulky rows a section's tables read (compressed beside the summary)."""
        self.entry(section)
        rows = json.loads(gzip.decompress(self.rows_path.read_bytes())) if self.rows_path.is_file() else {}
        if section.key not in rows:
            raise NoRecord(f"{self.rows_path.name} has no {section.key} rows: run `{section.command}` on a GPU")
        return rows[section.key]

    def stale(self, now: Callable[[Section], dict], sections=None) -> list[Stale]:
        """The sections (of `sections`, default all recorded) whose inputs are not `now(section)`'s."""
        wanted = list(self.entries) if sections is None else [s for s in sections if s in self.entries]
        found = [Stale(s, changed(ran, now(s)), recorded=bool(ran))
                 for s in wanted for ran in (self.entries[s].provenance.inputs,)]
        return [s for s in found if s.changed]

    def walkthrough(self) -> Walkthrough:
        entry = self.entry(Section.WALKTHROUGH)
        records = {r.run: r if r.provenance else replace(r, provenance=entry.provenance)
                   for r in (EngineRecord.from_json(e) for e in entry.data["records"])}
        return Walkthrough(records, entry.data["reference"], entry.data["margin"],
                           tuple(Check.from_json(c) for c in entry.data["checks"]), entry.provenance,
                           tuple(Sameness.from_json(r) for r in entry.data.get("sameness", ())))

    def notebooks(self) -> dict[str, NotebookRun]:
        """Each notebook's last run in a pass, by its name (e.g. '01_choosing_a_backend')."""
        return {name: NotebookRun.from_json(run)
                for name, run in self.entry(Section.NOTEBOOKS).data["notebooks"].items()}


def summary_path(gpu_name: str, root: Path = EVIDENCE_DIR) -> Path:
    return Path(root) / f"{gpu_slug(gpu_name)}.json"


def load(path: Path) -> Summary:
    data = json.loads(Path(path).read_text())
    if data.get("schema") not in READS:
        raise BadInput(f"{Path(path).name} has schema {data.get('schema')}, this dflash-fi reads {SCHEMA}: run the "
                       "evidence pass again on a GPU")
    by_key = {s.key: s for s in Section}
    entries = {by_key[k]: Entry(by_key[k], Provenance.from_json(e["provenance"]), e["data"])
               for k, e in data["sections"].items()}
    return Summary(Path(path), entries)


def read(root: Path = EVIDENCE_DIR) -> Summary:
    """The committed summary (of the one GPU this project's passes ran on; with several, the newest walkthrough's)."""
    paths = sorted(Path(root).glob("*.json"))
    if not paths:
        raise NoRecord(f"no evidence summary under {Path(root).name}/: run the evidence pass on a GPU "
                       "(README, 'The evidence')")
    summaries = [load(p) for p in paths]
    return max(summaries, key=lambda s: max((e.provenance.finished_at for e in s.entries.values()), default=""))


def write(section: Section, data: dict, provenance: Provenance, rows: dict | None = None,
          root: Path = EVIDENCE_DIR, merge: str | None = None) -> Path:
    """Replace one section of the GPU's summary (and its rows), each file written whole or not at all; with `merge`,
    `data[merge]` (a dict) is merged into the section's own when that ran the same inputs, for commands that write
    one section from several processes (the notebooks, in two streams). Locked: passes side by side each keep theirs."""
    path = summary_path(provenance.gpu, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _write_locked(path, section, data, provenance, rows, merge)


def _write_locked(path: Path, section: Section, data: dict, provenance: Provenance, rows: dict | None,
                  merge: str | None) -> Path:
    current = json.loads(path.read_text()) if path.is_file() else {"schema": SCHEMA, "sections": {}}
    if current.get("schema") not in READS:
        current = {"schema": SCHEMA, "sections": {}}  # a summary this dflash-fi cannot read is replaced, not merged
    sections = {k: {"provenance": Provenance.from_json(v["provenance"]).to_json(), "data": v["data"]}
                for k, v in current["sections"].items()}  # schema 1's provenances, rewritten as schema 2's
    old = sections.get(section.key)
    if merge and old and old["provenance"].get("inputs") == provenance.inputs:
        data = {**data, merge: {**old["data"].get(merge, {}), **data[merge]}}
    sections[section.key] = {"provenance": provenance.to_json(), "data": _rounded(data)}
    # one line per section: small, and a pass's diff shows which sections it replaced
    body = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in sorted(sections.items()))
    replace_file(path, (f'{{"schema": {SCHEMA}, "sections": {{\n{body}\n}}}}\n').encode())
    summary = Summary(path, {})
    if rows is not None:
        old = json.loads(gzip.decompress(summary.rows_path.read_bytes())) if summary.rows_path.is_file() else {}
        old[section.key] = rows
        replace_file(summary.rows_path, gzip.compress(json.dumps(dict(sorted(old.items())), separators=(",", ":"))
                                                      .encode(), mtime=0))
    return path


def _rounded(value):
    """Floats to 6 significant digits: what any table shows, and half the bytes."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def provenance(context: dict, inputs: dict, seconds: float | None = None) -> Provenance:
    """A section's provenance from `dflash_fi.stack.run_context()` and what it ran (`dflash_fi.freshness.inputs`)."""
    return Provenance(context["gpu"], context["compute_capability"], context["versions"], context["git_commit"],
                      context["command"], context["finished_at"], None if seconds is None else round(seconds, 1),
                      dict(inputs))
