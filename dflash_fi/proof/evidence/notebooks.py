"""`dflash-fi notebooks`: execute the notebooks in place, top to bottom, as a reader's kernel would.

The committed .ipynb files carry the outputs of one such execution on the GPU machine, within the evidence pass; on
a machine without a GPU their `gpu` cells say so and the check cells use the evidence summary. Each execution on a GPU
is recorded once, in the summary's notebooks section (`dflash_fi.records.summary.NotebookRun`): how it ended, and what
it ran (`dflash_fi.freshness.notebook_inputs`: its steps as built, the plugin, the loader, the versions, its own
source), so a notebook whose source or steps changed after it reads as stale. Prints the time per notebook.
"""

from __future__ import annotations

import time
from pathlib import Path

from dflash_fi.stack import REPO_ROOT

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"


def notebook_paths(only: list[str] | None = None) -> list[Path]:
    """The notebooks, or those whose names contain one of `only`."""
    return [p for p in sorted(NOTEBOOKS_DIR.glob("*.ipynb")) if not only or any(o in p.stem for o in only)]


def execute_notebooks(only: list[str] | None = None, timeout: int = 900, allow_cpu: bool = False) -> int:
    """Execute in place. Without a GPU only with allow_cpu: the committed outputs come from a GPU."""
    import dflash_fi.records.summary as S
    from dflash_fi.errors import BadInput
    from dflash_fi.freshness import notebook_inputs, provenance
    from dflash_fi.steps.course import STEPS_OF_NOTEBOOK
    from dflash_fi.stack import cuda_gpu, require_gpu, run_context

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
        nb.metadata.pop("dflash_fi", None)  # an earlier dflash-fi's second record of the run: the summary is the one
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOKS_DIR)}})
        started, error = time.time(), None
        try:
            client.execute()
        except CellExecutionError as exc:
            error, failed = str(exc).splitlines()[0][:160], failed + 1
        seconds = time.time() - started
        run = S.NotebookRun(S.NotebookStatus.FAILED if error else S.NotebookStatus.RAN, gpu.name if gpu else "CPU",
                            round(seconds, 1), notebook_inputs(path.stem, STEPS_OF_NOTEBOOK.get(path.stem, ())), error)
        nbformat.write(nb, path)
        if gpu:
            S.write(S.Section.NOTEBOOKS, {"notebooks": {path.stem: run.to_json()}},
                    provenance(S.Section.NOTEBOOKS, run_context(), seconds), merge="notebooks")
        print(f"{path.name:<32} {seconds:7.1f} s  {run.status.value}" + (f": {error}" if error else ""), flush=True)
    return 1 if failed else 0
