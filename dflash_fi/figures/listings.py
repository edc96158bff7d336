"""Code and diffs as a notebook shows them: monospace HTML with inline styles (nbconvert's HTML and GitHub keep
them: no stylesheet, no script), with the same text as `text/plain` for nbval and terminals.

    diff_block(diff, heading)      one unified diff (a hunk), added lines green, removed red, cut past max_lines
    hunk_blocks(step, hunks)       a step's hunks (`dflash_fi.lab.hunks.step_hunks`), each under its why (or joined)
    code_block(code, heading)      source highlighted by pygments (Python, or another language); chosen lines marked
    details_block(summary, body)   a collapsed <details> (the whole diff of a step, for whoever wants it)
    folded_markdown(summary, md)   a long markdown table, folded the same way (an appendix)
    excerpt(source, blocks)        only the lines of a source a reader needs, '...' between them
    file_excerpt(path, start, ...) the same of a file that is no Python module (FlashInfer's C++ headers)
    wrapped_lines()                a with-block whose printed lines are wrapped at words (a browser breaks mid-word)

Engine calls (one shared `LLM(...)` call and a table of what each engine changes) are `engine_calls.py`.

Every function returns plain data (a `Listing`: html and text); nothing here displays or imports IPython.
"""

from __future__ import annotations

import html
import re
from contextlib import contextmanager
from dataclasses import dataclass

MONO = "font-family: SFMono-Regular, Menlo, Consolas, 'Liberation Mono', monospace; font-size: 12px; line-height: 1.35"
PRE = f"margin: 0; padding: 6px 8px; background: #f6f8fa; border: 1px solid #d0d7de; overflow-x: auto; {MONO}"
HEADING = "margin: 10px 0 2px 0; font-weight: 600; font-size: 13px"
LINE_COLORS = {"+": "#dafbe1", "-": "#ffebe9", "@": "#ddf4ff"}  # added, removed, where the hunk lands
MAX_LINES = 30  # a hunk longer than this is cut, with a note: a reader reads hunks, not screens of diff


@dataclass(frozen=True)
class Listing:
    html: str
    text: str

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": self.html, "text/plain": self.text}


def cut(lines: list[str], max_lines: int | None, what: str = "lines") -> tuple[list[str], str]:
    """The first max_lines lines, and a note saying how many more there were ('' when none)."""
    if max_lines is None or len(lines) <= max_lines:
        return lines, ""
    return lines[:max_lines], f"... {len(lines) - max_lines} more {what}"


def _heading(text: str | None) -> str:
    return f'<div style="{HEADING}">{html.escape(text)}</div>' if text else ""


def _note(text: str) -> str:
    return f'<div style="font-size: 12px; color: #57606a; margin-top: 2px">{html.escape(text)}</div>' if text else ""


def diff_block(diff: str, heading: str | None = None, max_lines: int | None = MAX_LINES,
               more: str = "") -> Listing:
    """A unified diff (its ---/+++ lines dropped) with its lines coloured; past max_lines cut, and the note says
    how much and where the rest is (`more`)."""
    shown, note = _diff_lines(diff, max_lines, more)
    body = f'<pre style="{PRE}">' + "".join(_row(line) for line in shown) + "</pre>"
    text = "\n".join([*([heading] if heading else []), *shown, *([note] if note else [])])
    return Listing(f"<div>{_heading(heading)}{body}{_note(note)}</div>", text)


def _diff_lines(diff: str, max_lines: int | None, more: str) -> tuple[list[str], str]:
    lines = [line for line in diff.splitlines() if not line.startswith(("--- ", "+++ "))]
    shown, note = cut(lines, max_lines)
    return shown, f"{note}{': ' + more if note and more else ''}"


def _row(line: str, style: str = "") -> str:
    color = LINE_COLORS.get(line[:1])
    style = style or (f"background: {color}" if color else "")
    return f'<span style="display: block; {style}">{html.escape(line) or " "}</span>'


def joined_diffs(diffs: list[tuple[str, str, int | None]], more: str = "") -> Listing:
    """Several (heading, diff, max_lines) in one box, each diff under its heading as a line of its own (with where
    the diff's first @@ line says it lands), a little smaller: denser than a `diff_block` each, for a group of hunks."""
    rows, text = [], []
    for heading, diff, max_lines in diffs:
        shown, note = _diff_lines(diff, max_lines and max_lines + 1, more)
        if shown and shown[0].startswith("@@ "):  # where the hunk lands goes on its heading's line
            heading, shown = f"{heading} ({shown[0][3:].split(' ', 1)[-1]})", shown[1:]
        rows += [_row(heading, "font-weight: 600; background: #eaeef2"), *map(_row, shown)]
        rows += [_row(note, "color: #57606a")] if note else []
        text += [heading, *shown, *([note] if note else [])]
    style = PRE.replace("font-size: 12px; line-height: 1.35", "font-size: 11px; line-height: 1.3")
    return Listing(f'<pre style="{style}">' + "".join(rows) + "</pre>", "\n".join(text))


