"""Test set-up for tests/ and notebooks/ alike (here at the root, so `pytest notebooks/02_*.ipynb` uses it too).

- GPU-only tests (marker `gpu`) and notebook cells tagged `gpu` are skipped, with the reason, without a CUDA GPU.
- Everything about step N carries the marker `stepN`: tests parametrized over `step`, modules that say
  `pytestmark = pytest.mark.stepN`, and the notebook of that step (`pytest -m step3`).
- vLLM's own log lines go to a file under artifacts/logs/, not into the test report.
"""

from __future__ import annotations

import pytest

NO_GPU_REASON = "no CUDA GPU on this machine (GPU-only)"


def pytest_configure(config):
    from dflash_fi.logs import quiet_vllm

    quiet_vllm("pytest")


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    has_cuda = _has_cuda()
    skip = pytest.mark.skip(reason=NO_GPU_REASON)
    for item in items:
        cell = getattr(item, "cell", None)  # an nbval notebook cell
        tags = (cell.metadata.get("tags") or []) if cell is not None else []
        if not has_cuda and ("gpu" in item.keywords or "gpu" in tags):
            item.add_marker(skip)
        step = getattr(getattr(item, "callspec", None), "params", {}).get("step")
        if isinstance(step, int):
            item.add_marker(getattr(pytest.mark, f"step{step}"))
        if cell is not None:
            from dflash_fi.notebook import STEPS_OF_NOTEBOOK

            for n in STEPS_OF_NOTEBOOK.get(item.path.stem, ()):
                item.add_marker(getattr(pytest.mark, f"step{n}"))
