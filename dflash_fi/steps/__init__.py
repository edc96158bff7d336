"""The steps: the states of vLLM 0.22.1's FlashInfer backend that the tutorial walks through.

    step 0  stock vLLM 0.22.1
    step 1  + supports_non_causal()                     (selector accepts FlashInfer for the draft)
    step 2  + FlashInferMetadata.causal, all-prefill    (runs, but still planned causal)
    step 3  + separate non-causal prefill wrapper       (correct)
    step 4  + TRTLLM gating                             (correct on Blackwell too; PR #43081 ends here)
    step 5  + what upstream fixed next, faster kernel   (#48167's CUDA-graph claim; fa2 for DFlash blocks)
    step 6  + CUDA-graph prefill wrappers, causal only  (the engine keeps its full decode graphs)
    step 7  + no host overhead                          (plans from host bounds; no build nobody reads)
    step 8  + plan once                                 (a draft plan reused while its shape holds)
    step 9  + the draft on XQA                          (SM 9.0: no plan(), no page table for DFlash blocks)

A step module holds only its hunks: text replacements in vLLM's own `flashinfer.py`, read from the
installed wheel. `backend_module(n)` is the module whose `FlashInferBackend` vLLM uses at step n;
`hunk_diff(n)` is the unified diff from step n-1 to step n, committed as docs/steps/stepN.diff for readers without
vLLM (`python -m dflash_fi.steps.diffs` rewrites them).

May import: dflash_fi.errors, dflash_fi.stack (for the installed version in an error message).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from dflash_fi.errors import UnknownStep
from dflash_fi.steps.patching import STOCK_MODULE, apply_hunks, stock_source, unified_diff

MAY_IMPORT = ("dflash_fi.errors", "dflash_fi.stack")

STEP_MODULES = {
    0: "dflash_fi.steps.step0_stock",
    1: "dflash_fi.steps.step1_capability_flag",
    2: "dflash_fi.steps.step2_causal_metadata",
    3: "dflash_fi.steps.step3_noncausal_wrapper",
    4: "dflash_fi.steps.step4_trtllm_gating",
    5: "dflash_fi.steps.step5_upstream_fixes",
    6: "dflash_fi.steps.step6_cuda_graphs",
    7: "dflash_fi.steps.step7_host_overhead",
    8: "dflash_fi.steps.step8_plan_once",
    9: "dflash_fi.steps.step9_xqa",
}
STEPS = tuple(STEP_MODULES)
PR_43081_STEPS = (1, 2, 3, 4)
FINAL_STEP = max(STEPS)


def check_step(step: int | str) -> int:
    try:
        number = int(step)
    except (TypeError, ValueError):
        number = -1
    if number not in STEP_MODULES:
        raise UnknownStep(
            f"unknown step {step!r}: choose one of {', '.join(map(str, STEPS))} "
            f"(0 = stock vLLM 0.22.1, 4 = PR #43081 complete, {FINAL_STEP} = the final step)"
        )
    return number


def step_module(step: int | str) -> ModuleType:
    """The module holding step n's hunks (cheap: imports no vLLM)."""
    return importlib.import_module(STEP_MODULES[check_step(step)])


def step_title(step: int | str) -> str:
    """The first line of the step module's docstring, e.g. 'Step 1 - the capability flag.'"""
    return step_module(step).__doc__.strip().splitlines()[0]


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
