"""Freshness from what ran: a section is stale exactly when something it ran changed, not when a file near it did.

Each case edits a copy of the package and compares what every section (and every notebook) would record now.
"""

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dflash_fi.records.summary as S
from dflash_fi import freshness
from dflash_fi.notebook import STEPS_OF_NOTEBOOK

REPO = Path(__file__).resolve().parents[2]
ALL = tuple(S.Section)


@pytest.fixture
def copy(tmp_path):
    """The package, its GPU tests and notebook sources, copied (no model weights, no caches)."""
    shutil.copytree(REPO / "dflash_fi", tmp_path / "dflash_fi",
                    ignore=shutil.ignore_patterns("__pycache__", "target", "drafter", "*.safetensors"))
    shutil.copytree(REPO / "tests" / "gpu", tmp_path / "tests" / "gpu", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "notebooks").mkdir()
    for path in (REPO / "notebooks").glob("*.py"):
        shutil.copy(path, tmp_path / "notebooks")
    return tmp_path


def edit(path: Path, old: str, new: str) -> None:
    """The first `old` in `path` becomes `new`."""
    text = path.read_text()
    assert old in text, f"{path.name}: no {old!r}"
    path.write_text(text.replace(old, new, 1))


def ran(root: Path) -> dict:
    """What each section and notebook would record, computed from the file tree at `root` (files only)."""
    return {**{s.key: freshness.inputs(s, root) for s in ALL},
            **{nb: freshness.notebook_inputs(nb, steps, root) for nb, steps in STEPS_OF_NOTEBOOK.items()}}


def changed(before: dict, after: dict) -> dict:
    return {k: sorted(n for n in before[k] if before[k][n] != after[k][n]) for k in before
            if before[k] != after[k]}


def test_a_docstring_or_comment_edit_stales_nothing(copy):
    before = ran(copy)
    edit(copy / "dflash_fi/proof/evidence/checks.py", '"""', '"""Reworded: the same checks.\n\n')
    edit(copy / "dflash_fi/patched/__init__.py", "from __future__ import annotations\n",
         "from __future__ import annotations  # a comment\n")
    edit(copy / "dflash_fi/plugin.py", '"""', '"""A docstring edit. ')
    assert changed(before, ran(copy)) == {}


def test_a_tolerance_stales_the_walkthrough_only(copy):
    before = ran(copy)
    checks = copy / "dflash_fi/proof/evidence/checks.py"
    old = re.search(r"^REFERENCE_TOLERANCE, KERNEL_TOLERANCE = .*$", checks.read_text(), re.M).group(0)
    edit(checks, old, "REFERENCE_TOLERANCE, KERNEL_TOLERANCE = 0.5, 0.5")
    assert changed(before, ran(copy)) == {"walkthrough": ["checks"]}


def test_a_loader_change_stales_every_section_and_notebook_and_says_which_input(copy):
    before = ran(copy)
    edit(copy / "dflash_fi/patched/__init__.py", "from __future__ import annotations\n",
         "from __future__ import annotations\n\nLOADED = True\n")
    assert changed(before, ran(copy)) == {k: ["loader"] for k in before}


def test_a_benchmark_change_stales_the_benchmarks_only(copy):
    before = ran(copy)
    stats = copy / "dflash_fi/proof/bench/stats.py"
    stats.write_text(stats.read_text() + "\nEXTRA = 1\n")
    assert changed(before, ran(copy)) == {s.key: ["bench"] for s in (S.Section.BENCH_E2E, S.Section.BENCH_KERNELS,
                                                                      S.Section.PROFILE)}


def test_a_notebook_edit_stales_that_notebook_only(copy):
    before = ran(copy)
    name = next(iter(STEPS_OF_NOTEBOOK))
    if not (copy / "notebooks" / f"{name}.py").is_file():
        pytest.skip(f"notebooks/{name}.py is not there")
    (copy / "notebooks" / f"{name}.py").write_text((copy / "notebooks" / f"{name}.py").read_text() + "\n# more\n")
    assert changed(before, ran(copy)) == {name: ["notebook"]}


FIRST_LINE = "# SPDX-License-Identifier: Apache-2.0\n"
STEP_HASHES = "import json; from dflash_fi.freshness import step_hashes; print(json.dumps(step_hashes()))"


def step_hashes(root: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", STEP_HASHES], cwd=root, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout)


def test_steps_are_hashed_as_built_a_helper_docstring_stales_none_a_hunk_stales_its_step_and_later(copy):
    before = step_hashes(copy)
    edit(copy / "dflash_fi/steps/diffs.py", '"""', '"""Reworded. ')
    step7 = copy / "dflash_fi/steps/step7_host_overhead.py"
    edit(step7, '"""', '"""Reworded. ')
    assert step_hashes(copy) == before
    why = re.search(r'why="([^"]+)"', step7.read_text()).group(0)  # a hunk's reason is shown, never built
    edit(step7, why, 'why="another reason"')
    assert step_hashes(copy) == before
    # a hunk that changes step 7's text (at the file's first line, which no later step touches)
    step7.write_text(step7.read_text() + 'HUNKS = HUNKS + (Hunk(why="t", old=FIRST, new=FIRST + "# changed\\n"),)\n'
                     .replace("FIRST", repr(FIRST_LINE)))
    after = step_hashes(copy)
    assert sorted(k for k in before if before[k] != after[k]) == [f"step{s}" for s in range(7, len(before))]


def test_code_hash_is_one_on_every_python_fields_a_newer_ast_adds_empty_change_nothing():
    # The GPU machine's Python (3.12) gives every def `type_params=[]`, which this one's (3.11) has not: same hash.
    source = "def f(x):\n    '''doc'''\n    return x + 1  # why\n"
    tree = ast.parse(source)
    newer = ast.parse(source)
    newer.body[0]._fields = (*newer.body[0]._fields, "type_params")
    newer.body[0].type_params = []
    assert freshness._canonical(newer) == freshness._canonical(tree)
    assert freshness.code_hash(source) != freshness.code_hash(source.replace("x + 1", "x + 2"))
    assert freshness.code_hash(source) == "f1be77de3dff2665f3c43262031a3d6aa1e8299d6fcd4deaa98844e32b233608"  # pinned: a change of form shows here
