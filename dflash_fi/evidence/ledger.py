"""Append-only JSON-lines ledger of GPU runs: runs/<gpu>.jsonl, one file per GPU kind.

A record is serialised completely before the file is touched, then written with one `write()` on a file
opened for appending, under an exclusive lock, and fsynced: an interrupted run leaves either the whole
line or nothing, and earlier lines are never rewritten.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import threading
from pathlib import Path

from dflash_fi.errors import LedgerCorrupt
from dflash_fi.stack import REPO_ROOT

RUNS_DIR = REPO_ROOT / "runs"
_in_process = threading.Lock()  # flock guards other processes; this guards this process's threads


def gpu_slug(gpu_name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-") or "unknown-gpu"


def ledger_path(gpu_name: str, runs_dir: Path = RUNS_DIR) -> Path:
    return Path(runs_dir) / f"{gpu_slug(gpu_name)}.jsonl"


def append_record(path: Path, record: dict) -> None:
    line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _in_process:
        _append(path, line)


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


def read_records(path: Path) -> list[dict]:
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


def all_records(runs_dir: Path = RUNS_DIR) -> list[dict]:
    return [r for p in sorted(Path(runs_dir).glob("*.jsonl")) for r in read_records(p)]
