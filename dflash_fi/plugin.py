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


def use_step(step: int, backend: ModuleType | None = None) -> None:
    """From now on, in this process, AttentionBackendEnum.FLASHINFER is step `step` (0: vLLM's own), or the
    `FlashInferBackend` of `backend`, a module standing for that step (a reader's exercise)."""
    from vllm.v1.attention import selector
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from dflash_fi.steps import backend_class_path, check_step

    if backend is not None:
        register_backend(AttentionBackendEnum.FLASHINFER, f"{backend.__name__}.FlashInferBackend")
    elif check_step(step):
        register_backend(AttentionBackendEnum.FLASHINFER, backend_class_path(step))
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
def using_step(step: int, backend: ModuleType | None = None):
    """AttentionBackendEnum.FLASHINFER is step `step` (or `backend`'s, see `use_step`) inside the block, and what it
    was before after it."""
    from vllm.v1.attention import selector
    from vllm.v1.attention.backends.registry import _ATTN_OVERRIDES, AttentionBackendEnum, register_backend

    saved = _ATTN_OVERRIDES.get(AttentionBackendEnum.FLASHINFER)
    use_step(step, backend)
    try:
        yield
    finally:
        if saved is None:
            AttentionBackendEnum.FLASHINFER.clear_override()
        else:
            register_backend(AttentionBackendEnum.FLASHINFER, saved)
        selector._cached_get_attn_backend.cache_clear()
