"""runs/: the committed GPU evidence, and the one module that names, writes and reads its files.

A file's name says what it holds: `<gpu>.<kind>[-<tag>].<ext>`, e.g. `nvidia-h200.bench-turns-ddb4e49.json`:
the GPU it ran on, its `Kind`, and a tag (a commit, a walkthrough id). Every kind but the ledger is written once
(`write_new` refuses a file that exists: runs/ is append-only); the ledger (`<gpu>.jsonl`, one JSON record per
line) is only ever appended to, one whole line at a time. Everything here is raw JSON or text: the typed views
are `dflash_fi.engine.records` (engine records) and `dflash_fi.evidence.ledger` (walkthrough manifests).
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import re
import threading
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from dflash_fi.errors import BadInput, LedgerCorrupt, NoRecord
from dflash_fi.stack import REPO_ROOT

RUNS_DIR = REPO_ROOT / "runs"
SCRATCH_DIR = REPO_ROOT / "artifacts"  # where a result goes that was not asked to be recorded (git-ignored)
_in_process = threading.Lock()  # flock guards other processes; this guards this process's threads


class Kind(Enum):
    """What a file under runs/ holds: (name in the file name, extensions, what writes it)."""

    LEDGER = ("", ("jsonl",), "every engine run and walkthrough manifest on one GPU kind (append-only)")
    WALKTHROUGH = ("walkthrough", ("txt",), "`dflash-fi walkthrough`: its whole output, checks included")
    BENCH_KERNELS = ("bench-kernels", ("json",), "`dflash-fi bench kernels --record`")
    BENCH_TURNS = ("bench-turns", ("json", "txt"), "`dflash-fi bench e2e --record`: engines in turns")
    NEAR_TIE_MARGIN = ("near-tie-margin", ("json",), "`dflash-fi near-ties --record`")
    BUILD_PROFILE = ("build-profile", ("json",), "`dflash-fi profile --record`: where metadata builds spend time")
    NOTEBOOKS = ("notebooks", ("txt",), "`dflash-fi notebooks` on the GPU: each notebook's time")
    TEST_COMMAND = ("test-command", ("txt",), "the README's test command on the GPU")
    NBVAL = ("nbval", ("txt",), "nbval on the executed notebooks, on the GPU")
    GPU_TESTS = ("gpu-tests", ("txt",), "`pytest tests/gpu` on the GPU")
    # Written by earlier sessions, still read: what they measured before the commands above existed.
    KERNEL_TESTS = ("kernel-tests", ("txt",), "earlier `pytest tests/gpu`")
    DOCTOR = ("doctor", ("txt",), "`dflash-fi doctor` on the GPU")
    BENCH_E2E = ("bench-e2e", ("json",), "engines timed one at a time, before they took turns")
    ENGINE_VARIATION = ("engine-variation", ("json",), "tau of engines of one configuration")
    DRAFTER_SEARCH = ("drafter-search", ("json",), "the embedded drafter's recipe search")
    NOTEBOOK_SCRIPTS = ("notebook-scripts", ("txt",), "the notebooks run as scripts")
    DISCARDED_TRAINING = ("discarded-pair1-training", ("json",), "the training record of a discarded pair")

    @property
    def stem(self) -> str:
        return self.value[0]

    @property
    def extensions(self) -> tuple[str, ...]:
        return self.value[1]


# What a person records with `dflash-fi record`: the transcript of a GPU run that no dflash-fi command writes itself.
TRANSCRIPTS = (Kind.TEST_COMMAND, Kind.NBVAL, Kind.GPU_TESTS, Kind.NOTEBOOKS)


def transcript(kind: Kind, text: str, context: dict, command: str | None) -> str:
    """A recorded transcript: where it ran (`dflash_fi.stack.run_context`) and what ran, in `#` lines, then the
    transcript as given."""
    versions = ", ".join(f"{name} {version}" for name, version in context["versions"].items())
    return (f"# {kind.stem} transcript on {context['gpu']} (SM {context['compute_capability']}), commit "
            f"{context['git_commit']}; {versions}; recorded {context['finished_at']} by `dflash-fi record`\n"
            f"# command: {command or 'not given (record --ran says what produced this transcript)'}\n\n{text}")


# Longest names first: "bench-turns" before a kind whose name were its prefix.
_KINDS_BY_NAME = sorted((k for k in Kind if k.stem), key=lambda k: -len(k.stem))


def gpu_slug(gpu_name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-") or "unknown-gpu"


@dataclass(frozen=True)
class RunFile:
    """One file under runs/, as its name describes it."""

    path: Path
    gpu: str  # the GPU's slug
    kind: Kind
    tag: str | None

    def read(self):
        """The file's content: a list of dicts (ledger), a dict (JSON) or text."""
        if self.kind is Kind.LEDGER:
            return read_ledger(self.path)
        if self.path.suffix == ".json":
            return json.loads(self.path.read_text())
        return self.path.read_text()

    @property
    def finished_at(self) -> str:
        """When a JSON result finished (its own record of it); '' for files that keep none."""
        if self.path.suffix != ".json":
            return ""
        return self.read().get("finished_at") or ""


