"""Code and diffs as a notebook shows them: monospace HTML with inline styles (nbconvert's HTML and GitHub keep
them: no stylesheet, no script), with the same text as `text/plain` for nbval and terminals.

    diff_block(diff, heading)      one unified diff (a hunk), added lines green, removed red, cut past max_lines
    hunk_blocks(step, hunks)       a step's hunks (`dflash_fi.lab.hunks.step_hunks`), each under its why
    code_block(code, heading)      Python source, highlighted by pygments; chosen lines marked
    details_block(summary, body)   a collapsed <details> (the whole diff of a step, for whoever wants it)
    excerpt(source, blocks)        only the lines of a source a reader needs, '...' between them
    common_call(calls)             what N engine calls share, and what each changes
    wrapped_lines()                a with-block whose printed lines are wrapped at words (a browser breaks mid-word)
    engine_calls(calls, steps)     the shared `LLM(...)` call as a listing, and a markdown table of the rest

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
    lines = [line for line in diff.splitlines() if not line.startswith(("--- ", "+++ "))]
    shown, note = cut(lines, max_lines)
    note = f"{note}{': ' + more if note and more else ''}"
    rows = []
    for line in shown:
        color = LINE_COLORS.get(line[:1])
        style = f"display: block; background: {color}" if color else "display: block"
        rows.append(f'<span style="{style}">{html.escape(line) or " "}</span>')
    body = f'<pre style="{PRE}">' + "".join(rows) + "</pre>"
    text = "\n".join([*([heading] if heading else []), *shown, *([note] if note else [])])
    return Listing(f"<div>{_heading(heading)}{body}{_note(note)}</div>", text)


def code_block(code: str, heading: str | None = None, marked: tuple[int, ...] = (), max_lines: int | None = None,
               note: str = "") -> Listing:
    """Python source, highlighted with inline styles; `marked` lines (1-based) on a yellow background."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    lines, cut_note = cut(code.rstrip("\n").splitlines(), max_lines)
    note = "; ".join(n for n in (cut_note, note) if n)
    formatter = HtmlFormatter(noclasses=True, nowrap=True, style="default", hl_lines=list(marked))
    body = highlight("\n".join(lines) + "\n", PythonLexer(), formatter)
    text = "\n".join([*([heading] if heading else []), *lines, *([note] if note else [])])
    return Listing(f'<div>{_heading(heading)}<pre style="{PRE}">{body}</pre>{_note(note)}</div>', text)


def hunk_blocks(step: int, hunks: list[dict], only: list[int] | None = None,
                max_lines: int | None = MAX_LINES) -> Listing:
    """The hunks numbered `only` (all by default), each under 'step N, hunk k of m: why'."""
    return stack(*(diff_block(h["diff"], f"step {step}, hunk {h['number']} of {h['of']}: {h['why']}", max_lines,
                              more="the whole diff is in this notebook's appendix")
                   for h in hunks if not only or h["number"] in only))


def details_block(summary: str, body: Listing) -> Listing:
    """`body` folded under `summary`: the HTML view opens it on a click; text shows only the summary."""
    return Listing(f'<details><summary style="cursor: pointer; {HEADING}">{html.escape(summary)}</summary>'
                   f"{body.html}</details>", f"{summary} (folded: open it in the HTML view)")


def folded_diff(summary: str, diff: str) -> Listing:
    return details_block(f"{summary} ({len(diff.splitlines())} lines)", diff_block(diff, max_lines=None))


def source_excerpt(function, blocks: list[tuple[str, str]], mark: tuple[str, ...] = ()) -> Listing:
    """`excerpt` of a function's source (as installed), headed by its module and name."""
    import inspect
    import textwrap

    code, marked = excerpt(textwrap.dedent(inspect.getsource(function)), blocks, mark)
    return code_block(code, f"{function.__module__}.{function.__qualname__}", tuple(marked))


def stack(*listings: Listing) -> Listing:
    return Listing("".join(x.html for x in listings), "\n\n".join(x.text for x in listings))


