"""The notebooks: paired with their .py, one per step, each ending with a check, committed executed on a GPU."""

from pathlib import Path

import jupytext
import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PAIRS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_one_notebook_per_part_of_the_story():
    assert [p.stem for p in PAIRS] == ["00_dflash_and_the_problem", "01_choosing_a_backend", "02_causal_metadata",
                                       "03_noncausal_wrapper", "04_trtllm_gating", "05_beyond_the_pr"]


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
    assert "assert " in code[-1].source, "a notebook ends with its check cell"
    assert any("gpu" in c.metadata.get("tags", []) for c in code), "each notebook has its GPU cell"


@pytest.mark.parametrize("script", PAIRS, ids=lambda p: p.stem)
def test_committed_notebook_is_executed_on_a_gpu(script):
    nb = nbformat.read(script.with_suffix(".ipynb"), as_version=4)
    code = code_cells(nb)
    assert all(c.execution_count is not None for c in code), "committed without outputs: run `dflash-fi notebooks`"
    first = "".join(o.get("text", "") for o in code[0].outputs)
    assert "GPU " in first and "commit " in first, "the first output names the GPU, versions and commit"
    assert not any(o.get("output_type") == "error" for c in code for o in c.outputs)
    vllm_lines = [line for c in code for o in c.outputs for line in o.get("text", "").splitlines()
                  if line.startswith(("INFO ", "WARNING ", "(EngineCore"))]
    assert vllm_lines == [], "vLLM's log lines belong in the log file, not in cell outputs"


def test_pictures_in_at_least_four_notebooks():
    with_pictures = [p.stem for p in PAIRS if any("image/png" in o.get("data", {})
                                                  for c in code_cells(nbformat.read(p.with_suffix(".ipynb"), 4))
                                                  for o in c.outputs)]
    assert len(with_pictures) >= 4, with_pictures
