"""The notebook pairs are in sync, and every section ends with a check cell."""

from pathlib import Path

import jupytext
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PAIRS = sorted(NOTEBOOKS.glob("*.py"))


def test_every_step_has_a_notebook():
    assert [p.stem for p in PAIRS] == ["00_setup", "01_capability_flag", "02_causal_metadata",
                                       "03_noncausal_wrapper", "04_trtllm_gating"]


@pytest.mark.parametrize("script", PAIRS, ids=lambda p: p.stem)
def test_pair_in_sync_and_ends_with_a_check(script):
    text = jupytext.read(script)
    ipynb = script.with_suffix(".ipynb")
    assert ipynb.exists(), f"{ipynb.name} missing: run `jupytext --sync {script}`"
    notebook = jupytext.read(ipynb)
    assert [c.source for c in text.cells] == [c.source for c in notebook.cells], \
        f"{script.name} and {ipynb.name} differ: run `jupytext --sync {script}`"
    assert [c.metadata.get("tags", []) for c in text.cells] == [c.metadata.get("tags", []) for c in notebook.cells]
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert "assert " in code[-1].source, "a notebook ends with its check cell"
    assert any("gpu" in c.metadata.get("tags", []) for c in code), "each notebook has its GPU cell"
