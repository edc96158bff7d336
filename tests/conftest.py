"""Shared test set-up: GPU-only tests and notebook cells are skipped, visibly, without a CUDA GPU."""

from __future__ import annotations

import pytest

NO_GPU_REASON = "no CUDA GPU on this machine (GPU-only)"


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason=NO_GPU_REASON)
    for item in items:
        cell = getattr(item, "cell", None)  # nbval notebook cell
        tags = (cell.metadata.get("tags") or []) if cell is not None else []
        if "gpu" in item.keywords or "gpu" in tags:
            item.add_marker(skip)
