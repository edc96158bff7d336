"""Each step's own hunks, one at a time: the unified diff of flashinfer.py before and after that one hunk, and
where in vLLM's source it lands (the class and method), for notebooks that show a step hunk by hunk.
Where each hunk lands on a draft layer's path (selector, build(), plan(), ...) is `dflash_fi.figures.path.LANDS`,
checked against the steps' hunk counts by tests/test_lesson.py.
"""

from __future__ import annotations

import difflib
import re
from functools import lru_cache


def step_hunks(step: int, context: int = 3) -> list[dict]:
    """Step `step`'s own hunks, in order: number (1-based), why, and its diff (`context` unchanged lines around each
    change), whose @@ lines say where it lands."""
    from dflash_fi.steps import step_module
    from dflash_fi.steps.patching import apply_hunks, stock_source, unified_diff

    stock, hunks = stock_source(), step_module(step).HUNKS
    first = len(step_module(step - 1).HUNKS) if step else len(hunks)
    shown = []
    for k in range(first, len(hunks)):
        before, after = apply_hunks(stock, hunks[:k]), apply_hunks(stock, hunks[:k + 1])
        diff = located(unified_diff(before, after, "a/flashinfer.py", "b/flashinfer.py", context), after,
                       "flashinfer.py")
        shown.append({"number": k - first + 1, "of": len(hunks) - first, "why": hunks[k].why, "diff": diff})
    return shown


def enclosing(source: str, line: int) -> str:
    """"Class.method", "Class", "function" or "module level": where line `line` (1-based) of a module sits."""
    lines = source.splitlines()[:line]
    method = None
    for text in reversed(lines):
        found = re.match(r"^(\s*)(?:async )?(def|class) (\w+)", text)
        if found and found.group(1) == "    " and method is None and found.group(2) == "def":
            method = found.group(3)
        elif found and not found.group(1):
            return f"{found.group(3)}.{method}" if method and found.group(2) == "class" else found.group(3)
        elif text[:1].strip() and not text.startswith((")", "#", "]", "}", "@")):
            break  # a module-level statement: not inside a def or class
    return "module level"


def located(diff: str, after: str, filename: str) -> str:
    """The diff with each '@@ -a,b +c,d @@' line replaced by where its first changed line lands in `after`."""
    out, lines, i = [], diff.splitlines(), 0
    while i < len(lines):
        found = re.match(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@", lines[i])
        if found:
            # The first changed line that says something: a decorator's function, not a blank line before it.
            body = [x for x in lines[i + 1:] if not x.startswith("-")]
            first = int(found.group(1)) + next((k for k, x in enumerate(body) if x[:1] == "+" and x[1:].strip()
                                                 and not x[1:].strip().startswith("@")), 0)
            out.append(f"@@ {filename} line {first}, in {enclosing(after, first)}")
        else:
            out.append(lines[i])
        i += 1
    return "\n".join(out) + "\n"




@lru_cache(maxsize=None)
def line_hunks(step: int) -> tuple:
    """Who wrote each line of step `step`'s flashinfer.py (index 0 is line 1): the hunk that added or last
    rewrote it, or None for a line of vLLM 0.22.1's own. A hunk's unchanged context lines keep their writer."""
    from dflash_fi.steps import step_module
    from dflash_fi.steps.patching import stock_source

    source = stock_source()
    owners = [None] * len(source.splitlines())
    for hunk in step_module(step).HUNKS:
        at = source.index(hunk.old)  # apply_hunks has checked it matches once
        first = source.count("\n", 0, at)
        after = source.replace(hunk.old, hunk.new)
        old = source.splitlines()[first:source.count("\n", 0, at + len(hunk.old.rstrip("\n"))) + 1]
        new = after.splitlines()[first:after.count("\n", 0, at + len(hunk.new.rstrip("\n"))) + 1]
        region = [hunk] * len(new)
        for a, b, size in difflib.SequenceMatcher(None, old, new, autojunk=False).get_matching_blocks():
            region[b:b + size] = owners[first + a:first + a + size]
        owners[first:first + len(old)] = region
        source = after
    return tuple(owners)
