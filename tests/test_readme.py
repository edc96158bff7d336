"""README.md's generated blocks and docs/RESULTS.md hold exactly what the step modules and committed results render to."""

import re

import pytest

from dflash_fi.errors import BadInput
from dflash_fi.readme import README, RESULTS, blocks, pattern, results_page, update_readme


@pytest.mark.parametrize("name", ["step-table", "results-verdict", "notebook-list"])
def test_readme_block_is_generated_not_typed(name):
    block = pattern(name).search(README.read_text())
    assert block, f"README.md lost its <!-- {name} --> block"
    assert block.group(2) == blocks()[name], "stale: run `dflash-fi report --update-readme`"


def test_the_notebook_list_names_a_notebook_changed_after_its_execution(tmp_path, monkeypatch):
    import shutil

    import nbformat

    from dflash_fi.evidence import notebooks
    from dflash_fi.readme import notebook_list
    from dflash_fi.summary import step_hash

    for stem in ("00_dflash_and_the_problem", "01_choosing_a_backend"):
        for suffix in (".py", ".ipynb"):
            shutil.copy(notebooks.NOTEBOOKS_DIR / f"{stem}{suffix}", tmp_path)
    for path in tmp_path.glob("*.ipynb"):  # both as if executed at the step modules here
        nb = nbformat.read(path, as_version=4)
        nb.metadata["dflash_fi"] = {**nb.metadata.get("dflash_fi", {}), "source_sha256": notebooks.source_sha256(nb),
                                    "step_hash": step_hash(), "executed_on": "NVIDIA H200", "commit": "abc1234"}
        nbformat.write(nb, path)
    changed = tmp_path / "01_choosing_a_backend.ipynb"
    nb = nbformat.read(changed, as_version=4)
    nb.cells[-1].source += "\nOne more sentence."
    nbformat.write(nb, changed)
    monkeypatch.setattr(notebooks, "NOTEBOOKS_DIR", tmp_path)
    first, second = notebook_list().splitlines()
    assert "not re-executed" not in first
    assert "**not re-executed**: its outputs come from the run on the NVIDIA H200 at abc1234" in second
    assert "`dflash-fi notebooks --only 01` on a GPU" in second
    changed.unlink()
    with pytest.raises(BadInput, match="01_choosing_a_backend.ipynb is missing .*jupytext --sync"):
        notebook_list()


def test_the_results_page_is_generated_not_typed():
    assert RESULTS.read_text() == results_page(), "stale: run `dflash-fi report --update-readme`"


def test_updating_rewrites_only_the_blocks_and_refuses_a_readme_without_one(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- step-table -->\nold\n<!-- /step-table -->\nmiddle\n"
                      "<!-- results-verdict -->\nold\n<!-- /results-verdict -->\n"
                      "<!-- notebook-list -->\nold\n<!-- /notebook-list -->\nend\n")
    assert update_readme(readme) == ["step-table", "results-verdict", "notebook-list"]
    text = readme.read_text()
    assert text.startswith("intro\n<!-- step-table -->\n| step |") and "\nmiddle\n" in text and text.endswith("end\n")
    assert "old" not in text
    broken = tmp_path / "BROKEN.md"
    broken.write_text("intro\n<!-- step-table -->\nold\n<!-- /step-table -->\n")
    with pytest.raises(BadInput, match="no <!-- results-verdict -->"):
        update_readme(broken)
    assert broken.read_text().endswith("old\n<!-- /step-table -->\n")  # refused before anything was written


def test_the_readme_is_a_front_door():
    """At most 200 lines, the mechanism in the first 100 (with the LLM(...) call), and no measured number typed in:
    every number of a measurement is in a generated block."""
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 200
    assert "LLM(" in "\n".join(lines[:100]) and "## How a step is built and selected" in "\n".join(lines[:100])
    typed = re.sub(r"<!-- ([\w-]+) -->.*?<!-- /\1 -->", "", text, flags=re.S)
    assert not re.findall(r"\b\d+\.\d+ ?(?:ms|x|%|tokens/s)\b", typed), "a measured number typed by hand"


def test_readme_links_what_exists():
    text = README.read_text() + RESULTS.read_text()
    paths = set(re.findall(r"\b((?:evidence|docs|notebooks|dflash_fi|tests)/[\w./-]+\.(?:txt|json|svg|py|md|ipynb|diff))",
                           text))
    assert len(paths) >= 8
    missing = [p for p in sorted(paths) if "*" not in p and not (README.parent / p).is_file()]
    assert missing == []