def classify(path: Path) -> RunFile:
    """What a file under runs/ is, from its name; BadInput for a name no kind has."""
    path = Path(path)
    gpu, _, rest = path.name.partition(".")
    stem, _, ext = rest.rpartition(".")
    if not stem and ext == "jsonl":
        return RunFile(path, gpu, Kind.LEDGER, None)
    for kind in _KINDS_BY_NAME:
        if ext in kind.extensions and (stem == kind.stem or stem.startswith(kind.stem + "-")):
            return RunFile(path, gpu, kind, stem[len(kind.stem) + 1:] or None)
    raise BadInput(f"{path.name} is no kind of file runs/ holds ({', '.join(k.stem for k in _KINDS_BY_NAME)}, "
                   "or <gpu>.jsonl): name it as dflash_fi.runs does")


class Runs:
    """runs/ (or another folder, for tests): its files by kind, the newest of a kind, new files, the ledger."""

    def __init__(self, root: Path = RUNS_DIR):
        self.root = Path(root)

    def files(self, kind: Kind | None = None) -> list[RunFile]:
        found = [classify(p) for p in sorted(self.root.glob("*")) if p.is_file()]
        return [f for f in found if kind is None or f.kind is kind]

    def newest(self, kind: Kind, extension: str = "json") -> RunFile:
        """The newest file of a kind, by the time its result says it finished."""
        files = [f for f in self.files(kind) if f.path.suffix == f".{extension}"]
        if not files:
            raise NoRecord(f"no {kind.stem} result is recorded under {self.root.name}/: {kind.value[2]} on a GPU")
        return max(files, key=lambda f: f.finished_at)

    def path(self, kind: Kind, gpu_name: str, tag: str | None = None, extension: str | None = None) -> Path:
        extension = extension or kind.extensions[0]
        if kind is Kind.LEDGER:
            return self.root / f"{gpu_slug(gpu_name)}.jsonl"
        return self.root / f"{gpu_slug(gpu_name)}.{kind.stem}{'-' + tag if tag else ''}.{extension}"

    def write_new(self, kind: Kind, gpu_name: str, tag: str | None, content, extension: str | None = None,
                  remedy: str | None = None) -> Path:
        """A new file of a kind (JSON for a dict, text for a str); refuses one that exists (`remedy`: what to do)."""
        path = self.path(kind, gpu_name, tag, extension)
        refuse_existing(path, *([remedy] if remedy else []))
        return write_result(path, content, record=True)

    def append(self, gpu_name: str, record: dict) -> Path:
        """One record appended to the GPU's ledger: serialised whole first, then one write, locked and fsynced, so
        an interrupted run leaves the whole line or nothing, and earlier lines are never rewritten."""
        path = self.path(Kind.LEDGER, gpu_name)
        line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        with _in_process:
            _append(path, line)
        return path

    def ledger(self) -> list[dict]:
        """Every line of every GPU's ledger."""
        return [r for f in self.files(Kind.LEDGER) for r in f.read()]


class Tee(io.TextIOBase):
    """What a command prints, on the terminal and kept for its transcript (`with contextlib.redirect_stdout(tee)`)."""

    def __init__(self, terminal):
        self.terminal, self.kept = terminal, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.terminal.write(text)

    def flush(self) -> None:
        self.terminal.flush()


def refuse_existing(path: Path, remedy: str = "give --out for a new file (or commit first: the commit names the "
                                                 "file)") -> None:
    if Path(path).exists():
        raise BadInput(f"{path} is already recorded and runs/ is append-only: {remedy}")


def result_path(kind: Kind, gpu_name: str, tag: str | None, record: bool, out: str | None = None,
                runs: Runs | None = None) -> Path:
    """Where a command will write its result, decided before it works: --out, runs/ with --record (refused now if the
    file exists, not after minutes of GPU time), or artifacts/results/."""
    if out:
        return Path(out)
    if record:
        path = (runs or Runs()).path(kind, gpu_name, tag)
        refuse_existing(path)
        return path
    return Runs(SCRATCH_DIR / "results").path(kind, gpu_name, tag)


def write_result(path: Path, content, record: bool) -> Path:
    """A result (JSON for a dict, text for a str) at `path`; a recorded one never replaces a file."""
    path = Path(path)
    text = json.dumps(content, indent=1) + "\n" if isinstance(content, dict) else content
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "x" if record else "w", encoding="utf-8") as f:
        f.write(text)
    return path


def _append(path: Path, line: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    raise LedgerCorrupt(f"{path} does not end with a newline: its last record is incomplete "
                                        "(restore the file with `git checkout -- runs/`)")
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(f"short write to {path}: {written} of {len(line)} bytes")
        os.fsync(fd)
    finally:
        os.close(fd)


def read_ledger(path: Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise LedgerCorrupt(f"{path}:{number} is not a JSON record ({exc})") from exc
    return records
