"""Exercises for PR #43081's four steps: a reader writes a step's hunks, and the CPU lab checks them.

    dflash-fi exercise N            lays out step N's hunks (place, reason, stock text) in ./exercises/stepN.py
    dflash-fi exercise N --check    applies the reader's hunks in place of step N's, on top of steps 1..N-1, imports
                                    the result as a real module, and runs the CPU checks of steps 1..N on it

    layout.py   the exercise file: written for a reader to edit, read back as data (never run)
    apply.py    the reader's hunks applied with the steps' own `apply_hunks`, a mismatch refused saying where
    checks.py   what exercise N checks (the checks of steps 1..N), and step 1's: vLLM's selector
    builds.py   steps 2-4's: what the lab's `FlashInferMetadataBuilder.build()` does with the reader's module

May import: dflash_fi.steps, dflash_fi.patched, dflash_fi.lab, dflash_fi.vocabulary, dflash_fi.errors.
"""

from __future__ import annotations

from pathlib import Path

MAY_IMPORT = ("dflash_fi.steps", "dflash_fi.patched", "dflash_fi.lab", "dflash_fi.vocabulary", "dflash_fi.errors")
PACKAGE_DIR = Path(__file__).resolve().parent.parent


def default_path(step: int) -> Path:
    return Path("exercises") / f"step{step}.py"


def exercise_text(step: int, solved: bool = False) -> str:
    """Exercise `step`'s file: its "new" texts the stock ones (the exercise as a reader starts it), or the step's
    own (`solved`)."""
    from dflash_fi.exercises.apply import base_name, base_source, exercise_step, own_hunks, place
    from dflash_fi.exercises.checks import checks_of
    from dflash_fi.exercises.layout import layout_text
    from dflash_fi.steps import step_title

    step = exercise_step(step)
    base, hunks = base_source(step), own_hunks(step)
    return layout_text(step, step_title(step), base_name(step), [place(base, h.old) for h in hunks], hunks,
                       [f"step {c.step}: {c.says}" for c in checks_of(step)],
                       new=tuple(h.new for h in hunks) if solved else None)


def write_exercise(step, out: str | None = None, force: bool = False) -> Path:
    """Write exercise `step`'s file at `out` (default ./exercises/stepN.py); refuses to replace one without `force`,
    and any path inside the installed package."""
    from dflash_fi.errors import BadInput
    from dflash_fi.exercises.apply import exercise_step

    step = exercise_step(step)
    path = Path(out) if out else default_path(step)
    if path.resolve().is_relative_to(PACKAGE_DIR):
        raise BadInput(f"{path} is inside the dflash_fi package ({PACKAGE_DIR}): write your exercise elsewhere, "
                       "e.g. the default ./exercises/")
    if path.is_dir() or (path.exists() and not force):
        raise BadInput(f"{path} already exists: --force replaces it (and your edits in it), or choose --out PATH"
                       if not path.is_dir() else f"{path} is a directory: give --out a file's path")
    text = exercise_text(step)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def check_exercise(step, path: str | Path | None = None, out=print) -> int:
    """Run exercise `step`'s checks on the reader's hunks in `path`: 0 when all hold, 1 when one fails (BadInput for
    a file that is not an exercise of `step`, or a hunk that matches twice or nowhere)."""
    from dflash_fi.exercises.apply import apply_exercise, base_name, exercise_step, failure, import_exercise
    from dflash_fi.exercises.builds import Saw
    from dflash_fi.exercises.checks import checks_of
    from dflash_fi.exercises.layout import read_exercise
    from dflash_fi.patched import source_filename

    step = exercise_step(step)
    path = Path(path) if path else default_path(step)
    hunks, lines = read_exercise(path, step)
    source = apply_exercise(step, hunks, path, lines)
    checks = checks_of(step)
    out(f"exercise {step}: {_count(len(hunks), 'hunk')} of {path} in place of step {step}'s, on {base_name(step)}")
    try:
        module = import_exercise(step, source)
    except Exception as exc:  # the reader's code, run as vLLM would import it
        out(f"  FAIL  flashinfer.py with your hunks imports -- instead: "
            f"{failure(exc, source_filename(f'exercise{step}'), hunks)}")
        out(f"step {step} still fails: flashinfer.py with your hunks does not import (its {len(checks)} checks "
            "did not run)")
        return 1
    failed = []
    for check in checks:
        try:
            detail = check.run(module)
        except Saw as exc:
            detail = str(exc)
        except Exception as exc:  # the reader's code raised: the check fails, saying where
            detail = failure(exc, module.__file__, hunks)
        out(f"  {'pass' if detail is None else 'FAIL'}  step {check.step}: {check.says}"
            + ("" if detail is None else f" -- instead: {detail}"))
        if detail is not None:
            failed.append(check)
    if failed:
        out(f"step {step} still fails {len(failed)} of {len(checks)} checks: {'; '.join(c.name for c in failed)}")
        return 1
    out(f"step {step} passes: all {len(checks)} checks of step{f's 1-{step}' if step > 1 else ' 1'} hold with your "
        "hunks")
    return 0


def _count(n: int, noun: str) -> str:
    return f"the {noun}" if n == 1 else f"the {n} {noun}s"


def run_command(step, out: str | None, check: str | None, force: bool) -> int:
    """`dflash-fi exercise`: lay the exercise out, or (`check` given; "" for the default path) check it."""
    if check is None:
        path = write_exercise(step, out, force)
        print(f"wrote {path}: step {step}'s hunks, where each lands and its stock text. Write their \"new\" text, "
              f"then: dflash-fi exercise {step} --check {path}")
        return 0
    return check_exercise(step, check or out)
