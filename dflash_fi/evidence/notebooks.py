"""`dflash-fi notebooks`: execute the notebooks in place, top to bottom, as a reader's kernel would.

The committed .ipynb files carry the outputs of one such execution on the GPU machine, within the evidence pass; on
a machine without a GPU their `gpu` cells say so and the check cells use the evidence summary. Each execution
records, in the notebook's metadata, a hash of the cells it ran (`source_sha256`), the step modules' hash
(`dflash_fi.summary.step_hash`) and the commit, and in the summary's notebooks section the same per notebook: a
notebook whose cells, or whose steps, changed after it no longer matches (tests/test_notebooks.py). Prints the time
per notebook.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from dflash_fi.stack import REPO_ROOT

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
METADATA_KEY = "dflash_fi"


def notebook_paths(only: list[str] | None = None) -> list[Path]:
    """The notebooks, or those whose names contain one of `only`."""
    return [p for p in sorted(NOTEBOOKS_DIR.glob("*.ipynb")) if not only or any(o in p.stem for o in only)]


def source_sha256(nb: dict) -> str:
    """sha256 of every cell's type, source and tags: what an execution ran (`nb`: the notebook's JSON)."""
    def source(cell):
        return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    cells = [[c["cell_type"], source(c), sorted(c.get("metadata", {}).get("tags", []))] for c in nb["cells"]]
    return hashlib.sha256(json.dumps(cells).encode()).hexdigest()


def read_notebook(path: Path) -> dict:
    """A notebook's JSON, read without Jupyter's packages (the README's list needs none)."""
    return json.loads(Path(path).read_text())


def execute_notebooks(only: list[str] | None = None, timeout: int = 900, allow_cpu: bool = False) -> int:
    """Execute in place. Without a GPU only with allow_cpu: the committed outputs come from a GPU."""
    import dflash_fi.summary as S
    from dflash_fi.errors import BadInput
    from dflash_fi.stack import cuda_gpu, git_commit, require_gpu, run_context

    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError
    except ImportError:
        raise BadInput("dflash-fi notebooks needs the dev extras (nbclient, nbformat): "
                       "`.venv/bin/uv pip install -e '.[dev]'`") from None
    if not allow_cpu:
        require_gpu("dflash-fi notebooks (it replaces the committed GPU outputs; --allow-cpu to do it anyway)")
    paths = notebook_paths(only)
    if not paths:
        raise BadInput(f"no notebook under {NOTEBOOKS_DIR} matches {only!r}")
    gpu, failed = cuda_gpu(), 0
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOKS_DIR)}})
        started = time.time()
        try:
            client.execute()
            status = "ok"
        except CellExecutionError as exc:
            status, failed = f"FAILED: {str(exc).splitlines()[0][:160]}", failed + 1
        seconds = time.time() - started
        executed = {"source_sha256": source_sha256(nb), "executed_on": gpu.name if gpu else "CPU",
                    "commit": git_commit(), "step_hash": S.step_hash(), "seconds": round(seconds, 1), "status": status}
        nb.metadata[METADATA_KEY] = executed
        nbformat.write(nb, path)
        if gpu:
            S.write(S.Section.NOTEBOOKS, {"notebooks": {path.stem: executed}}, S.provenance(run_context(), seconds),
                    merge="notebooks")
        print(f"{path.name:<32} {seconds:7.1f} s  {status}", flush=True)
    return 1 if failed else 0
