"""What a section of the evidence ran, as hashes (`inputs`), and so which sections the code at hand has made stale.

Each input is hashed as what it does, not as the file's bytes: a step as the flashinfer.py it builds (vLLM 0.22.1's
file with the step's hunks), a module as its syntax tree without docstrings or comments. So a docstring edit in a
helper stales nothing, and a changed tolerance, loader or hunk stales exactly the sections that ran it:

    walkthrough     the steps, the plugin, the loader, the engine, the checks (their specs and tolerances), versions
    gpu-tests       the steps, the plugin, the loader, the GPU tests, versions
    bench-*, profile  the steps, the plugin, the loader, the engine, the benchmark's own definitions, versions
    notebooks       per notebook: its steps, the plugin, the loader, versions, and its own source

Machinery is read as text, never imported: a notebook asking whether its evidence is current loads no proof code.
Nothing runs at import.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
from functools import lru_cache
from pathlib import Path

from dflash_fi.records.provenance import Provenance
from dflash_fi.records.summary import Section, Stale, Summary, changed, provenance as made

PACKAGE = Path(__file__).resolve().parent
REPO = PACKAGE.parent
# Module files (relative to the repository) each input is made of.
FILES = {
    "plugin": ("dflash_fi/plugin.py",),
    "loader": ("dflash_fi/patched/__init__.py",),
    "engine": ("dflash_fi/proof/engine/*.py",),
    "checks": ("dflash_fi/proof/evidence/checks.py", "dflash_fi/proof/evidence/check_spec.py",
               "dflash_fi/proof/evidence/plan.py", "dflash_fi/proof/evidence/near_ties.py"),
    "bench": ("dflash_fi/proof/bench/*.py",),
    "gpu-tests": ("tests/gpu/*.py",),
}
COMMON = ("steps", "plugin", "loader", "versions")
NEEDS = {
    Section.WALKTHROUGH: (*COMMON, "engine", "checks"),
    Section.GPU_TESTS: (*COMMON, "gpu-tests"),
    Section.BENCH_E2E: (*COMMON, "engine", "bench"),
    Section.BENCH_KERNELS: (*COMMON, "engine", "bench"),
    Section.PROFILE: (*COMMON, "engine", "bench"),
    Section.NOTEBOOKS: COMMON,
}


def code_hash(source: str) -> str:
    """sha256 of a module's syntax tree, docstrings and comments left out."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(_canonical(tree).encode()).hexdigest()


def _canonical(node) -> str:
    """The tree as text, one form on every Python: fields left empty (None, []) are left out, because `ast.dump`
    differs between versions exactly there (3.12 adds `type_params=[]` to every def)."""
    if isinstance(node, ast.AST):
        fields = ((name, _canonical(getattr(node, name, None))) for name in node._fields)
        return f"{type(node).__name__}({', '.join(f'{k}={v}' for k, v in fields if v not in ('None', '[]'))})"
    if isinstance(node, list):
        return f"[{', '.join(map(_canonical, node))}]"
    return repr(node)


def _files_hash(patterns: tuple[str, ...], root: Path) -> str:
    digest = hashlib.sha256()
    for pattern in patterns:
        for path in sorted(root.glob(pattern)):
            digest.update(f"{path.relative_to(root)}\0{code_hash(path.read_text())}\0".encode())
    return digest.hexdigest()


@lru_cache(maxsize=None)
def _stock_source() -> str:
    """vLLM 0.22.1's flashinfer.py, found without importing vLLM (the steps check it is the pinned file)."""
    from dflash_fi.steps.patching import STOCK_MODULE, STOCK_SHA256, stock_source

    spec = importlib.util.find_spec(STOCK_MODULE.split(".")[0])
    path = Path(spec.submodule_search_locations[0], *STOCK_MODULE.split(".")[1:]).with_suffix(".py")
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    return text if hashlib.sha256(text.encode()).hexdigest() == STOCK_SHA256 else stock_source()  # it raises


def step_hashes() -> dict[str, str]:
    """Each step as built: sha256 of the flashinfer.py its hunks make, by 'step0', 'step1', ..."""
    from dflash_fi.steps import STEPS, step_module
    from dflash_fi.steps.patching import apply_hunks

    stock = _stock_source()
    return {f"step{s}": hashlib.sha256(apply_hunks(stock, step_module(s).HUNKS).encode()).hexdigest() for s in STEPS}


def _combined(hashes: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()


def _input(name: str, root: Path) -> str:
    if name == "steps":
        return _combined(step_hashes())
    if name == "versions":
        from dflash_fi.stack import PINNED

        return _combined(PINNED)
    return _files_hash(FILES[name], root)


def inputs(section: Section, root: Path = REPO) -> dict[str, str]:
    """What `section`'s command runs, as the code at hand has it: input name -> sha256."""
    return {name: _input(name, root) for name in NEEDS[section]}


def notebook_inputs(name: str, steps: tuple[int, ...], root: Path = REPO) -> dict[str, str]:
    """What notebook `name` runs: the steps it is about (each as built), the plugin, the loader, the versions, and
    its own source (notebooks/<name>.py)."""
    built = step_hashes()
    ran = {f"step{s}": built[f"step{s}"] for s in steps}
    ran.update({k: _input(k, root) for k in ("plugin", "loader", "versions")})
    source = root / "notebooks" / f"{name}.py"
    ran["notebook"] = hashlib.sha256(source.read_bytes()).hexdigest() if source.is_file() else ""
    return ran


def stale(summary: Summary, sections=None, root: Path = REPO) -> list[Stale]:
    """The sections (default: all recorded) that ran other inputs than the code at hand, and which inputs."""
    return summary.stale(lambda s: inputs(s, root), sections)


def stale_notebook(summary: Summary, name: str, steps: tuple[int, ...], root: Path = REPO) -> Stale | None:
    """Notebook `name`'s last run in a pass, if it ran other inputs than the code at hand (or never ran there)."""
    run = summary.notebooks().get(name)
    ran = run.inputs if run else {}
    what = changed(ran, notebook_inputs(name, steps, root))
    return Stale(Section.NOTEBOOKS, what, name, recorded=bool(ran)) if what else None


def provenance(section: Section, context: dict, seconds: float | None = None) -> Provenance:
    """A section's provenance: `dflash_fi.stack.run_context()`, and what the section's command ran."""
    return made(context, inputs(section), seconds)