def code_block(code: str, heading: str | None = None, marked: tuple[int, ...] = (), max_lines: int | None = None,
               note: str = "", language: str = "python") -> Listing:
    """Source (Python, or a pygments `language`), highlighted with inline styles; `marked` lines (1-based) on a
    yellow background."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name

    lines, cut_note = cut(code.rstrip("\n").splitlines(), max_lines)
    note = "; ".join(n for n in (cut_note, note) if n)
    formatter = HtmlFormatter(noclasses=True, nowrap=True, style="default", hl_lines=list(marked))
    body = highlight("\n".join(lines) + "\n", get_lexer_by_name(language), formatter)
    text = "\n".join([*([heading] if heading else []), *lines, *([note] if note else [])])
    return Listing(f'<div>{_heading(heading)}<pre style="{PRE}">{body}</pre>{_note(note)}</div>', text)


def hunk_blocks(step: int, hunks: list[dict], only: list[int] | None = None,
                max_lines: int | dict[int, int] | None = MAX_LINES, joined: bool = False) -> Listing:
    """The hunks numbered `only` (all by default), each under 'step N, hunk k of m: why', cut past `max_lines` (or
    past max_lines[k] for hunk k, all of a hunk it leaves out); `joined`: in one box."""
    shown = [(f"step {step}, hunk {h['number']} of {h['of']}: {h['why']}", h["diff"],
              max_lines.get(h["number"]) if isinstance(max_lines, dict) else max_lines)
             for h in hunks if not only or h["number"] in only]
    more = "the whole diff is in this notebook's appendix"
    if joined:
        return joined_diffs(shown, more)
    return stack(*(diff_block(diff, heading, limit, more=more) for heading, diff, limit in shown))


def details_block(summary: str, body: Listing) -> Listing:
    """`body` folded under `summary`: the HTML view opens it on a click; text shows only the summary."""
    return Listing(f'<details><summary style="cursor: pointer; {HEADING}">{html.escape(summary)}</summary>'
                   f"{body.html}</details>", f"{summary} (folded: open it in the HTML view)")


def folded_markdown(summary: str, markdown: str) -> Listing:
    """A long markdown table (an appendix's) as HTML folded under `summary`; its text is the markdown itself."""
    import mistune  # nbconvert's markdown renderer, there wherever Jupyter is

    return Listing(details_block(summary, Listing(mistune.html(markdown), "")).html, f"{summary}\n{markdown}")


def folded_diff(summary: str, diff: str) -> Listing:
    return details_block(f"{summary} ({len(diff.splitlines())} lines)", diff_block(diff, max_lines=None))


def source_excerpt(function, blocks: list[tuple[str, str]], mark: tuple[str, ...] = ()) -> Listing:
    """`excerpt` of a function's source (as installed), headed by its module and name."""
    import inspect
    import textwrap

    code, marked = excerpt(textwrap.dedent(inspect.getsource(function)), blocks, mark)
    return code_block(code, f"{function.__module__}.{function.__qualname__}", tuple(marked))


def file_excerpt(path, start: str, blocks: list[tuple[str, str]], mark: tuple[str, ...] = (),
                 language: str = "python") -> Listing:
    """`excerpt` of a file's text from the first line matching `start` (kept as the excerpt's first line), headed by
    the file's path below the sys.path entry that holds it (wherever the machine installed it)."""
    from pathlib import Path

    from dflash_fi.engine.instruments import importable_path

    lines = Path(path).read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if re.search(start, line))
    code, marked = excerpt("\n".join(lines[first:]), blocks, mark, head=0)
    return code_block(code, importable_path(str(path)), tuple(marked), language=language)


def stack(*listings: Listing) -> Listing:
    return Listing("".join(x.html for x in listings), "\n\n".join(x.text for x in listings))


def excerpt(source: str, blocks: list[tuple[str, str]], mark: tuple[str, ...] = (),
            head: int | None = None) -> tuple[str, list[int]]:
    """The `def` line of `source` (or line `head`), then the lines from each block's first regex to its last
    (inclusive), '...' where lines are left out. Returns the text and the numbers (1-based) of its lines that match a
    regex of `mark` (by default, each block's first line), for `code_block(marked=...)`."""
    lines = source.rstrip("\n").splitlines()
    keep = {head if head is not None else
            next((i for i, line in enumerate(lines) if line.lstrip().startswith(("def ", "async def "))), 0)}
    firsts = set()
    for first, last in blocks:
        start = next(i for i, line in enumerate(lines) if re.search(first, line))
        end = next(i for i in range(start, len(lines)) if re.search(last, lines[i]))
        keep.update(range(start, end + 1))
        firsts.add(start)
    out, marked, previous = [], [], None
    for i in sorted(keep):
        if previous is not None and i > previous + 1:
            out.append(" " * (len(lines[i]) - len(lines[i].lstrip())) + "...")
        out.append(lines[i])
        if any(re.search(m, lines[i]) for m in mark) if mark else i in firsts:
            marked.append(len(out))
        previous = i
    if previous < len(lines) - 1:
        out.append(" " * (len(out[-1]) - len(out[-1].lstrip())) + "...")
    return "\n".join(out), marked


@contextmanager
def wrapped_lines(width: int = 110):
    """What the block prints, wrapped at word boundaries (a browser breaks a long line mid-word)."""
    import io
    import textwrap
    from contextlib import redirect_stdout

    printed = io.StringIO()
    try:
        with redirect_stdout(printed):
            yield
    finally:
        for line in printed.getvalue().splitlines():
            print(textwrap.fill(line, width, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)
                  if line.strip() else line)
