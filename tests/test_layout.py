"""The package's layout is its architecture: each part imports only what its folder says it may."""

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "dflash_fi"
SUBPACKAGES = ("steps", "patched", "reference", "models", "lab", "engine", "evidence", "bench", "figures",
               "exercises")
TOP_LEVEL = {  # top-level modules: what each may import from dflash_fi
    "vocabulary": (), "errors": (), "logs": (), "stack": ("dflash_fi.errors", "dflash_fi.vocabulary"),
    # the evidence summary's one reader (and writer): its typed views are the engine's records and the checks
    "summary": ("dflash_fi.errors", "dflash_fi.stack", "dflash_fi.engine", "dflash_fi.evidence"),
    "upstream": ("dflash_fi.errors", "dflash_fi.stack"),
    "plugin": ("dflash_fi.steps", "dflash_fi.stack", "dflash_fi.errors"),
}
MAX_LINES = 260
# A step module holds its hunks and nothing else: as long as the change it is.
MAX_STEP_LINES = 400


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dflash_fi"):
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("dflash_fi"))
    return names


def part(module: str) -> str:
    return ".".join(module.split(".")[:2])


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_each_part_imports_only_what_its_folder_allows(name):
    package = importlib.import_module(f"dflash_fi.{name}")
    assert package.__doc__ and "May import:" in package.__doc__
    allowed = set(package.MAY_IMPORT)
    for path in (PACKAGE / name).glob("*.py"):
        outside = {part(m) for m in imports_of(path)} - {f"dflash_fi.{name}"}
        assert outside <= allowed, f"{path.name} imports {sorted(outside - allowed)}"


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_the_shared_modules_sit_at_the_bottom(name):
    assert {part(m) for m in imports_of(PACKAGE / f"{name}.py")} <= set(TOP_LEVEL[name])


def test_no_module_is_too_long_and_none_lives_outside_the_parts():
    for path in PACKAGE.rglob("*.py"):
        limit = MAX_STEP_LINES if path.parent.name == "steps" and path.name.startswith("step") else MAX_LINES
        assert len(path.read_text().splitlines()) <= limit, f"{path} is over {limit} lines"
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top == {"__init__", *TOP_LEVEL, "cli", "commands", "notebook", "readme"}


# The lesson, apart from the machinery that proves it: it reads evidence only through the summary's reader.
LESSON = ("steps", "patched", "plugin", "reference", "models", "lab", "exercises", "notebook")
MACHINERY = {"dflash_fi.engine", "dflash_fi.bench", "dflash_fi.evidence"}


@pytest.mark.parametrize("name", LESSON)
def test_the_lesson_imports_no_machinery_but_the_summary_reader(name):
    paths = list((PACKAGE / name).glob("*.py")) if (PACKAGE / name).is_dir() else [PACKAGE / f"{name}.py"]
    for path in paths:
        assert not {part(m) for m in imports_of(path)} & MACHINERY, f"{path.name} imports the evidence machinery"


def test_no_docstring_cites_a_file_of_the_committed_evidence():
    cited = [(path.name, getattr(node, "lineno", 1)) for path in PACKAGE.rglob("*.py") for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and (ast.get_docstring(node) or "")
             and ("evidence/nvidia" in ast.get_docstring(node) or "runs/nvidia" in ast.get_docstring(node))]
    assert not cited, f"docstrings that cite an evidence file: {cited}"


def test_test_files_have_unique_module_names():
    # pytest imports a test file outside a package by its basename: a second test_x.py there stops collection
    loose = [p.name for p in (PACKAGE.parent / "tests").rglob("test_*.py") if not (p.parent / "__init__.py").exists()]
    assert len(loose) == len(set(loose)), sorted({n for n in loose if loose.count(n) > 1})
