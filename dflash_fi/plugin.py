"""vLLM general plugin: make `FLASHINFER` mean the step selected by DFLASH_FI_STEP.

vLLM calls `register()` in every process it starts (API server, engine core, workers), so the choice
travels with the environment variable rather than with any Python state:

    DFLASH_FI_STEP unset or 0   stock vLLM 0.22.1 (nothing is registered)
    DFLASH_FI_STEP=N            AttentionBackendEnum.FLASHINFER -> dflash_fi.patched.stepN.FlashInferBackend,
                                for N from 1 to the last step (`dflash_fi.steps.FINAL_STEP`)

The backend keeps its name "FLASHINFER", so `attention_backend="FLASHINFER"` (target) and
`speculative_config={"attention_backend": "FLASHINFER"}` (DFlash draft) select it as usual.
`using_step(n)` does the same for the duration of a `with` block (the CPU lab's selector and routing).
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from types import ModuleType

STEP_ENV = "DFLASH_FI_STEP"
logger = logging.getLogger(__name__)


def selected_step() -> int:
    from dflash_fi.steps import check_step

    value = os.environ.get(STEP_ENV, "").strip()
    return 0 if value == "" else check_step(value)


def _class_path(step: int, backend: ModuleType | None) -> str | None:
    from dflash_fi.steps import backend_class_path, check_step

    if backend is not None:
        return f"{backend.__name__}.FlashInferBackend"
    return backend_class_path(step) if check_step(step) else None


def use_step(step: int, backend: ModuleType | None = None) -> None:
    """From now on, in this process, AttentionBackendEnum.FLASHINFER is step `step` (0: vLLM's own), or the
    `FlashInferBackend` of `backend`, a module standing for that step (a reader's exercise)."""
    _use_backend(_class_path(step, backend))


def _use_backend(class_path: str | None) -> None:
    from vllm.v1.attention import selector
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    if class_path:
        register_backend(AttentionBackendEnum.FLASHINFER, class_path)
    else:
        AttentionBackendEnum.FLASHINFER.clear_override()
    selector._cached_get_attn_backend.cache_clear()  # the selector memoises its answers


def register() -> None:
    step = selected_step()
    if step == 0:
        return
    from dflash_fi.stack import require_pinned_stack
    from dflash_fi.steps import backend_class_path

    require_pinned_stack()
    use_step(step)
    logger.info("dflash-fi: FLASHINFER is step %d (%s)", step, backend_class_path(step))


@contextmanager
def using_backend(class_path: str | None):
    """AttentionBackendEnum.FLASHINFER is the class at `class_path` (None: vLLM's own) inside the block, and what it was
    before after it."""
    from vllm.v1.attention.backends.registry import _ATTN_OVERRIDES, AttentionBackendEnum

    saved = _ATTN_OVERRIDES.get(AttentionBackendEnum.FLASHINFER)
    _use_backend(class_path)
    try:
        yield
    finally:
        _use_backend(saved)


def using_step(step: int, backend: ModuleType | None = None):
    """AttentionBackendEnum.FLASHINFER is step `step` (or `backend`'s, see `use_step`) inside the block, and what it
    was before after it."""
    return using_backend(_class_path(step, backend))
