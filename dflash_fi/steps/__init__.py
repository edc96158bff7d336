"""The five states of vLLM's FlashInfer backend that the tutorial walks through.

    step 0  stock vLLM 0.22.1
    step 1  + supports_non_causal()                     (selector accepts FlashInfer for the draft)
    step 2  + FlashInferMetadata.causal, all-prefill    (runs, but still planned causal)
    step 3  + separate non-causal prefill wrapper       (correct)
    step 4  + TRTLLM gating                             (correct on Blackwell too)

`backend_module(n)` is the module whose `FlashInferBackend` vLLM uses at step n; `hunk_diff(n)` is the
unified diff from step n-1 to step n, i.e. that part of PR #43081.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from dflash_fi.steps.patching import STOCK_MODULE, apply_hunks, stock_source, unified_diff

STEP_MODULES = {
    0: "dflash_fi.steps.step0_stock",
    1: "dflash_fi.steps.step1_capability_flag",
    2: "dflash_fi.steps.step2_causal_metadata",
    3: "dflash_fi.steps.step3_noncausal_wrapper",
    4: "dflash_fi.steps.step4_trtllm_gating",
}
FINAL_STEP = max(STEP_MODULES)


class UnknownStep(ValueError):
    pass


def check_step(step: int | str) -> int:
    try:
        number = int(step)
    except (TypeError, ValueError):
        number = -1
    if number not in STEP_MODULES:
        raise UnknownStep(
            f"unknown step {step!r}: choose one of {', '.join(map(str, STEP_MODULES))} "
            "(0 = stock vLLM 0.22.1, 4 = the complete change)"
        )
    return number


def step_module(step: int | str) -> ModuleType:
    """The module holding step n's title and hunks (cheap: imports no vLLM)."""
    return importlib.import_module(STEP_MODULES[check_step(step)])


def backend_module_name(step: int | str) -> str:
    step = check_step(step)
    return STOCK_MODULE if step == 0 else f"dflash_fi.patched.step{step}"


def backend_module(step: int | str) -> ModuleType:
    """The FlashInfer backend module of step n: vLLM's own for step 0, the patched one after."""
    return importlib.import_module(backend_module_name(step))


def backend_class_path(step: int | str) -> str:
    return f"{backend_module_name(step)}.FlashInferBackend"


def patched_source(step: int | str) -> str:
    return apply_hunks(stock_source(), step_module(step).HUNKS)


def hunk_diff(step: int | str, context: int = 3) -> str:
    """What step n adds to step n-1, as a unified diff of flashinfer.py."""
    step = check_step(step)
    if step == 0:
        return ""
    return unified_diff(
        patched_source(step - 1), patched_source(step),
        f"a/flashinfer.py (step {step - 1})", f"b/flashinfer.py (step {step})", context,
    )
