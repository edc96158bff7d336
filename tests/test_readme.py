"""README.md's generated blocks and docs/RESULTS.md hold exactly what the step modules and committed results render to."""

import re

import pytest

from dflash_fi.errors import BadInput
from dflash_fi.proof.readme import README, RESULTS, blocks, pattern, results_page, update_readme


@pytest.mark.parametrize("name", ["step-table", "results-verdict", "notebook-list"])
def test_readme_block_is_generated_not_typed(name):
    block = pattern(name).search(README.read_text())
    assert block, f"README.md lost its <!-- {name} --> block"
    assert block.group(2) == blocks()[name], "stale: run `dflash-fi report --update-readme`"


def test_the_notebook_list_reads_the_summary_and_names_a_notebook_changed_after_its_run(tmp_path, monkeypatch):
    import dflash_fi.records.summary as S
    from dflash_fi import freshness
    from dflash_fi.notebook import STEPS_OF_NOTEBOOK
    from dflash_fi.proof import readme

    names = list(STEPS_OF_NOTEBOOK)[:3]
    (tmp_path / "notebooks").mkdir()
    for name in names:
        for suffix in (".py", ".ipynb"):
            (tmp_path / "notebooks" / f"{name}{suffix}").write_text(f"# # {name}\n" if suffix == ".py" else "{}")
    ran = {name: S.NotebookRun(S.NotebookStatus.RAN, "NVIDIA H200", 1.0,
                               freshness.notebook_inputs(name, STEPS_OF_NOTEBOOK[name], tmp_path)).to_json()
           for name in names[:2]}  # the pass ran two of the three, at the code here
    made = S.Provenance("NVIDIA H200", "9.0", {}, "abc1234", "dflash-fi notebooks", "2026-12-04T00:00:00Z")
    S.write(S.Section.NOTEBOOKS, {"notebooks": ran}, made, root=tmp_path / "evidence")
    changed = tmp_path / "notebooks" / f"{names[1]}.py"
    changed.write_text(changed.read_text() + "One more sentence.\n")
    monkeypatch.setattr(readme, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(readme, "_summary", lambda: S.read(tmp_path / "evidence"))
    first, second, third = readme.notebook_list().splitlines()
    assert first == f"- [`{names[0]}`](notebooks/{names[0]}.ipynb): {names[0]}"
    assert "**not re-executed**: the evidence pass last ran it on the NVIDIA H200, other code than this; changed " \
           "since: notebook;" in second and f"`dflash-fi notebooks --only {names[1][:2]}` on a GPU" in second
    assert "**not executed** by the evidence pass" in third
    (tmp_path / "notebooks" / f"{names[2]}.ipynb").unlink()
    with pytest.raises(BadInput, match=f"{names[2]}.ipynb is missing .*jupytext --sync"):
        readme.notebook_list()


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


def test_the_results_page_names_commands_as_typed_and_notebooks_by_their_names_now():
    """No machine path in a command; the step table sends each step to the notebook of the course map."""
    from dflash_fi.notebook.steps import NOTEBOOK_OF_STEP

    page = results_page()
    assert not re.search(r"`/\S+/dflash-fi ", page), "a command shows a machine's path"
    table = blocks()["step-table"]
    assert all(f"`notebooks/{NOTEBOOK_OF_STEP[step]}`" in line for step, line in enumerate(table.splitlines()[2:]))


def test_the_readme_and_the_results_page_carry_the_drafts_cost_once_recorded(tmp_path, monkeypatch):
    """An engine benchmark with the draft's cost: the README's verdict counts its recorded verdicts and the RTX 4090
    path's gains; docs/RESULTS.md gets its tables. One without it (an older pass's) has no such line."""
    import sys
    from pathlib import Path

    from dflash_fi.proof import readme

    sys.path.insert(0, str(Path(__file__).parent))
    from test_figures import draft_cost_data, fresh_summary

    data = {**draft_cost_data(), "targets": [], "warm_up_rounds": 1}
    data["rtx4090"][1]["final_gain"] = {"value": 1.9, "low": 1.8, "high": 2.0}
    monkeypatch.setattr(readme, "_summary", lambda: fresh_summary(tmp_path, data))
    line = next(x for x in readme.verdict().splitlines() if "draft's cost" in x)
    assert "at 6 shapes" in line and "at most the FLASH_ATTN draft's at 6 (0 missed, 0 unresolved)" in line
    assert "DFlash with the final draft at 1.90-2.20x no speculation's tokens/s" in line and "step-4 draft at 2.10x" in line
    assert "whole-engine targets" not in readme.verdict()  # none recorded: no line
    from dflash_fi.proof.bench.draft_cost import latest_draft_cost
    from dflash_fi.proof.bench.draft_report import results_section

    page = "\n".join(results_section(latest_draft_cost(fresh_summary(tmp_path, data))))  # results_page's part
    assert "## The draft's cost, inside the engine" in page and page.count("\n| embedded, ") == 6
    monkeypatch.setattr(readme, "_summary", lambda: fresh_summary(tmp_path, {"targets": [], "warm_up_rounds": 1}))
    assert "draft's cost" not in readme.verdict()
