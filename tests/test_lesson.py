"""The notebooks read as a lesson: words defined before they are used, tables that render, each step shown hunk by
hunk, no wall of output, and code and diffs that stay monospace and coloured in nbconvert's HTML."""

import re
from pathlib import Path

import jupytext
import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PAIRS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))
LESSON = PAIRS  # in reading order
MAX_OUTPUT_LINES, MAX_TABLE_ROWS = 60, 15


def executed(script):
    return nbformat.read(script.with_suffix(".ipynb"), as_version=4)


def markdown_outputs(cell):
    return [o["data"]["text/markdown"] for o in cell.get("outputs", []) if "text/markdown" in o.get("data", {})]


def tables(markdown: str) -> list[list[str]]:
    """The markdown tables in a text: runs of lines starting with '|'."""
    found, current = [], []
    for line in markdown.splitlines() + [""]:
        if line.lstrip().startswith("|"):
            current.append(line.strip())
        elif current:
            found.append(current)
            current = []
    return found


def cells_of(row: str) -> int:
    return len(re.split(r"(?<!\\)\|", row.strip().strip("|")))


def markdown_texts(script):
    """(where, markdown) for every markdown cell of the pair and every markdown output of its executed notebook."""
    for i, cell in enumerate(jupytext.read(script).cells):
        if cell.cell_type == "markdown":
            yield f"{script.name} cell {i}", cell.source
    for i, cell in enumerate(executed(script).cells):
        for text in markdown_outputs(cell):
            yield f"{script.with_suffix('.ipynb').name} output of cell {i}", text


@pytest.mark.parametrize("script", PAIRS, ids=lambda p: p.stem)
def test_every_markdown_table_is_well_formed(script):
    """Header, separator and every row have the same number of cells: otherwise the table renders as raw pipes."""
    for where, text in markdown_texts(script):
        for table in tables(text):
            counts = [cells_of(row) for row in table]
            assert len(table) >= 2 and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", table[1].replace(" ", "")), \
                f"{where}: a table without a separator line: {table[:2]}"
            assert len(set(counts)) == 1, f"{where}: cells per line {counts}: {table[0]}"


@pytest.mark.parametrize("script", PAIRS, ids=lambda p: p.stem)
def test_no_markdown_line_starts_with_a_number_sign_and_a_digit(script):
    """'#48167 ...' at the start of a line (or of a list item) renders as a heading in some viewers."""
    for where, text in markdown_texts(script):
        for line in text.splitlines():
            assert not re.match(r"^\s*(?:[-*+]\s+|\d+\.\s+)?#+\d", line), f"{where}: {line!r}"


def reading_order():
    """(notebook, cell index, text a reader reads) across the notebooks: markdown, code and the code's output
    (the first cell's output, the machine banner, left out: it names the GPU's SM before any text does)."""
    for script in LESSON:
        nb = executed(script)
        first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
        for i, cell in enumerate(jupytext.read(script).cells):
            outputs = [] if i == first_code or i >= len(nb.cells) or nb.cells[i].source != cell.source else [
                o.get("text", "") + "".join(str(v) for k, v in o.get("data", {}).items() if k.startswith("text/"))
                for o in nb.cells[i].get("outputs", [])]
            yield script.stem, i, "\n".join([cell.source, *outputs])


def test_every_glossary_word_is_used_only_after_the_glossary():
    from dflash_fi.lab.glossary import glossary

    order = list(reading_order())
    at = next(k for k, (name, _, text) in enumerate(order) if name.startswith("00") and "glossary_table(" in text)
    for term in glossary():
        first = next((k for k, (_, _, text) in enumerate(order) if any(re.search(p, text) for p in term.patterns)),
                     None)
        assert first is None or first >= at, (
            f"{term.term!r} is used in {order[first][0]} cell {order[first][1]}, before notebook 00's glossary "
            f"(cell {order[at][1]})")