def excerpt(source: str, blocks: list[tuple[str, str]], mark: tuple[str, ...] = ()) -> tuple[str, list[int]]:
    """The `def` line of `source`, then the lines from each block's first regex to its last (inclusive), '...' where
    lines are left out. Returns the text and the numbers (1-based) of its lines that match a regex of `mark` (by
    default, each block's first line), for `code_block(marked=...)`."""
    lines = source.rstrip("\n").splitlines()
    keep = {next((i for i, line in enumerate(lines) if line.lstrip().startswith(("def ", "async def "))), 0)}
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


_MISSING = object()


@dataclass(frozen=True)
class Difference:
    """How one engine's call differs from the common one: an argument (a path through nested dicts) set to
    another value, or left out (`absent`)."""

    path: tuple[str, ...]
    value: object = None
    absent: bool = False

    def __str__(self) -> str:  # rendered for the table, never read back
        shown = self.path[0] + "".join(f"[{key!r}]" for key in self.path[1:])
        return f"no {shown}" if self.absent else f"{shown}={self.value!r}"


def common_call(calls: dict[str, dict]) -> tuple[dict, dict[str, list[Difference]]]:
    """calls: engine name -> its keyword arguments (dicts nested). Returns the base arguments (each path at the
    value most engines give it; left out where most leave it out) and, per engine, how it differs from the base."""
    flat = {engine: _flatten(kwargs) for engine, kwargs in calls.items()}
    paths = list(dict.fromkeys(p for f in flat.values() for p in f))
    base = {}
    for path in paths:
        values = [f.get(path, _MISSING) for f in flat.values()]
        best = max(values, key=lambda v: (sum(_same(v, w) for w in values), v is not _MISSING))
        if best is not _MISSING:
            base[path] = best
    differences = {}
    for engine, f in flat.items():
        changed = [Difference(p, f[p]) for p in paths if p in f and not _same(f[p], base.get(p, _MISSING))]
        absent = [p for p in base if p not in f]
        # A whole argument left out (no speculation: no speculative_config) is named once.
        whole = {p[0] for p in absent if not any(q[0] == p[0] for q in f)}
        differences[engine] = changed + [Difference((h,), absent=True) for h in dict.fromkeys(p[0] for p in absent)
                                         if h in whole]
        differences[engine] += [Difference(p, absent=True) for p in absent if p[0] not in whole]
    return _unflatten(base), differences


def _same(a, b) -> bool:
    return a is b if _MISSING in (a, b) else a == b


def _flatten(kwargs: dict, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    flat = {}
    for key, value in kwargs.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, (*prefix, key)))
        else:
            flat[(*prefix, key)] = value
    return flat


def _unflatten(flat: dict) -> dict:
    out: dict = {}
    for (*parents, leaf), value in flat.items():
        node = out
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return out


def engine_calls(calls: dict[str, dict], steps: dict[str, int], env: str, order: tuple[str, ...],
                 root=None) -> tuple[Listing, str]:
    """calls: engine name -> its `LLM(**kwargs)`; steps: engine name -> the step `env` selects. The call all share
    (arguments in `order`, paths under `root` shown relative to it) as a listing, and a markdown table: each engine,
    its step, what it changes."""
    def relative(value):  # the same text on every machine
        if isinstance(value, dict):
            return {k: relative(v) for k, v in value.items()}
        return value.removeprefix(f"{root}/") if root and isinstance(value, str) else value

    base, differences = common_call({name: relative(kwargs) for name, kwargs in calls.items()})
    lines = ["import os", "from vllm import LLM", "",
             f"os.environ[{env!r}] = step  # FLASHINFER's step: the table's column 'step' (0: vLLM's own)",
             "llm = LLM(", *(f"    {name}={_argument(base[name])}," for name in order if name in base), ")"]
    table = ["| engine | step | what it changes in the call above |", "|---|---|---|"]
    table += [f"| {name} | {steps[name]} | " + ("; ".join(f"`{d}`" for d in differences[name]) or "nothing") + " |"
              for name in calls]
    return code_block("\n".join(lines), f"The call every engine below makes ({len(calls)} engines, one process "
                      "each)"), "\n".join(table)


def _argument(value) -> str:
    """repr, a dict one key a line when it would not fit on one."""
    if not isinstance(value, dict) or len(repr(value)) < 70:
        return repr(value)
    return "{\n" + "".join(f"        {k!r}: {v!r},\n" for k, v in value.items()) + "    }"


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
