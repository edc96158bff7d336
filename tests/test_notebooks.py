"""The notebooks: paired with their .py, one per part of the story, each ending with a check and a summary,
committed executed on a GPU from the very sources they hold now."""

import json
from pathlib import Path

import jupytext
import nbformat
import pytest

import dflash_fi.summary as S
from dflash_fi.evidence.notebooks import METADATA_KEY, source_sha256
from dflash_fi.summary import step_hash
from dflash_fi.notebook import STEPS_OF_NOTEBOOK

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PAIRS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_one_notebook_per_part_of_the_story():
    assert [p.stem for p in PAIRS] == list(STEPS_OF_NOTEBOOK)
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == list(STEPS_OF_NOTEBOOK)


@pytest.mark.parametrize("script", PAIRS, ids=lambda p: p.stem)
def test_pair_in_sync_and_shaped_like_a_lesson(script):
    text = jupytext.read(script)
    ipynb = script.with_suffix(".ipynb")
    assert ipynb.exists(), f"{ipynb.name} missing: run `jupytext --sync {script}`"
    notebook = jupytext.read(ipynb)
    assert [c.source for c in text.cells] == [c.source for c in notebook.cells], \
        f"{script.name} and {ipynb.name} differ: run `jupytext --sync {script}`"
    assert [c.metadata.get("tags", []) for c in text.cells] == [c.metadata.get("tags", []) for c in notebook.cells]
    code = code_cells(notebook)
    assert "setup(" in code[0].source and "nbval-ignore-output" in code[0].metadata.get("tags", [])
    checks = [i for i, c in enumerate(notebook.cells) if c.cell_type == "markdown" and c.source.strip() == "### Check"]
    assert len(checks) == 1 and "check(" in notebook.cells[checks[0] + 1].source, "a check cell after '### Check'"
    assert "## What you saw, and what's next" in "".join(c.source for c in notebook.cells[checks[0]:]), \
        "the notebook ends with what the reader saw and what comes next"
    assert any("gpu" in c.metadata.get("tags", []) for c in code), "each notebook has its GPU cell"
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            assert not any(line.startswith("#") and line.lstrip("#")[:1].isdigit() for line in cell.source.splitlines()), \
                "a markdown line starting '#<digit>' renders as a heading"


