"""`dflash-fi notebooks`: execute the notebooks in place, top to bottom, as a reader's kernel would.

The committed .ipynb files carry the outputs of one such execution on the GPU machine; on a machine without
a GPU their `gpu` cells say so and the check cells use the committed records. Prints the time per notebook.
"""

from __future__ import annotations

import time
from pathlib import Path

from dflash_fi.stack import REPO_ROOT

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"


def notebook_paths(only: str | None = None) -> list[Path]:
    return [p for p in sorted(NOTEBOOKS_DIR.glob("*.ipynb")) if only is None or only in p.stem]


def execute_notebooks(only: str | None = None, timeout: int = 900, allow_cpu: bool = False) -> int:
    """Execute in place. Without a GPU only with allow_cpu: the committed outputs come from a GPU."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    from dflash_fi.errors import BadInput
    from dflash_fi.stack import require_gpu

    if not allow_cpu:
        require_gpu("dflash-fi notebooks (it replaces the committed GPU outputs; --allow-cpu to do it anyway)")
    paths = notebook_paths(only)
    if not paths:
        raise BadInput(f"no notebook under {NOTEBOOKS_DIR} matches {only!r}")
    failed = 0
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
        nbformat.write(nb, path)
        print(f"{path.name:<32} {time.time() - started:7.1f} s  {status}", flush=True)
    return 1 if failed else 0
