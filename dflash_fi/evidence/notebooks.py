"""`dflash-fi notebooks`: execute the notebooks in place, top to bottom, as a reader's kernel would.

The committed .ipynb files carry the outputs of one such execution on the GPU machine; on a machine without
a GPU their `gpu` cells say so and the check cells use the committed records. Each execution records, in the
notebook's metadata, a hash of the sources it ran (`source_sha256`): a notebook whose cells changed after its
execution no longer matches it (tests/test_notebooks.py). Prints the time per notebook.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from dflash_fi.stack import REPO_ROOT

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
# The steps each notebook is about (`pytest -m stepN` runs these notebooks too); the first notebook of a step shows
# its hunks (08 measures what step 8 costs against step 7 and the FLASH_ATTN draft; 09 drives step 4 beside vLLM 0.24.0).
STEPS_OF_NOTEBOOK = {"00_dflash_and_the_problem": (0,), "01_choosing_a_backend": (0, 1), "02_causal_metadata": (2,),
                     "03_noncausal_wrapper": (3,), "04_trtllm_gating": (4,), "05_what_upstream_did_next": (5,),
                     "06_graphs_and_host_work": (6, 7), "07_plan_once": (8,), "08_what_it_costs": (8,),
                     "09_vllm_today": (4,)}
NOTEBOOK_OF_STEP = {step: next(nb for nb, steps in STEPS_OF_NOTEBOOK.items() if step in steps)
                    for step in sorted({s for steps in STEPS_OF_NOTEBOOK.values() for s in steps})}
METADATA_KEY = "dflash_fi"


def notebook_paths(only: list[str] | None = None) -> list[Path]:
    """The notebooks, or those whose names contain one of `only`."""
    return [p for p in sorted(NOTEBOOKS_DIR.glob("*.ipynb")) if not only or any(o in p.stem for o in only)]


def source_sha256(nb) -> str:
    """sha256 of every cell's type, source and tags: what an execution ran."""
    cells = [[c.cell_type, c.source, sorted(c.metadata.get("tags", []))] for c in nb.cells]
    return hashlib.sha256(json.dumps(cells).encode()).hexdigest()


def execute_notebooks(only: list[str] | None = None, timeout: int = 900, allow_cpu: bool = False) -> int:
    """Execute in place. Without a GPU only with allow_cpu: the committed outputs come from a GPU."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    from dflash_fi.errors import BadInput
    from dflash_fi.stack import cuda_gpu, git_commit, require_gpu

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
        nb.metadata[METADATA_KEY] = {"source_sha256": source_sha256(nb), "executed_on": gpu.name if gpu else "CPU",
                                     "commit": git_commit(), "seconds": round(seconds, 1), "status": status}
        nbformat.write(nb, path)
        print(f"{path.name:<32} {seconds:7.1f} s  {status}", flush=True)
    return 1 if failed else 0


def lesson_map() -> str:
    """Markdown: each step, what it is, its hunks (the reason for each), and its notebook."""
    from dflash_fi.steps import STEPS, step_module, step_title

    lines = ["| step | what it is | its hunks, each by its reason | notebook |", "|---|---|---|---|"]
    for step in STEPS:
        previous = len(step_module(step - 1).HUNKS) if step else 0
        hunks = "; ".join(h.why for h in step_module(step).HUNKS[previous:]) or "none: vLLM as shipped"
        lines.append(f"| {step} | {step_title(step).split(' - ', 1)[1].rstrip('.')} | {hunks} | "
                     f"{NOTEBOOK_OF_STEP[step][:2]} |")
    return "\n".join(lines)
