"""What the notebooks show: check lines and verdicts, tables, vLLM's code and the steps' hunks. Lesson only: it
runs no engine and reads no evidence. Nothing here runs at import."""

from __future__ import annotations

from dflash_fi.figures.listings import wrapped_lines  # noqa: F401 (the notebooks import it through the facade)


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


def changed_rows(columns: list[str], rows: list[list], first: int = 1) -> str:
    """A markdown table of one row per case and one column per step (from column `first` on), with the rows whose
    step columns differ highlighted: the case's name bold and marked 'changes', and in each later column the parts
    that differ from the column before it in bold. A cell is text, or its parts: a tuple of groups (shown joined by
    '; '), each a tuple of parts (joined by ', '). Rows that stay as they were stay plain."""
    def groups(cell):
        return ((cell,),) if isinstance(cell, str) else tuple(tuple(g) for g in cell)

    def shown(cell, before=None):
        old = None if before is None else {p for g in groups(before) for p in g}
        return "; ".join(", ".join(p if old is None or p in old or not p else f"**{p}**" for p in g)
                         for g in groups(cell))

    out = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for row in rows:
        if len({groups(c) for c in row[first:]}) <= 1:
            cells = [shown(c) for c in row]
        else:
            cells = [f"**{c}** (changes)" if j == 0 else shown(c) for j, c in enumerate(row[:first])]
            cells += [shown(row[first])] + [shown(c, b) for b, c in zip(row[first:], row[first + 1:])]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


# Code, diffs, engine calls: HTML with inline styles (nbconvert and GitHub keep them) and text/plain for nbval.
def show_hunks(step: int, only: list[int] | None = None, max_lines: int | dict[int, int | slice] = 30, context: int = 3,
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


def show_test(path: str, name: str) -> None:
    """The test function `name` of the repository's `path` (e.g. 'tests/lab/test_routing.py'), its decorators and
    body, as the repository holds it."""
    from pathlib import Path

    from IPython.display import display

    from dflash_fi.figures.listings import code_block

    lines = (Path(__file__).resolve().parent.parent.parent / path).read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"def {name}("))
    start = at
    while start and lines[start - 1].startswith("@"):
        start -= 1
    end = next((i for i in range(at + 1, len(lines)) if lines[i] and not lines[i][0].isspace()
                and not lines[i].startswith(")")), len(lines))
    body = "\n".join(lines[start:end]).rstrip()
    display(code_block(body, path))