@pytest.mark.parametrize("script", PAIRS, ids=lambda p: p.stem)
def test_committed_notebook_is_executed_on_a_gpu_from_its_own_sources(script):
    nb = nbformat.read(script.with_suffix(".ipynb"), as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", "every notebook names its kernel"
    executed = nb.metadata.get(METADATA_KEY) or {}
    again = f"run `dflash-fi notebooks --only {script.stem[:2]}` on a GPU, in the evidence pass"
    assert executed.get("source_sha256") == source_sha256(nb), (
        f"the committed outputs were produced from other cells (stale): {again}")
    assert executed.get("step_hash") == step_hash(), f"the committed outputs ran other step modules (stale): {again}"
    assert executed.get("executed_on", "CPU") != "CPU" and executed.get("status") == "ok", executed
    code = code_cells(nb)
    assert all(c.execution_count is not None for c in code), "committed without outputs: run `dflash-fi notebooks`"
    first = "".join(o.get("text", "") for o in code[0].outputs)
    assert "GPU " in first and "commit " in first, \
        "the first output names the GPU (or its absence), versions and commit"
    assert not any(o.get("output_type") == "error" for c in code for o in c.outputs)
    vllm_lines = [line for c in code for o in c.outputs for line in o.get("text", "").splitlines()
                  if line.startswith(("INFO ", "WARNING ", "(EngineCore"))]
    assert vllm_lines == [], "vLLM's log lines belong in the log file, not in cell outputs"


@pytest.mark.skipif(not list(S.EVIDENCE_DIR.glob("*.json")), reason="no GPU evidence pass committed yet")
def test_every_notebook_comes_from_the_evidence_pass_of_the_summary():
    summary = S.read()
    steps = summary.entry(S.Section.WALKTHROUGH).provenance.step_hash
    recorded = summary.entry(S.Section.NOTEBOOKS).data["notebooks"]
    for script in PAIRS:
        executed = nbformat.read(script.with_suffix(".ipynb"), as_version=4).metadata.get(METADATA_KEY) or {}
        assert executed.get("step_hash") == steps, (
            f"{script.stem} ran other step modules than the evidence pass: run the notebooks in the evidence pass")
        assert recorded.get(script.stem, {}).get("source_sha256") == executed.get("source_sha256"), (
            f"the summary's notebooks section does not record {script.stem}'s execution: run it in the evidence pass")


def test_a_changed_cell_makes_the_recorded_execution_stale():
    nb = json.loads(PAIRS[0].with_suffix(".ipynb").read_text())
    before = source_sha256(nb)
    nb["cells"][0]["source"] = "".join(nb["cells"][0]["source"]) + "\n"
    assert source_sha256(nb) != before


def test_every_figure_and_table_is_followed_by_a_verdict():
    """A cell that draws a picture or shows a table calls `verdict()` ("What to see: ...") there or in the cell
    right after it (an appendix's tables are for looking things up)."""
    for script in PAIRS:
        cells = [c for c in jupytext.read(script).cells]
        for i, cell in enumerate(cells):
            draws = cell.cell_type == "code" and "appendix" not in cell.metadata.get("tags", []) and any(
                name in cell.source for name in (
                    "block_masks(", "selector_grid(", "acceptance_by_position(", "tau_by_step(", "kernel_times(",
                    "e2e_pairs(", "draft_step_time(", "routing_table(", "turns_table(", "kernel_pivot_table(",
                    "draft_layer_path(", "priority_table(", "glossary_table(", "lesson_map(", "format_claims(",
                    "kernel_against_flash_attn(", "targets_table(", "build_table(", "anatomy(", "build_summary(",
                    "plans_table(", "bound_planning_table(", "plan_reuse_table("))
            if draws:
                window = "".join(c.source for c in cells[i:i + 2] if c.cell_type == "code")
                assert "verdict(" in window, f"{script.name}: cell {i} draws without a verdict"


def test_pictures_in_at_least_four_notebooks():
    with_pictures = [p.stem for p in PAIRS if any("image/png" in o.get("data", {})
                                                  for c in code_cells(nbformat.read(p.with_suffix(".ipynb"), 4))
                                                  for o in c.outputs)]
    assert len(with_pictures) >= 4, with_pictures


def test_live_engines_start_in_the_first_cell_and_are_collected_once(monkeypatch, capsys):
    """On a GPU, setup's `live` runs start the engines at once; the live cell collects that run instead of
    starting a second one. Engines and the GPU reference decoder are doubles here (both need a GPU); the same
    path runs for real whenever the notebooks are executed on the GPU machine."""
    from dflash_fi.engine.identity import label
    from dflash_fi.evidence import live as notebook
    from dflash_fi.engine.records import EngineRecord, Failure, Phase
    from dflash_fi.evidence import plan as P

    started = []

    def engines_double(specs, slots, command, **kwargs):
        started.append([spec.run for spec in specs])
        return [EngineRecord(spec, spec.run != P.step_run(0), None if spec.run != P.step_run(0) else
                             Failure("ValueError", "refused", Phase.SELECTION)) for spec in specs]

    monkeypatch.setattr("dflash_fi.engine.pool.run_engines", engines_double)
    monkeypatch.setattr("dflash_fi.engine.pool.share_gpus", lambda specs: (specs, ["0"]))
    monkeypatch.setattr("dflash_fi.reference.evaluate.evaluate_pair", lambda *args, **kwargs: {"tau_noncausal": 4.0})
    runs = [P.FLASH_ATTN, P.step_run(0)]
    session = notebook.Session(name="test", gpu=object())
    session.start_live(runs)
    records = session.run_live(runs)
    assert started == [runs] and list(records) == runs and session.live_reference == {"tau_noncausal": 4.0}
    assert capsys.readouterr().out.splitlines() == [f"{label(P.FLASH_ATTN)}: runs, as expected",
                                                    f"{label(P.step_run(0))}: fails: ValueError at selection, as expected"]
    without_gpu = notebook.Session(name="test")
    without_gpu.start_live(runs)
    assert without_gpu.run_live(runs) is None and started == [runs]
