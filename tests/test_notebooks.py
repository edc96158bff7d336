"""The notebooks: paired with their .py, one per part of the story, each ending with a check and a summary,
committed executed on a GPU by the evidence pass, from the very code here (its summary records what each ran)."""

from pathlib import Path

import jupytext
import nbformat
import pytest

import dflash_fi.records.summary as S
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
def test_committed_notebook_holds_its_outputs_and_no_log_lines(script):
    nb = nbformat.read(script.with_suffix(".ipynb"), as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", "every notebook names its kernel"
    code = code_cells(nb)
    assert all(c.execution_count is not None for c in code), "committed without outputs: run `dflash-fi notebooks`"
    first = "".join(o.get("text", "") for o in code[0].outputs)
    assert "GPU" in first and "evidence:" in first, \
        "the first output names the GPU (or its absence) and the evidence pass it reads"
    assert not any(o.get("output_type") == "error" for c in code for o in c.outputs)
    vllm_lines = [line for c in code for o in c.outputs for line in o.get("text", "").splitlines()
                  if line.startswith(("INFO ", "WARNING ", "(EngineCore"))]
    assert vllm_lines == [], "vLLM's log lines belong in the log file, not in cell outputs"


@pytest.mark.skipif(not list(S.EVIDENCE_DIR.glob("*.json")), reason="no GPU evidence pass committed yet")
@pytest.mark.parametrize("script", PAIRS, ids=lambda p: p.stem)
def test_each_notebook_ran_to_the_end_on_a_gpu_in_the_evidence_pass_from_the_code_here(script):
    """The summary's record of the notebook's run (the one record: not the .ipynb's metadata) ran on a GPU, to the
    end, and what it ran (its source, its steps as built, the plugin, the loader, the versions) is the code here."""
    from dflash_fi.freshness import stale_notebook

    summary = S.read()
    again = f"run `dflash-fi notebooks --only {script.stem[:2]}` on a GPU, in the evidence pass"
    run = summary.notebooks().get(script.stem) if S.Section.NOTEBOOKS in summary.entries else None
    assert run is not None, f"the evidence pass did not run {script.stem}: {again}"
    assert run.status is S.NotebookStatus.RAN and run.executed_on != "CPU", f"{script.stem}: {run}"
    stale = stale_notebook(summary, script.stem, STEPS_OF_NOTEBOOK[script.stem])
    assert stale is None, (f"{script.stem}'s committed outputs ran other code ("
                           f"{', '.join(stale.changed) if stale.recorded else 'not recorded'}): {again}")


def test_every_figure_and_table_is_followed_by_a_verdict():
    """A cell that draws a picture or shows a table calls `verdict()` ("What to see: ...") there or in the cell
    right after it (an appendix's tables are for looking things up)."""
    for script in PAIRS:
        cells = [c for c in jupytext.read(script).cells]
        for i, cell in enumerate(cells):
            draws = cell.cell_type == "code" and "appendix" not in cell.metadata.get("tags", []) and any(
                name in cell.source for name in (
                    "block_masks(", "selector_grid(", "acceptance_by_position(", "tau_by_step(", "kernel_times(",
                    "e2e_pairs(", "draft_step_time(", "routing_table(", "routing_rows(", "turns_table(", "kernel_pivot_table(",
                    "draft_layer_path(", "priority_table(", "glossary_table(", "format_claims(",
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
    from dflash_fi import notebook
    from dflash_fi.notebook import runs as P
    from dflash_fi.records.engine import EngineRecord, Failure, Phase
    from dflash_fi.records.runs import label

    started = []

    def engines_double(specs, slots, command, **kwargs):
        started.append([spec.run for spec in specs])
        return [EngineRecord(spec, spec.run != P.step_run(0), None if spec.run != P.step_run(0) else
                             Failure("ValueError", "refused", Phase.SELECTION)) for spec in specs]

    monkeypatch.setattr("dflash_fi.proof.engine.pool.run_engines", engines_double)
    monkeypatch.setattr("dflash_fi.proof.engine.pool.share_gpus", lambda specs: (specs, ["0"]))
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


def test_the_evidence_line_of_a_gpu_run_judges_what_it_reads_and_not_its_own_last_run(monkeypatch):
    """On a GPU the execution is the notebook's run (the evidence pass records it when it ends), so its own last record
    is not judged; the sections it reads are. Without a GPU the line judges both."""
    import dflash_fi.records.summary as S
    from dflash_fi.freshness import inputs
    from dflash_fi.notebook import evidence_line
    from dflash_fi.records.provenance import Provenance

    def made(section, ran):
        return S.Entry(section, Provenance("NVIDIA H200", "9.0", {}, "0" * 40, section.command,
                                           "2026-12-05T01:00:00Z", inputs=ran), {})
    old_run = S.NotebookRun(S.NotebookStatus.RAN, "NVIDIA H200", 40.0, {"source": "an older one"})
    notebooks = made(S.Section.NOTEBOOKS, inputs(S.Section.NOTEBOOKS))
    for walkthrough_ran, verdict in ((inputs(S.Section.WALKTHROUGH), "current"), ({"steps": "old"}, "older code")):
        summary = S.Summary(S.EVIDENCE_DIR / "nvidia-h200.json",
                            {S.Section.WALKTHROUGH: made(S.Section.WALKTHROUGH, walkthrough_ran),
                             S.Section.NOTEBOOKS: notebooks})
        monkeypatch.setattr(S, "read", lambda *a, _s=summary: _s)
        monkeypatch.setattr(S.Summary, "notebooks", lambda self: {"04_trtllm_gating": old_run})
        here = evidence_line("04_trtllm_gating", (S.Section.WALKTHROUGH,), running_on="NVIDIA H200")
        assert here.startswith("evidence: this run, on the NVIDIA H200; walkthrough of the GPU pass of 2026-12-05, ")
        assert verdict in here
        assert "older code" in evidence_line("04_trtllm_gating", (S.Section.WALKTHROUGH,))  # its last run: older
