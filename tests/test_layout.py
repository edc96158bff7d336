"""The package's layout is its architecture: each part imports only what its folder says it may; the records sit at
the bottom; the lesson and the notebooks load no proof, transitively; no folder's modules import in a circle."""

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "dflash_fi"
NOTEBOOKS = PACKAGE.parent / "notebooks"
SUBPACKAGES = ("records", "steps", "patched", "reference", "models", "lab", "notebook", "proof.engine",
               "proof.evidence", "proof.bench", "figures", "exercises")
TOP_LEVEL = {  # top-level modules: what each may import from dflash_fi
    "vocabulary": (), "errors": (), "logs": (), "stack": ("dflash_fi.errors", "dflash_fi.vocabulary"),
    # what a section ran: the steps as built, the rest read as files (never imported)
    "freshness": ("dflash_fi.records", "dflash_fi.steps", "dflash_fi.stack"),
    "upstream": ("dflash_fi.errors", "dflash_fi.stack"),
    "plugin": ("dflash_fi.steps", "dflash_fi.stack", "dflash_fi.errors"),
}
MAX_LINES = 260
# A step module holds its hunks and nothing else: as long as the change it is.
MAX_STEP_LINES = 400


def imports_of(path: Path, top_only: bool = False) -> set[str]:
    """The dflash_fi modules `path` imports (anywhere in it; `top_only`: at import time, module level)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_only else ast.walk(tree)
    names = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dflash_fi"):
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names
                         if (PACKAGE.parent / node.module.replace(".", "/") / f"{a.name}.py").is_file())
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("dflash_fi"))
    return names


def part(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:3] if parts[1:2] == ["proof"] and len(parts) > 2 else parts[:2])


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_each_part_imports_only_what_its_folder_allows(name):
    package = importlib.import_module(f"dflash_fi.{name}")
    assert package.__doc__ and "May import:" in package.__doc__
    allowed = set(package.MAY_IMPORT)
    for path in (PACKAGE / name.replace(".", "/")).glob("*.py"):
        outside = {part(m) for m in imports_of(path)} - {f"dflash_fi.{name}"}
        assert outside <= allowed, f"{path.name} imports {sorted(outside - allowed)}"


def test_the_records_sit_at_the_bottom():
    for path in (PACKAGE / "records").glob("*.py"):
        outside = {m for m in imports_of(path) if not m.startswith("dflash_fi.records")}
        assert outside <= {"dflash_fi.vocabulary", "dflash_fi.errors"}, f"records/{path.name} imports {sorted(outside)}"


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_the_shared_modules_sit_at_the_bottom(name):
    assert {part(m) for m in imports_of(PACKAGE / f"{name}.py")} <= set(TOP_LEVEL[name])


def test_no_module_is_too_long_and_none_lives_outside_the_parts():
    for path in PACKAGE.rglob("*.py"):
        limit = MAX_STEP_LINES if path.parent.name == "steps" and path.name.startswith("step") else MAX_LINES
        assert len(path.read_text().splitlines()) <= limit, f"{path} is over {limit} lines"
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top == {"__init__", *TOP_LEVEL, "cli", "commands"}


def folders() -> list[Path]:
    return sorted({p.parent for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts})


@pytest.mark.parametrize("folder", folders(), ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_import_cycle_inside_a_folder(folder):
    """Between a folder's modules (its __init__, the folder's face, aside), lazy imports included."""
    prefix = ".".join(folder.relative_to(PACKAGE.parent).parts)
    modules = {f"{prefix}.{p.stem}": p for p in folder.glob("*.py") if p.stem != "__init__"}
    edges = {m: {i for i in imports_of(p) if i in modules and i != m} for m, p in modules.items()}
    done, path = set(), []

    def visit(m):
        if m in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(m):] + [m]))
        if m not in done:
            path.append(m)
            for n in sorted(edges[m]):
                visit(n)
            path.pop()
            done.add(m)

    for m in sorted(modules):
        visit(m)


# The lesson, apart from the proof that checks it: it imports no proof (the notebook facade's GPU methods aside,
# which import the live engines and the kernel check when a notebook runs them on a GPU), and no import of it loads any, transitively.
LESSON = ("records", "steps", "patched", "plugin", "reference", "models", "lab", "exercises", "notebook", "figures",
          "freshness", "upstream", "vocabulary", "errors", "stack", "logs")
LAZY_PROOF = {"notebook/session.py": {"dflash_fi.proof.evidence", "dflash_fi.proof.bench"}}


@pytest.mark.parametrize("name", LESSON)
def test_the_lesson_imports_no_proof(name):
    paths = list((PACKAGE / name).glob("*.py")) if (PACKAGE / name).is_dir() else [PACKAGE / f"{name}.py"]
    for path in paths:
        proof = {part(m) for m in imports_of(path) if m.startswith("dflash_fi.proof")}
        proof -= LAZY_PROOF.get(str(path.relative_to(PACKAGE)), set()) if not imports_of(path, top_only=True) & proof \
            else set()
        assert not proof, f"{path.relative_to(PACKAGE)} imports the proof: {sorted(proof)}"


def lesson_modules() -> list[str]:
    found = []
    for name in LESSON:
        if (PACKAGE / name).is_dir():
            found += [f"dflash_fi.{name}" + ("" if p.stem == "__init__" else f".{p.stem}")
                      for p in sorted((PACKAGE / name).glob("*.py"))]
        else:
            found.append(f"dflash_fi.{name}")
    return found


def notebook_imports(path: Path) -> list[str]:
    """Every import statement of a notebook's source (in any cell, under any `if`), as code."""
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError as error:  # the probe reports it
        return [f"raise SyntaxError({f'{path.name}: {error}'!r})"]
    return [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


PROBE = """
import json, sys
loaded, blame = set(), {}
for name, lines in json.loads(sys.argv[1]):
    try:
        exec("\\n".join(lines), {})
    except Exception as error:  # a broken import is its own finding
        blame[name] = [f"{type(error).__name__}: {error}"]
        continue
    now = {m for m in sys.modules if m.startswith("dflash_fi.proof")}
    if now - loaded:
        blame[name] = sorted(now - loaded)
    loaded |= now
print(json.dumps(blame))
"""


def test_no_lesson_module_and_no_notebook_loads_the_proof_transitively():
    """One fresh interpreter imports every lesson module, then runs every notebook's import lines, and names what
    loaded a dflash_fi.proof module (a module already loaded is not loaded again: the first to load one is named,
    and any one loading it fails)."""
    probes = [(m, [f"import {m}"]) for m in lesson_modules() if not m.startswith("dflash_fi.patched.")]
    probes += [(f"notebooks/{p.name}", notebook_imports(p)) for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))]
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(probes)], capture_output=True, text=True,
                         cwd=PACKAGE.parent, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    blame = json.loads(out.stdout.strip().splitlines()[-1])
    assert blame == {}, f"these load the proof (or fail to import): {blame}"


def test_no_docstring_cites_a_file_of_the_committed_evidence():
    cited = [(path.name, getattr(node, "lineno", 1)) for path in PACKAGE.rglob("*.py") for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and (ast.get_docstring(node) or "")
             and ("evidence/nvidia" in ast.get_docstring(node) or "runs/nvidia" in ast.get_docstring(node))]
    assert not cited, f"docstrings that cite an evidence file: {cited}"


def test_test_files_have_unique_module_names():
    # pytest imports a test file outside a package by its basename: a second test_x.py there stops collection
    loose = [p.name for p in (PACKAGE.parent / "tests").rglob("test_*.py") if not (p.parent / "__init__.py").exists()]
    assert len(loose) == len(set(loose)), sorted({n for n in loose if loose.count(n) > 1})
