"""The evidence summary: one small typed file per GPU (`evidence/<gpu>.json`), and the one reader of it.

A GPU evidence pass (`.ci/gpu-pass`: the walkthrough, `pytest tests/gpu`, the benchmarks, the notebooks) writes one
`Section` of
the summary per command, each with its `Provenance`: the GPU, versions, commit, the command and its time, and a hash
of the step modules it ran (`step_hash`). A new pass replaces the sections it wrote; git keeps the history. Bulky
rows that the tables read (benchmark rounds, kernel rows, build profiles) go beside it, compressed
(`<gpu>.rows.json.gz`); raw ledgers and transcripts stay under `artifacts/evidence/`, never committed.

The lesson reads evidence only through `read()`: the checks as the pass judged them (`Check` by `CheckId`), the
walkthrough's engine records with their tokens by hash, and `stale()`: what no longer matches the step modules.
Nothing here judges again; nothing here runs at import.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path

from dflash_fi.errors import BadInput, NoRecord
from dflash_fi.stack import ARTIFACTS_DIR, REPO_ROOT

EVIDENCE_DIR = REPO_ROOT / "evidence"
RAW_DIR = ARTIFACTS_DIR / "evidence"  # ledgers, transcripts: never committed
STEPS_DIR = Path(__file__).resolve().parent / "steps"
SCHEMA = 1
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


def step_hash(steps_dir: Path = STEPS_DIR) -> str:
    """sha256 over the step modules' files (name and bytes): what a pass ran, and what HEAD has now."""
    digest = hashlib.sha256()
    for path in sorted(steps_dir.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class Provenance:
    gpu: str
    compute_capability: str
    versions: dict
    commit: str | None
    step_hash: str
    command: str
    finished_at: str
    seconds: float | None = None


@dataclass(frozen=True)
class Entry:
    section: Section
    provenance: Provenance
    data: dict


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

    def stale(self, now: str | None = None) -> list[Section]:
        """The sections whose step modules are not the ones at hand."""
        now = now or step_hash()
        return [s for s, e in self.entries.items() if e.provenance.step_hash != now]

    def walkthrough(self):
        """(records by RunId, the reference decoder's prediction, the near-tie margin, checks as judged, provenance)."""
        from dataclasses import replace

        from dflash_fi.engine.records import EngineRecord, Provenance as Made
        from dflash_fi.evidence.check_types import Check

        entry, p = self.entry(Section.WALKTHROUGH), self.entry(Section.WALKTHROUGH).provenance
        made = Made(p.gpu, p.compute_capability, p.versions, p.commit, p.command, p.finished_at)  # the pass's, kept once
        records = {r.run: r if r.provenance else replace(r, provenance=made)
                   for r in (EngineRecord.from_json(e) for e in entry.data["records"])}
        return (records, entry.data["reference"], entry.data["margin"],
                [Check.from_json(c) for c in entry.data["checks"]], entry.provenance)


def summary_path(gpu_name: str, root: Path = EVIDENCE_DIR) -> Path:
    return Path(root) / f"{gpu_slug(gpu_name)}.json"


def load(path: Path) -> Summary:
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise BadInput(f"{Path(path).name} has schema {data.get('schema')}, this dflash-fi reads {SCHEMA}: run the "
                       "evidence pass again on a GPU")
    by_key = {s.key: s for s in Section}
    entries = {by_key[k]: Entry(by_key[k], Provenance(**e["provenance"]), e["data"])
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
    `data[merge]` (a dict) is merged into the section's own, for commands that write one section from several
    processes (the notebooks, in two streams). Locked: passes that run side by side each keep their section."""
    path = summary_path(provenance.gpu, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _write_locked(path, section, data, provenance, rows, merge)


def _write_locked(path: Path, section: Section, data: dict, provenance: Provenance, rows: dict | None,
                  merge: str | None) -> Path:
    current = json.loads(path.read_text()) if path.is_file() else {"schema": SCHEMA, "sections": {}}
    if current.get("schema") != SCHEMA:
        current = {"schema": SCHEMA, "sections": {}}  # a summary of another schema is replaced, not merged
    old = current["sections"].get(section.key)
    if merge and old and old["provenance"]["step_hash"] == provenance.step_hash:
        data = {**data, merge: {**old["data"].get(merge, {}), **data[merge]}}
    current["sections"][section.key] = {"provenance": asdict(provenance), "data": _rounded(data)}
    current["sections"] = dict(sorted(current["sections"].items()))
    # one line per section: small, and a pass's diff shows which sections it replaced
    body = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in current["sections"].items())
    _replace(path, (f'{{"schema": {SCHEMA}, "sections": {{\n{body}\n}}}}\n').encode())
    summary = Summary(path, {})
    if rows is not None:
        old = json.loads(gzip.decompress(summary.rows_path.read_bytes())) if summary.rows_path.is_file() else {}
        old[section.key] = rows
        _replace(summary.rows_path, gzip.compress(json.dumps(dict(sorted(old.items())), separators=(",", ":"))
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


def provenance(context: dict, seconds: float | None = None) -> Provenance:
    """A section's provenance from `dflash_fi.stack.run_context()`."""
    return Provenance(context["gpu"], context["compute_capability"], context["versions"], context["git_commit"],
                      step_hash(), context["command"], context["finished_at"],
                      None if seconds is None else round(seconds, 1))


def _replace(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(content)
    os.replace(tmp, path)


def raw_dir() -> Path:
    """Where a pass keeps what it does not commit (the engine ledger, transcripts)."""
    RAW_DIR.mkdir(parents=True, exist_ok=True)
    return RAW_DIR


def keep(name: str, content) -> Path:
    """A result not recorded (JSON for a dict, else text), under artifacts/evidence/: never committed."""
    path = raw_dir() / name
    path.write_text(json.dumps(content, indent=1) if isinstance(content, dict) else content)
    print(f"results: {path}")
    return path


def describe(p: Provenance) -> str:
    """One line naming where a section came from."""
    versions = ", ".join(f"{k} {v}" for k, v in p.versions.items() if k in ("vllm", "flashinfer", "torch"))
    return (f"{p.gpu} (SM {p.compute_capability}), {versions}, commit {(p.commit or '?')[:10]}, {p.finished_at}"
            + (f", {p.seconds:.0f} s" if p.seconds is not None else ""))


class Tee(io.TextIOBase):
    """What a command prints, on the terminal and kept (`with contextlib.redirect_stdout(tee)`)."""

    def __init__(self, terminal):
        self.terminal, self.kept = terminal, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.terminal.write(text)

    def flush(self) -> None:
        self.terminal.flush()
