"""Each notebook fits its screen budget, and no verdict is typed.

A screen is what a reader sees of nbconvert's HTML (lab template) in a 1400 x 1000 browser window; appendices folded
(the cells between '## Appendix' and the next '## ' heading are left out, their heading kept). The height is a CPU
proxy computed from the committed .ipynb alone: each markdown block, code line, printed line, table row, HTML
listing line and picture (its height from its PNG header) counts the pixels the browser gives it. `.ci/screens`
measures the same pages in headless Chromium and prints both, to check the proxy against the browser.
"""

from __future__ import annotations

import base64
import re
import struct
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

# The budgets, in screens of 1000 px, and the one place they are kept.
SCREEN_PX = 1000
BUDGET = {"00": 4.0}  # the introduction
DEFAULT_BUDGET = 6.0  # every other notebook: one idea


def budget(stem: str) -> float:
    return BUDGET.get(stem[:2], DEFAULT_BUDGET)


# Pixels, calibrated against headless Chromium on nbconvert 7's lab template at 1400 x 1000 (`.ci/screens`).
PAGE = 40  # the page's own margins
CELL = 12  # the gap around every cell
CODE_LINE, CODE_PAD = 17, 12  # an input line; the editor's padding
PRINT_LINE, PRINT_PAD, PRINT_CHARS = 17, 0, 160  # a printed line (wrapped at PRINT_CHARS); an output's padding
HTML_LINE, HTML_PAD = 17, 25  # a line of a listing (code, diffs: their text/plain has one line per line), unless
# the listing sets its font size and line height
FOLDED = 42  # a <details> folded: its summary line
IMAGE_WIDTH = 1270  # a picture wider than this is scaled down to it
MD_LINE, MD_CHARS = 23, 165  # a line of markdown prose; its characters (a code span's count 1.3 times)
MD_PAD, MD_BLOCK = 6, 14  # a markdown cell's padding; the space between blocks
HEADING = {1: 52, 2: 38, 3: 28}
TABLE_ROW, TABLE_HEAD, TABLE_LINE = 30, 34, 21  # a table row; its header; each line a cell wraps to past the first
TABLE_CELL_CHARS, TABLE_CHARS = 3, 190  # a table cell's padding, and a row's width, in characters
FENCE_LINE, FENCE_PAD = 17, 20  # a fenced code block in markdown


