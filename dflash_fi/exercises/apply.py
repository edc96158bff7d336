"""Exercise N's hunks, the project's or a reader's, applied on top of steps 1..N-1 and imported as a real module.

The reader's hunks go through the steps' own `apply_hunks` (each old text must match exactly once); a mismatch is
refused as bad input saying where: the hunk's line in the reader's file, and the lines it matches, if any.
"""

from __future__ import annotations

import traceback
from pathlib import Path

from dflash_fi.errors import BadInput, HunkMismatch
from dflash_fi.lab.hunks import enclosing
from dflash_fi.steps.patching import Hunk, apply_hunks

EXERCISE_STEPS = (1, 2, 3, 4)  # PR #43081's four steps


def exercise_step(step) -> int:
    from dflash_fi.steps import check_step

    number = check_step(step)
    if number not in EXERCISE_STEPS:
        raise BadInput(f"no exercise for step {number}: the exercises are PR #43081's steps, "
                       f"{', '.join(map(str, EXERCISE_STEPS))}")
    return number


def base_name(step: int) -> str:
    """The flashinfer.py an exercise of `step` patches, in words."""
    return "vLLM 0.22.1's flashinfer.py as shipped" if step == 1 else (
        f"vLLM 0.22.1's flashinfer.py with the project's step{'s 1-' if step > 2 else ' '}{step - 1}")


def base_source(step: int) -> str:
    from dflash_fi.steps import patched_source

    return patched_source(step - 1)


def own_hunks(step: int) -> tuple[Hunk, ...]:
    """The hunks step `step` adds to the step before (its module's HUNKS hold every earlier step's too)."""
    from dflash_fi.steps import step_module

    return step_module(step).HUNKS[len(step_module(step - 1).HUNKS):]


def _line(source: str, offset: int) -> int:
    return source.count("\n", 0, offset) + 1


def place(source: str, old: str) -> str:
    """Where `old` sits in `source`: the function or class of its first line that says something (a decorated
    method's `def`, not the decorator), and that line's number."""
    start = source.index(old)
    lines = old.splitlines()
    first = next((k for k, text in enumerate(lines) if text.strip() and not text.strip().startswith("@")), 0)
    line = _line(source, start) + first
    return f"{enclosing(source, line)}, at line {line}"


def _nowhere(source: str, old: str) -> str:
    """Why `old` matches nowhere: its first line that is in no line of the source (its first line may end one, its
    last begin one, the others must be one), or that its lines are not in a row."""
    lines, parts = source.splitlines(), old.split("\n")
    for k, text in enumerate(parts if parts[-1] else parts[:-1]):
        first, last = k == 0, k == len(parts) - 1
        fits = (lambda line: text in line) if first and last else (lambda line: line.endswith(text)) if first else \
            (lambda line: line.startswith(text)) if last else (lambda line: line == text)
        if not any(map(fits, lines)):
            shown = text.strip()
            return f"its line {k + 1}, {shown[:60] + ('...' if len(shown) > 60 else '')!r}, is nowhere in it"
    return "each of its lines is in it, but not one after another as in \"old\" (check indentation and blank lines)"


def apply_exercise(step: int, hunks: tuple[Hunk, ...], path: Path, lines: tuple[int, ...]) -> str:
    """flashinfer.py at step `step` - 1 with `hunks` (from `path`, hunk k at line lines[k - 1]) applied."""
    try:
        return apply_hunks(base_source(step), hunks)
    except HunkMismatch as exc:
        hunk = hunks[exc.number - 1]
        target = base_name(step) + (f" and your hunks 1-{exc.number - 1}" if exc.number > 2 else
                                    " and your hunk 1" if exc.number == 2 else "")
        if exc.count == 0:
            why = _nowhere(exc.source, hunk.old)
            found = "matches nowhere in"
        else:
            starts, at = [], exc.source.find(hunk.old)
            while at >= 0:
                starts.append(_line(exc.source, at))
                at = exc.source.find(hunk.old, at + 1)
            why = "make it longer, to take in a line only the place you mean has"
            found = f"matches {exc.count} places (lines {', '.join(map(str, starts))}) in"
        raise BadInput(f"{path} line {lines[exc.number - 1]}: hunk {exc.number} ({hunk.why}): its \"old\" text "
                       f"{found} {target}, where it must match exactly once: {why}") from None


def import_exercise(step: int, source: str):
    """`source` as the module `dflash_fi.patched.exercise<step>`, a FlashInfer backend standing for step `step`."""
    from dflash_fi.patched import import_source

    return import_source(f"exercise{step}", source, step)


def failure(exc: BaseException, filename: str, hunks) -> str:
    """An exception the reader's module raised, as a reader reads it: its type and message, and its last line in the
    module (`filename`), with the reader's hunk that wrote that line where one did."""
    if isinstance(exc, SyntaxError):
        text, line, number = f"SyntaxError: {exc.msg}", (exc.text or "").strip(), exc.lineno
    else:
        text = f"{type(exc).__name__}{': ' + str(exc) if str(exc) else ''}"
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
        line, number = (frames[-1].line.strip(), frames[-1].lineno) if frames else ("", None)
    if number is None:
        return text
    mine = [k for k, h in enumerate(hunks, 1) if line and line in (x.strip() for x in h.new.splitlines())]
    return f"{text} (flashinfer.py line {number}: {line}{f'; your hunk {mine[0]}' if mine else ''})"
