"""What the notebooks share to show the lesson: check lines and verdicts, tables, vLLM's code and the steps' hunks.

Lesson only: it runs no engine and reads no evidence (the live engines and the evidence summary are
`dflash_fi.evidence.live`). Output that moves from machine to machine goes to cells tagged `nbval-ignore-output`.
Nothing here runs at import.
"""

from __future__ import annotations

from dflash_fi.figures.listings import wrapped_lines  # noqa: F401 (the notebooks import it from here)

# The steps each notebook is about (`pytest -m stepN` runs these notebooks too); the first notebook of a step shows
# its hunks (09 measures what steps 8 and 9 cost against the FLASH_ATTN draft; 10 drives step 4 beside vLLM 0.24.0).
STEPS_OF_NOTEBOOK = {"00_dflash_and_the_problem": (0,), "01_choosing_a_backend": (0, 1), "02_causal_metadata": (2,),
                     "03_noncausal_wrapper": (3,), "04_trtllm_gating": (4,), "05_what_upstream_did_next": (5,),
                     "06_cuda_graphs": (6,), "07_host_work": (7,), "08_plan_once": (8, 9), "09_what_it_costs": (8, 9),
                     "10_vllm_today": (4,)}
NOTEBOOK_OF_STEP = {step: next(nb for nb, steps in STEPS_OF_NOTEBOOK.items() if step in steps)
                    for step in sorted({s for steps in STEPS_OF_NOTEBOOK.values() for s in steps})}


def check(name: str, passed: bool, detail: str = "") -> None:
    """One line of a check cell: PASS (or an AssertionError) with what was checked."""
    line = f"{'PASS' if passed else 'FAIL'}  {name}" + (f": {detail}" if detail else "")
    print(line)
    assert passed, line


def skip(name: str, why: str) -> None:
    """One line of a check cell for a check that cannot run here (no GPU, a result not recorded yet): it says so."""
    print(f"SKIP  {name}: {why}")


def recorded(read, what: str):
    """`read()`, or None and one line saying that `what` is not recorded yet (`NoRecord`): cells that use it then
    say so instead of failing."""
    from dflash_fi.errors import NoRecord

    try:
        return read()
    except NoRecord as missing:
        print(f"{what}: not recorded yet ({missing})")
        return None


def verdict(text: str, width: int = 110) -> None:
    """The sentence after a table or picture: '**What to see:** ...', rendered as Markdown (a computed value in it
    is written in the call's f-string), with the same sentence wrapped to `width` as its text/plain, which nbval
    compares."""
    import re
    import textwrap

    from IPython.display import display

    plain = textwrap.fill(f"What to see: {text}", width, break_long_words=False, break_on_hyphens=False)
    # Markdown's own characters are escaped outside `code spans`: a computed name like _buf or a*b stays as written.
    parts = re.split(r"(`[^`]*`)", text)
    markdown = "".join(part if i % 2 else re.sub(r"([\\*_<>\[\]#|])", r"\\\1", part) for i, part in enumerate(parts))
    display({"text/markdown": f"**What to see:** {markdown}", "text/plain": plain}, raw=True)


def show(markdown: str) -> None:
    """A markdown table rendered in JupyterLab (and as its text everywhere else)."""
    from IPython.display import Markdown, display

    display(Markdown(markdown))


def changed_rows(table: str, first: int = 1) -> str:
    """A markdown table of one row per case and one column per step (from column `first` on), with the rows whose
    step columns differ highlighted: the case's name bold and marked 'changes', and in each later column the parts
    (split at '; ' and ', ') that differ from the column before it in bold. Rows that stay as they were stay plain."""
    def parts(cell):
        return [p for chunk in cell.split("; ") for p in chunk.split(", ")]

    def bold_new(cell, before):
        old = set(parts(before))
        return "; ".join(", ".join(p if p in old or not p else f"**{p}**" for p in chunk.split(", "))
                         for chunk in cell.split("; "))

    out = []
    for i, line in enumerate(table.splitlines()):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        steps = cells[first:]
        if i < 2 or len(set(steps)) <= 1:
            out.append(line)
            continue
        cells[first:] = [steps[0]] + [bold_new(c, b) for b, c in zip(steps, steps[1:])]
        cells[:first] = [f"**{c}** (changes)" if j == 0 else c for j, c in enumerate(cells[:first])]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


