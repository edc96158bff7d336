"""The training data: the .py files of the running Python's standard library, as bytes.

Tests and site-packages are left out; one file in `held_out_every`, chosen by a hash of its path, is held
out and gives the evaluation prompts.
"""

from __future__ import annotations

import hashlib
import sysconfig
from pathlib import Path

import torch

from dflash_fi.reference.tokenizer import DOC_ID


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
    return sorted(p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts))


def is_held_out(path: Path, every: int) -> bool:
    rel = path.relative_to(Path(sysconfig.get_paths()["stdlib"])).as_posix()
    return int(hashlib.sha1(rel.encode()).hexdigest(), 16) % every == 0


def load_corpus(held_out_every: int, max_files: int | None = None):
    """(training files, held-out files), each a list of (path, bytes)."""
    train, held = [], []
    for path in stdlib_files()[:max_files]:
        data = path.read_bytes()
        (held if is_held_out(path, held_out_every) else train).append((path, data))
    return train, held


def sample_windows(docs: list[bytes], n: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """n windows of `length` tokens: [DOC] + bytes from a random file (file chosen by size)."""
    sizes = torch.tensor([max(len(d) - length, 1) for d in docs], dtype=torch.float64)
    which = torch.multinomial(sizes, n, replacement=True, generator=gen)
    out = torch.full((n, length), DOC_ID, dtype=torch.long)
    for row, i in enumerate(which.tolist()):
        doc = docs[i]
        start = int(torch.randint(0, max(len(doc) - length + 1, 1), (1,), generator=gen))
        chunk = doc[start:start + length - 1]
        out[row, 1:1 + len(chunk)] = torch.tensor(list(chunk), dtype=torch.long)
    return out


def held_out_prompts(held: list[tuple[Path, bytes]], n: int, length: int = 96, seed: int = 0) -> list[str]:
    """ASCII prompts of `length` bytes that start at a line start in held-out files."""
    gen = torch.Generator().manual_seed(seed + 1)
    prompts = []
    candidates = [(p, d) for p, d in held if len(d) > 4 * length]
    while len(prompts) < n and candidates:
        path, data = candidates[int(torch.randint(0, len(candidates), (1,), generator=gen))]
        start = int(torch.randint(0, len(data) - length, (1,), generator=gen))
        start = data.rfind(b"\n", 0, start) + 1
        chunk = data[start:start + length]
        if chunk.isascii() and chunk.strip() and chunk.decode() not in prompts:
            prompts.append(chunk.decode())
    return prompts
