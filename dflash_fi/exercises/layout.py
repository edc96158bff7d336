"""An exercise file: the place and the stock text of each of a step's hunks, for a reader to rewrite.

The file is Python a reader edits by hand and we read as data: `STEP = n` and `HUNKS = [{...}, ...]`, parsed with
`ast` and `ast.literal_eval`, never run. Each hunk is a dict of raw triple-quoted strings, "old" (the text it
replaces, which must occur exactly once) and "new", and optionally "why"; the line break right after an opening
r''' belongs to the layout, not to the text (as in TOML's multi-line strings).
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from dflash_fi.errors import BadInput
from dflash_fi.steps.patching import Hunk

KEYS = ("why", "old", "new")


def _literal(text: str) -> str:
    """`text` as a string literal a reader can edit: raw and triple-quoted, starting on the line after the quotes."""
    for quotes in ("'''", '"""'):
        if quotes not in text and not text.endswith(("\\", quotes[0])):
            return f"r{quotes}\n{text}{quotes}"
    return repr("\n" + text)  # a text raw quotes cannot hold


def _comment(text: str) -> str:
    return "\n".join(f"# {line}".rstrip() for line in text.splitlines())


def layout_text(step: int, title: str, base_name: str, places: list[str], hunks: tuple[Hunk, ...],
                checks: list[str], new: tuple[str, ...] | None = None) -> str:
    """The exercise file of `step`: a header (the goal, what the check runs), then each hunk's reason, place and stock
    text, its "new" pre-filled with the stock text unless `new` is given."""
    header = [
        f"Exercise {step}: {title}", "",
        f"Write step {step}'s hunks. They apply to {base_name}, each replacing its \"old\" text",
        "(which must occur exactly once) with its \"new\" text. \"new\" starts as a copy of \"old\": edit it. You may",
        "also change \"old\" (to patch elsewhere), add hunks or remove them. Line numbers are in that file; print it:",
        f"  python -c \"from dflash_fi.steps import patched_source; print(patched_source({step - 1}))\"",
        "Strings are raw (r'''...'''): type the source as it is, backslashes included. The line break right after",
        "an opening r''' is not part of the text. This file is read as data (ast.literal_eval), never run.", "",
        f"Check it: dflash-fi exercise {step} --check PATH  (the CPU lab, with your hunks in place of step {step}'s)",
        "It checks that:", *[line for says in checks for line in textwrap.wrap(
            says, 110, initial_indent="  - ", subsequent_indent="    ")],
    ]
    body = [_comment("\n".join(header)), "", f"STEP = {step}", "", "HUNKS = ["]
    for number, (hunk, place) in enumerate(zip(hunks, places), 1):
        body += [f"    # Hunk {number} of {len(hunks)}: {hunk.why}", f"    # It lands in {place}.", "    {",
                 f"        \"why\": {hunk.why!r},", f"        \"old\": {_literal(hunk.old)},",
                 f"        \"new\": {_literal(hunk.old if new is None else new[number - 1])},", "    },"]
    return "\n".join(body + ["]", ""])


def _text(value, key: str, where: str) -> str:
    if not isinstance(value, str):
        raise BadInput(f"{where}: \"{key}\" must be a string, not {type(value).__name__}")
    return value[1:] if value.startswith("\n") else value  # the layout's line break after the opening quotes


def read_exercise(path: Path, step: int) -> tuple[tuple[Hunk, ...], tuple[int, ...]]:
    """The reader's hunks in `path`, and the line of each in the file; BadInput for anything else."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"no exercise file {path}: write one with `dflash-fi exercise {step}` (or give its path)")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        line = f" line {exc.lineno}" if getattr(exc, "lineno", None) else ""
        reason = f"{type(exc).__name__}: {getattr(exc, 'msg', exc)}"
        raise BadInput(f"{path}{line}: not an exercise file ({reason})") from None
    found = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in ("STEP", "HUNKS") and node.targets[0].id not in found):
            raise BadInput(f"{path} line {node.lineno}: an exercise file holds `STEP = {step}` and `HUNKS = [...]`, "
                           "once each, and nothing else")
        found[node.targets[0].id] = node.value
    if found.keys() != {"STEP", "HUNKS"}:
        raise BadInput(f"{path}: no {' or '.join(sorted({'STEP', 'HUNKS'} - found.keys()))} in it")
    values = {}
    for name, node in found.items():
        try:
            values[name] = ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise BadInput(f"{path} line {node.lineno}: {name} must be plain literals (strings, numbers, lists, "
                           "dicts), no names, calls or operators") from None
    if values["STEP"] != step or type(values["STEP"]) is not int:
        raise BadInput(f"{path} is the exercise of step {values['STEP']!r}, not of step {step}: check it with "
                       f"`dflash-fi exercise {values['STEP']} --check {path}`")
    if not isinstance(values["HUNKS"], (list, tuple)) or not values["HUNKS"]:
        raise BadInput(f"{path} line {found['HUNKS'].lineno}: HUNKS must be a non-empty list of dicts")
    hunks = []
    for number, (item, node) in enumerate(zip(values["HUNKS"], found["HUNKS"].elts), 1):
        where = f"{path} line {node.lineno}, hunk {number}"
        if not isinstance(item, dict) or not {"old", "new"} <= item.keys() <= set(KEYS):
            raise BadInput(f"{where}: a hunk is a dict with \"old\" and \"new\" (and \"why\", if you like), nothing "
                           f"else; this one has {sorted(item) if isinstance(item, dict) else type(item).__name__}")
        old, new = _text(item["old"], "old", where), _text(item["new"], "new", where)
        if not old:
            raise BadInput(f"{where}: \"old\" is empty: it says where the hunk lands")
        why = item.get("why", f"your hunk {number}")
        hunks.append(Hunk(why=why if isinstance(why, str) else repr(why), old=old, new=new))
    return tuple(hunks), tuple(node.lineno for node in found["HUNKS"].elts)