def test_flashinfer_kernels_and_vllm_flashattention_are_named_apart():
    """'FA2' is FlashInfer's fa2 kernel in one place and vLLM's FlashAttention 2 in another: prose says which."""
    for script in LESSON:
        for i, cell in enumerate(jupytext.read(script).cells):
            if cell.cell_type == "markdown":
                assert not re.search(r"\bFA[23]\b", cell.source), f"{script.name} cell {i}: a bare FA2/FA3"


def test_each_step_is_shown_hunk_by_hunk():
    """The notebook of step N (the first about it) shows every hunk of step N with show_hunks, and says why after each
    call."""
    from dflash_fi.notebook import NOTEBOOK_OF_STEP, STEPS_OF_NOTEBOOK
    from dflash_fi.lab.hunks import step_hunks

    for script in LESSON:
        cells = jupytext.read(script).cells
        for step in (s for s in STEPS_OF_NOTEBOOK[script.stem] if s > 0 and NOTEBOOK_OF_STEP[s] == script.stem):
            shown = set()
            for i, cell in enumerate(cells):
                for call in re.finditer(rf"show_hunks\({step}(?:, only=\[([\d, ]+)\])?", cell.source):
                    shown |= {int(n) for n in call.group(1).split(",")} if call.group(1) else {
                        h["number"] for h in step_hunks(step)}
                    assert i + 1 < len(cells) and cells[i + 1].cell_type == "markdown", \
                        f"{script.name} cell {i}: a hunk with no explanation after it"
            assert shown == {h["number"] for h in step_hunks(step)}, f"{script.name}: step {step} shows hunks {shown}"
            assert f"show_step_diff({step})" in "".join(c.source for c in cells), f"{script.name}: no appendix diff"


@pytest.mark.parametrize("script", LESSON, ids=lambda p: p.stem)
def test_no_wall_of_output_and_no_long_table_outside_the_appendix(script):
    for i, cell in enumerate(executed(script).cells):
        if cell.cell_type != "code" or "appendix" in cell.metadata.get("tags", []):
            continue
        lines = sum(len(o.get("text", "").splitlines()) for o in cell.get("outputs", []))
        lines += sum(len(md.splitlines()) for md in markdown_outputs(cell))
        assert lines <= MAX_OUTPUT_LINES, f"{script.name} cell {i}: {lines} lines of output"
        if "glossary_table(" in cell.source:  # the glossary stays one table: a reader looks words up in one place
            continue
        for table in (t for md in markdown_outputs(cell) for t in tables(md)):
            assert len(table) - 2 <= MAX_TABLE_ROWS, f"{script.name} cell {i}: a table of {len(table) - 2} rows"


def test_the_path_picture_places_every_hunk_of_every_step():
    from dflash_fi.figures.path import LANDS, STAGES
    from dflash_fi.lab.hunks import step_hunks
    from dflash_fi.steps import STEPS

    assert sorted(LANDS) == [s for s in STEPS if s > 0]
    for step, stages in LANDS.items():
        assert len(stages) == len(step_hunks(step)), f"step {step}"
        assert set(stages) <= {key for key, *_ in STAGES}


def test_a_hunk_renders_as_coloured_monospace_html_with_a_text_fallback():
    from dflash_fi.figures.listings import diff_block
    from dflash_fi.lab.hunks import step_hunks

    (hunk,) = step_hunks(1)
    assert "FlashInferBackend.supports_non_causal" in hunk["diff"]
    bundle = diff_block(hunk["diff"], hunk["why"])._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"}
    assert "<pre" in bundle["text/html"] and "monospace" in bundle["text/html"] and "<style" not in bundle["text/html"]
    assert "background: #dafbe1" in bundle["text/html"]  # added lines green
    assert bundle["text/plain"].splitlines()[0] == hunk["why"]
    long = diff_block("\n".join(f"+line {i}" for i in range(40)), "long", max_lines=30, more="see below")
    assert long.text.splitlines()[-1] == "... 10 more lines: see below" and len(long.text.splitlines()) == 32