# Code, diffs, engine calls: HTML with inline styles (nbconvert and GitHub keep them) and text/plain for nbval.
def show_hunks(step: int, only: list[int] | None = None, max_lines: int | dict[int, int] = 30, context: int = 3,
               joined: bool = False) -> None:
    """Step `step`'s hunks numbered `only` (1-based, as shown; default all), each under its `why`, with `context`
    unchanged lines around each change; one over `max_lines` lines (or {hunk: lines}) is cut, and says so. `joined`:
    one box for all."""
    from IPython.display import display

    from dflash_fi.figures.listings import hunk_blocks
    from dflash_fi.lab.hunks import step_hunks

    display(hunk_blocks(step, step_hunks(step, context), only, max_lines, joined))


def show_step_diff(step: int) -> None:
    """The whole diff of step `step` against step `step - 1`, folded (an appendix cell)."""
    from IPython.display import display

    from dflash_fi.figures.listings import folded_diff
    from dflash_fi.steps import hunk_diff

    display(folded_diff(f"The whole diff of step {step}", hunk_diff(step)))


def show_source(function, blocks: list[tuple[str, str]], mark: tuple[str, ...] = ()) -> None:
    """vLLM's own source of `function`: its def line, and the lines from each block's first regex to its last
    ('...' between); lines matching a regex of `mark` (default: each block's first) stand out."""
    from IPython.display import display

    from dflash_fi.figures.listings import source_excerpt

    display(source_excerpt(function, blocks, mark))


def show_flashinfer_source(path: str, start: str, blocks: list[tuple[str, str]], mark: tuple[str, ...] = ()) -> None:
    """FlashInfer's C++ source `path` (under its installed include/ directory) from the line matching `start` on: that
    line, and each block's lines, '...' between; lines matching `mark` stand out."""
    from pathlib import Path

    import flashinfer
    from IPython.display import display

    from dflash_fi.figures.listings import file_excerpt

    display(file_excerpt(Path(flashinfer.__file__).parent / "data" / "include" / path, start, blocks, mark, "cpp"))


def show_test(path: str, name: str) -> None:
    """The test function `name` of the repository's `path` (e.g. 'tests/lab/test_routing.py'), its decorators and
    body, as the repository holds it."""
    from pathlib import Path

    from IPython.display import display

    from dflash_fi.figures.listings import code_block

    lines = (Path(__file__).resolve().parent.parent / path).read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"def {name}("))
    start = at
    while start and lines[start - 1].startswith("@"):
        start -= 1
    end = next((i for i in range(at + 1, len(lines)) if lines[i] and not lines[i][0].isspace()
                and not lines[i].startswith(")")), len(lines))
    body = "\n".join(lines[start:end]).rstrip()
    display(code_block(body, path))


def lesson_map() -> str:
    """Markdown: each step, what it is, its hunks (the reason for each), and its notebook."""
    from dflash_fi.steps import STEPS, step_module, step_title

    lines = ["| step | what it is | its hunks, each by its reason | notebook |", "|---|---|---|---|"]
    for step in STEPS:
        previous = len(step_module(step - 1).HUNKS) if step else 0
        hunks = "; ".join(h.why for h in step_module(step).HUNKS[previous:]) or "none: vLLM as shipped"
        lines.append(f"| {step} | {step_title(step).split(' - ', 1)[1].rstrip('.')} | {hunks} | "
                     f"{NOTEBOOK_OF_STEP[step][:2]} |")
    return "\n".join(lines)