def _width(text: str) -> float:
    """Characters of prose a text takes: a code span's count 1.3 times, a link only its text, bold's stars none."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("**", "")
    spans = re.findall(r"`[^`]*`", text)
    return len(re.sub(r"`[^`]*`", "", text)) + 1.3 * sum(len(s) for s in spans)


def _prose_lines(text: str, chars: int = MD_CHARS) -> int:
    return max(1, -(-int(_width(text)) // chars))


def _column_widths(body: list[list[str]], room: float) -> list[float]:
    """A browser's automatic table layout, as CSS describes it: each column at least its longest word, and the room
    left shared in proportion to how much more than that its longest cell wants."""
    columns = max(len(r) for r in body)
    cells = [[r[c] if c < len(r) else "" for r in body] for c in range(columns)]
    most = [max(_width(cell) for cell in column) + TABLE_CELL_CHARS for column in cells]
    least = [max((len(w) for cell in column for w in cell.replace("`", "").split()), default=1) + TABLE_CELL_CHARS
             for column in cells]
    if sum(most) <= room:
        return most
    spare, want = max(0.0, room - sum(least)), sum(m - n for m, n in zip(most, least)) or 1
    return [n + spare * (m - n) / want for m, n in zip(most, least)]


def _table_px(rows: list[str]) -> float:
    """A markdown table's height: each row as high as its cell that wraps to the most lines in its column."""
    cells = [[c.strip() for c in row.strip().strip("|").split("|")] for row in rows]
    body = [r for r in cells if not all(re.fullmatch(r":?-+:?", c or "-") for c in r)]
    if not body:
        return 0
    widths = _column_widths(body, TABLE_CHARS)
    px = TABLE_HEAD
    for row in body[1:]:
        lines = max(-(-int(_width(cell)) // max(4, int(widths[c]) - TABLE_CELL_CHARS)) for c, cell in enumerate(row))
        px += TABLE_ROW + TABLE_LINE * (max(1, lines) - 1)
    return px


def markdown_px(source: str) -> float:
    """A markdown text's height: headings, paragraphs and list items (wrapped), tables, fenced code."""
    px, blocks, lines = 0.0, 0, source.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        blocks += 1
        if line.startswith("```"):
            j = next((k for k in range(i + 1, len(lines)) if lines[k].startswith("```")), len(lines))
            px += FENCE_PAD + FENCE_LINE * (j - i - 1)
            i = j + 1
        elif re.match(r"#{1,6} ", line):
            px += HEADING.get(len(line) - len(line.lstrip("#")), HEADING[3])
            i += 1
        elif line.lstrip().startswith("|"):
            j = i
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            px += _table_px(lines[i:j])
            i = j
        else:  # a paragraph, or a list: each item wrapped on its own
            j, items = i, []
            while j < len(lines) and lines[j].strip() and not lines[j].startswith(("```", "#", "|")):
                if re.match(r"\s*([-*+]|\d+\.) ", lines[j]) or not items:
                    items.append(lines[j].strip())
                else:
                    items[-1] += " " + lines[j].strip()
                j += 1
            px += MD_LINE * sum(_prose_lines(item) for item in items)
            i = j
    return MD_PAD + px + MD_BLOCK * max(0, blocks - 1)


def _png_height(data: str) -> float:
    width, height = struct.unpack(">II", base64.b64decode(data[:64])[16:24])
    return height * min(1.0, IMAGE_WIDTH / width)


def _printed_px(text: str) -> float:
    lines = text.rstrip("\n").splitlines()
    return PRINT_PAD + PRINT_LINE * sum(max(1, -(-len(line) // PRINT_CHARS)) for line in lines)


def output_px(output) -> float:
    if output.get("output_type") == "stream":
        return _printed_px(output.get("text", ""))
    data = output.get("data", {})
    if "image/png" in data:
        return _png_height(data["image/png"]) + 4
    if "text/html" in data:
        html = data["text/html"]
        if html.lstrip().startswith("<details") and "<details open" not in html:
            return FOLDED
        if "<table" in html and "text/plain" not in data:
            return TABLE_HEAD + TABLE_ROW * max(0, html.count("<tr") - 1)
        size = re.search(r"font-size: (\d+)px; line-height: ([\d.]+)", html)  # a denser listing: its own lines
        line = float(size[1]) * float(size[2]) + 0.8 if size else HTML_LINE
        return HTML_PAD + line * len(data.get("text/plain", "").splitlines())
    if "text/markdown" in data:
        return markdown_px(data["text/markdown"])
    if "text/plain" in data:
        return _printed_px(data["text/plain"])
    if output.get("output_type") == "error":
        return _printed_px("\n".join(output.get("traceback", [])))
    return 0.0


def shown_cells(nb) -> list:
    """The cells a reader scrolls past: all but an appendix's (its heading kept)."""
    shown, folded = [], False
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.startswith("## "):
            folded = cell.source.startswith("## Appendix")
            shown.append(cell)
        elif not folded:
            shown.append(cell)
    return shown


def cell_px(cell) -> float:
    if cell.cell_type == "markdown":
        return CELL + markdown_px(cell.source)
    if cell.cell_type == "code":
        return (CELL + CODE_PAD + CODE_LINE * len(cell.source.splitlines())
                + sum(map(output_px, cell.get("outputs", []))))
    return CELL + CODE_PAD + CODE_LINE * len(cell.source.splitlines())


def screens(path: Path) -> float:
    """The notebook's height in screens, appendices folded."""
    nb = nbformat.read(path, as_version=4)
    return (PAGE + sum(map(cell_px, shown_cells(nb)))) / SCREEN_PX


NOTEBOOK_FILES = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=lambda p: p.stem)
def test_notebook_fits_its_screen_budget(path):
    height = screens(path)
    assert height <= budget(path.stem), (
        f"{path.stem} is {height:.1f} screens (1400 x 1000, appendices folded), over its budget of "
        f"{budget(path.stem):g}: cut, or move what a reader only looks up into the appendix")


def test_the_screen_test_can_fail(tmp_path):
    """A notebook of 400 printed lines and a long markdown is over any budget; a short one is within."""
    long = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# A long notebook\n\n" + "\n\n".join(["A paragraph of prose. " * 12] * 40)),
        nbformat.v4.new_code_cell("for i in range(400):\n    print(i)", outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="".join(f"{i}\n" for i in range(400)))]),
    ])
    short = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Short\n\nOne line."),
                                            nbformat.v4.new_code_cell("print(1)")])
    nbformat.write(long, tmp_path / "05_long.ipynb")
    nbformat.write(short, tmp_path / "05_short.ipynb")
    assert screens(tmp_path / "05_long.ipynb") > budget("05_long")
    assert screens(tmp_path / "05_short.ipynb") < 1
    with pytest.raises(AssertionError, match="over its budget"):
        test_notebook_fits_its_screen_budget(tmp_path / "05_long.ipynb")


# A typed verdict: a measured number in a notebook's prose (the numbers belong in outputs, computed).
MEASURED = re.compile(r"(?<![\w.#])(\d+(?:\.\d+)?\s?(?:ms|%|x|s|tokens?)(?!\w)|\d+\.\d+)")
ALLOWED = re.compile(
    r"`[^`]*`"  # code spans
    r"|```.*?```"  # fenced code
    r"|\b\d+\.\d+\.\d+\b"  # versions: vLLM 0.22.1
    r"|#\d+"  # PR and issue numbers
    r"|\bSM \d+(?:\.(?:\d+|x))?(?:\s*(?:,| and| or|/)\s*\d+(?:\.(?:\d+|x))?)*"  # SM 8.9, 9.0 and 10.0
    r"|\bsm_?\d+\b"
    r"|\(\d+(?:, \d+)*\)"  # tuples: pretend_gpu((10, 0))
    r"|\b\d+ ?x ?\d+\b"  # sizes: 1400 x 1000, 4 x 16
    r"|\b\d+ \+ \d+ tokens?",  # a block's shape: 1 + 15 tokens
    re.S)


def typed_numbers(markdown: str) -> list[str]:
    return MEASURED.findall(ALLOWED.sub(" ", markdown))


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=lambda p: p.stem)
def test_no_verdict_is_typed(path):
    nb = nbformat.read(path, as_version=4)
    typed = [(i, n) for i, c in enumerate(nb.cells) if c.cell_type == "markdown" for n in typed_numbers(c.source)]
    assert typed == [], f"{path.stem}: measured numbers typed in markdown (cell, number): {typed}; compute them"


def test_typed_numbers_are_found_and_versions_are_not():
    assert typed_numbers("tau 4.275 is above 4.187, 12 ms faster, 3% off, 1.5x, 40 tokens") == [
        "4.275", "4.187", "12 ms", "3%", "1.5x", "40 tokens"]
    assert typed_numbers("vLLM 0.22.1, PR #43081, SM 9.0 and SM 10.x, `tau = 4.1`, 1400 x 1000, step 3") == []
