"""What each exercise checks: the CPU lab's checks of steps 1..N, run on a FlashInfer backend module.

Each check asks the lab (vLLM 0.22.1's own selector and `FlashInferMetadataBuilder.build()`, `dflash_fi.lab`) about
the module given, the reader's or the project's, and returns None when it holds or what it saw instead. Exercise N
runs the checks of steps 1..N: the steps are cumulative, so step N must keep what the steps before it did.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from dflash_fi.exercises import builds
from dflash_fi.vocabulary import CAPABILITIES, KV_CACHE_DTYPES, RTX_4090, sm


@dataclass(frozen=True)
class Check:
    step: int  # the step that brings it
    name: str  # a few words, for the line that says what still fails
    says: str  # what must hold
    run: Callable[[ModuleType], str | None]  # None: it holds; otherwise what the lab saw instead


# Step 1: vLLM's selector.

def _selector_accepts_the_draft(module):
    from dflash_fi.lab.selector import backend_verdicts

    refused = [(c, kv, v["reasons"]) for c in CAPABILITIES for kv in KV_CACHE_DTYPES
               for v in backend_verdicts(module.DFLASH_FI_STEP, c, kv, "draft", backend=module)
               if v["backend"] == "FLASHINFER" and v["reasons"]]
    if refused:
        c, kv, reasons = refused[0]
        more = f" (and {len(refused) - 1} more GPU x KV cache cases)" if len(refused) > 1 else ""
        return f"SM {sm(c)}, {kv} KV cache: vLLM refuses FLASHINFER: {'; '.join(reasons)}{more}"


def _rtx_4090_fp8_draft_gets_flashinfer(module):
    from dflash_fi.lab.selector import selector_matrix

    row = next(r for r in selector_matrix((module.DFLASH_FI_STEP,), (RTX_4090,), ("fp8",), backend=module)
               if r["role"] == "draft")
    if row["auto_backend"] != "FLASHINFER":
        return f"vLLM picks {row['auto_backend']}" if row["auto_backend"] else "vLLM finds no valid backend"


@functools.cache
def _stock_selection() -> tuple[dict, ...]:
    from dflash_fi.lab.selector import selector_matrix

    return tuple(selector_matrix((0,)))


def _target_selection_as_stock(module):
    from dflash_fi.lab.selector import selector_matrix

    ours = selector_matrix((module.DFLASH_FI_STEP,), backend=module)
    for r, stock in zip(ours, _stock_selection()):
        if r["role"] == "target" and r["auto_backend"] != stock["auto_backend"]:
            return f"SM {r['capability']}, {r['kv_cache_dtype']} KV cache: vLLM picks {r['auto_backend']} where " \
                   f"stock vLLM picks {stock['auto_backend']}"


CHECKS = (
    Check(1, "selector accepts the draft", "vLLM's selector accepts FLASHINFER for the DFlash draft's layers "
          "(use_non_causal=True) on every GPU and KV cache dtype", _selector_accepts_the_draft),
    Check(1, "RTX 4090 fp8 draft", "asked for no backend, vLLM gives the RTX 4090's draft with an fp8 KV cache "
          "FLASHINFER (stock vLLM finds none)", _rtx_4090_fp8_draft_gets_flashinfer),
    Check(1, "target selection", "the target's layers get the backends stock vLLM gives them",
          _target_selection_as_stock),
    Check(2, "draft all prefill", "a DFlash draft batch is all prefill (no decode kernel sees it), on SM 9.0 and on "
          "SM 10.0 with TRTLLM", builds.drafts_all_prefill),
    Check(2, "metadata.causal", "FlashInferMetadata.causal is False for a draft batch, True for a target batch",
          builds.metadata_says_causality),
    Check(2, "DFlash's check", "DFlash's own check passes (DFlashProposer asserts attn_metadata.causal is False on "
          "every draft layer)", builds.dflash_check_passes),
    Check(2, "target routing", "causal target batches are routed as stock vLLM routes them, on SM 9.0 and on SM 10.0 "
          "with TRTLLM", builds.targets_routed_as_stock),
    Check(3, "plan(causal=False)", "the draft batch's prefill is planned non-causal: plan(causal=False)",
          builds.draft_planned_non_causal),
    Check(3, "a wrapper of its own", "the draft's plan survives a causal batch built next on the same builder "
          "(plan() fixes a wrapper's causality)", builds.draft_plan_survives_a_causal_batch),
    Check(3, "forward()", "the draft layer's forward() runs the draft batch's metadata (its assertions agree with "
          "the plan)", builds.forward_runs_the_draft),
    Check(3, "DCP refused", "with decode context parallelism, build() refuses a non-causal batch "
          "(NotImplementedError) before it writes anything", lambda m: builds.refused_first(m, trtllm=True, dcp=True)),
    Check(3, "NVFP4 refused", "with an NVFP4 KV cache, build() refuses a non-causal batch (NotImplementedError)",
          lambda m: builds.refused_first(m, nvfp4=True)),
    Check(4, "no TRTLLM for the draft", "on SM 10.0 with TRTLLM, the draft batch runs FlashInfer's own prefill, "
          "planned non-causal, not TRTLLM's causal-only kernels", builds.no_trtllm_for_the_draft),
    Check(4, "one warning", "on SM 10.0 with TRTLLM, the draft's non-causal batches log one warning, once",
          builds.one_warning),
)


def checks_of(step: int) -> tuple[Check, ...]:
    return tuple(c for c in CHECKS if c.step <= step)

