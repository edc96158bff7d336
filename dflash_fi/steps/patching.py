"""Apply a step's hunks to vLLM 0.22.1's own FlashInfer backend source and import the result.

Each step is vLLM's `vllm/v1/attention/backends/flashinfer.py` exactly as shipped in 0.22.1, plus the
hunks of every step up to it (PR #43081 for steps 1-4, what came after from step 5 on). Nothing of vLLM is
copied into this repository: the stock source is read from the installed wheel, checked against its known
hash, and every hunk must match exactly once, so a different vLLM fails loudly instead of producing a
silently different backend.

The patched modules import as `dflash_fi.patched.step1`, `step2`, ... (see `dflash_fi/patched/__init__.py`),
so vLLM can resolve, pickle and log their classes like any other backend.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
from dataclasses import dataclass

from dflash_fi.errors import HunkMismatch, PatchError

STOCK_MODULE = "vllm.v1.attention.backends.flashinfer"
# sha256 of vllm/v1/attention/backends/flashinfer.py in the vllm==0.22.1 wheel.
STOCK_SHA256 = "05f7c09a0c28fd0b2ece6430fb2bd46643be62763ee539df2653364431d66dbd"


@dataclass(frozen=True)
class Hunk:
    """Replace `old` (which must occur exactly once) with `new`."""

    why: str
    old: str
    new: str


def stock_source() -> str:
    spec = importlib.util.find_spec(STOCK_MODULE)
    if spec is None or spec.origin is None:
        raise PatchError(f"{STOCK_MODULE} is not importable: install vllm==0.22.1 (see README).")
    with open(spec.origin, encoding="utf-8") as f:
        source = f.read()
    digest = hashlib.sha256(source.encode()).hexdigest()
    if digest != STOCK_SHA256:
        from dflash_fi.stack import installed_version

        raise PatchError(
            f"{spec.origin} is not vLLM 0.22.1's flashinfer.py (installed vllm: "
            f"{installed_version('vllm')}, sha256 {digest[:12]}...). The steps are written against "
            "vllm==0.22.1 only: reinstall it with `pip install -e .` from the repository root."
        )
    return source


def apply_hunks(source: str, hunks: tuple[Hunk, ...]) -> str:
    for number, hunk in enumerate(hunks, 1):
        count = source.count(hunk.old)
        if count != 1:
            raise HunkMismatch(
                f"hunk {number} ({hunk.why}) matches {count} places instead of exactly one", number, count, source
            )
        source = source.replace(hunk.old, hunk.new)
    return source


def unified_diff(before: str, after: str, before_name: str, after_name: str, context: int = 3) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True),
            fromfile=before_name, tofile=after_name, n=context,
        )
    )