def test_engine_calls_are_one_call_and_what_differs():
    from dflash_fi.figures.engine_calls import common_call

    spec = {"method": "dflash", "model": "drafter", "attention_backend": "FLASHINFER"}
    base, differences = common_call({
        "no speculation": {"model": "target", "enforce_eager": True},
        "FLASH_ATTN": {"model": "target", "enforce_eager": True, "speculative_config": {**spec, "attention_backend":
                                                                                          "FLASH_ATTN"}},
        "step 3": {"model": "target", "enforce_eager": True, "speculative_config": spec},
        "step 4": {"model": "target", "enforce_eager": True, "speculative_config": spec},
    })
    assert base == {"model": "target", "enforce_eager": True, "speculative_config": spec}
    shown = {engine: [str(d) for d in found] for engine, found in differences.items()}
    assert shown == {"no speculation": ["no speculative_config"],
                     "FLASH_ATTN": ["speculative_config['attention_backend']='FLASH_ATTN'"], "step 3": [], "step 4": []}
    assert differences["no speculation"][0].absent and differences["FLASH_ATTN"][0].path == ("speculative_config",
                                                                                         "attention_backend")


def test_an_excerpt_keeps_the_signature_and_the_blocks_asked_for():
    from dflash_fi.figures.listings import excerpt

    source = "@classmethod\ndef f(x):\n    a = 1\n    b = 2\n    c = 3\n    return a\n"
    text, marked = excerpt(source, [(r"b = ", r"c = ")])
    assert text.splitlines() == ["def f(x):", "    ...", "    b = 2", "    c = 3", "    ..."] and marked == [3]
    assert excerpt(source, [(r"b = ", r"c = ")], mark=(r"c = ",))[1] == [4]


def test_a_file_excerpt_starts_where_asked_and_highlights_its_language(tmp_path):
    from dflash_fi.figures.listings import file_excerpt

    header = tmp_path / "site-packages" / "lib" / "scheduler.cuh"
    header.parent.mkdir(parents=True)
    header.write_text("// other\ninline auto f(int a) {\n  int b = a;\n  int c = b;\n  return c;\n}\n")
    listing = file_excerpt(header, r"inline auto f", [(r"int c = ", r"int c = ")], language="cpp")
    assert listing.text.splitlines() == ["lib/scheduler.cuh", "inline auto f(int a) {", "  ...", "  int c = b;", "  ..."]
    assert "<pre" in listing.html and "background-color: #ffffcc" in listing.html  # the block's first line marked


def test_hunks_joined_in_one_box_say_where_each_lands_on_its_heading_line():
    from dflash_fi.figures.listings import hunk_blocks
    from dflash_fi.lab.hunks import step_hunks

    hunks = step_hunks(7, context=0)
    assert all(line[:1] in "+-@" for h in hunks for line in h["diff"].splitlines()[2:])  # no unchanged lines
    listing = hunk_blocks(7, hunks, only=[1, 6], max_lines={6: 1}, joined=True)
    lines = listing.text.splitlines()
    assert lines[0] == "step 7, hunk 1 of 11: the names the builder needs to look at its layers (line 27, in module level)"
    assert lines[1] == "+    get_layers_from_vllm_config," and lines[2].startswith("step 7, hunk 6 of 11: ")
    assert lines[3].startswith("+    def _compute_flashinfer_kv_metadata_from_bounds(")
    assert lines[4].startswith("... ") and lines[4].endswith("the whole diff is in this notebook's appendix")
    assert listing.html.count("<pre") == 1 and "font-size: 11px" in listing.html


def test_a_long_table_folds_into_html_and_keeps_its_markdown_as_text():
    from dflash_fi.figures.listings import folded_markdown

    listing = folded_markdown("every kernel", "| a | b |\n|---|---|\n| 1 | 2 |")
    assert listing.html.startswith("<details>") and "<td>2</td>" in listing.html and "every kernel" in listing.html
    assert listing.text.splitlines() == ["every kernel", "| a | b |", "|---|---|", "| 1 | 2 |"]
