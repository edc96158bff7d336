"""What a pass keeps and does not commit (engine ledgers, transcripts, full results), under artifacts/evidence/,
and how any evidence file is written: whole or not at all."""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path

RAW_DIR = Path(__file__).resolve().parents[2] / "artifacts" / "evidence"  # git-ignored


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


def replace_file(path: Path, content: bytes) -> None:
    """`path` holds `content` afterwards, or what it held before: never half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(content)
    os.replace(tmp, path)


class Tee(io.TextIOBase):
    """What a command prints, on the terminal and kept (`with contextlib.redirect_stdout(tee)`)."""

    def __init__(self, terminal):
        self.terminal, self.kept = terminal, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.terminal.write(text)

    def flush(self) -> None:
        self.terminal.flush()
