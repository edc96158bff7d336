"""vLLM general plugin: make `FLASHINFER` mean the step selected by DFLASH_FI_STEP.

vLLM calls `register()` in every process it starts (API server, engine core, workers), so the choice
travels with the environment variable rather than with any Python state:

    DFLASH_FI_STEP unset or 0   stock vLLM 0.22.1 (nothing is registered)
    DFLASH_FI_STEP=1..4         AttentionBackendEnum.FLASHINFER -> dflash_fi.patched.stepN.FlashInferBackend

The backend keeps its name "FLASHINFER", so `attention_backend="FLASHINFER"` (target) and
`speculative_config={"attention_backend": "FLASHINFER"}` (DFlash draft) select it as usual.
"""

from __future__ import annotations

import logging
import os

STEP_ENV = "DFLASH_FI_STEP"
logger = logging.getLogger(__name__)


def selected_step() -> int:
    from dflash_fi.steps import check_step

    value = os.environ.get(STEP_ENV, "").strip()
    return 0 if value == "" else check_step(value)


def register() -> None:
    step = selected_step()
    if step == 0:
        return
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from dflash_fi.stack import require_pinned_stack
    from dflash_fi.steps import backend_class_path

    require_pinned_stack()
    register_backend(AttentionBackendEnum.FLASHINFER, backend_class_path(step))
    logger.info("dflash-fi: FLASHINFER is step %d (%s)", step, backend_class_path(step))
