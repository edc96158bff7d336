"""What each exercise checks: the CPU lab's checks of steps 1..N, run on a FlashInfer backend module.

Each check asks the lab (vLLM 0.22.1's own selector and `FlashInferMetadataBuilder.build()`, `dflash_fi.lab`) about
the module given, the reader's or the project's, and returns None when it holds or what it saw instead. Exercise N
runs the checks of steps 1..N: the steps are cumulative, so step N must keep what the steps before it did.
"""

from __future__ import annotations

import copy
import textwrap
from dataclasses import dataclass
from types import ModuleType
from typing import Callable
from unittest import mock

import torch

from dflash_fi.lab.batches import STANDARD_BATCHES, common_metadata
from dflash_fi.vocabulary import BLACKWELL, CAPABILITIES, HOPPER, KV_CACHE_DTYPES, KV_PAGE_SIZE, RTX_4090, sm

DRAFTS = [b for b in STANDARD_BATCHES if not b.causal]
TARGETS = [b for b in STANDARD_BATCHES if b.causal]
MACHINES = ((HOPPER, False), (BLACKWELL, True))  # (capability, TRTLLM available)


@dataclass(frozen=True)
class Check:
    step: int  # the step that brings it
    name: str  # a few words, for the line that says what still fails
    says: str  # what must hold
    run: Callable[[ModuleType], str | None]  # None: it holds; otherwise what the lab saw instead


def _lab(module: ModuleType, capability=HOPPER, trtllm: bool = False, **kwargs):
    from dflash_fi.lab.routing import RoutingLab

    return RoutingLab(module.DFLASH_FI_STEP, capability, trtllm=trtllm, backend=module, **kwargs)


def _build(lab, batch, role: str = "draft"):
    from vllm.config import set_current_vllm_config

    builder, _, config = lab.builders[role]
    with set_current_vllm_config(config):
        return builder.build(0, common_metadata(batch))


def _machine(capability, trtllm: bool) -> str:
    return f"SM {sm(capability)}{' with TRTLLM' if trtllm else ''}"


class Saw(Exception):
    """What a check saw instead of what it checks, when that is a refusal it did not ask for."""


def _route(lab, batch) -> dict:
    """The lab's row for `batch`; Saw when build() refused it."""
    row = lab.route(batch)
    if "refused" in row:
        raise Saw(f"{batch.name}: build() raised {row['refused']['type']}: {row['refused']['message']}")
    return row


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


def _target_selection_as_stock(module):
    from dflash_fi.lab.selector import selector_matrix

    ours = selector_matrix((module.DFLASH_FI_STEP,), backend=module)
    for r, stock in zip(ours, selector_matrix((0,))):
        if r["role"] == "target" and r["auto_backend"] != stock["auto_backend"]:
            return f"SM {r['capability']}, {r['kv_cache_dtype']} KV cache: vLLM picks {r['auto_backend']} where " \
                   f"stock vLLM picks {stock['auto_backend']}"


# Step 2: the causal field, all-prefill.

def _drafts_all_prefill(module):
    for capability, trtllm in MACHINES:
        with _lab(module, capability, trtllm) as lab:
            for batch in DRAFTS:
                row = _route(lab, batch)
                if row["num_decodes"]:
                    return (f"{_machine(capability, trtllm)}, {batch.name}: {row['num_decodes']} decode + "
                            f"{row['num_prefills']} prefill requests")


def _metadata_says_causality(module):
    with _lab(module) as lab:
        for batch in STANDARD_BATCHES:
            found = _route(lab, batch)["metadata_causal"]
            if found is not batch.causal:
                return f"{batch.name}: {'FlashInferMetadata has no field causal' if found == 'absent' else found}"


def _dflash_check_passes(module):
    with _lab(module) as lab:
        row = _route(lab, DRAFTS[0])
        if not row["dflash_check_passed"]:
            return f"{row['batch']}: AssertionError: {row['dflash_check_reason']}"


def _targets_routed_as_stock(module):
    from dflash_fi.lab.routing import RoutingLab

    for capability, trtllm in MACHINES:
        with _lab(module, capability, trtllm) as lab, RoutingLab(0, capability, trtllm=trtllm) as stock:
            for batch in TARGETS:
                ours, theirs = _route(lab, batch), stock.route(batch)
                for key in theirs.keys() - {"metadata_causal", "selection"}:
                    if ours.get(key) != theirs[key]:
                        return (f"{_machine(capability, trtllm)}, {batch.name}: {key} is {ours.get(key)!r} where "
                                f"stock vLLM has {theirs[key]!r}")


# Step 3: a non-causal wrapper, planned non-causal.

def _draft_planned_non_causal(module):
    with _lab(module) as lab:
        row = _route(lab, DRAFTS[0])
        if row["plan_causal"] is not False:
            return f"{row['batch']}: plan(causal={row['plan_causal']})" if row["plan_causal"] else \
                f"{row['batch']}: no FlashInfer prefill plan ({row['decode'] or row['prefill']})"


def _draft_plan_survives_a_causal_batch(module):
    with _lab(module) as lab:
        draft = _build(lab, DRAFTS[0])
        if getattr(draft.prefill, "wrapper", None) is None:
            return f"{DRAFTS[0].name}: no FlashInfer prefill wrapper"
        _build(lab, TARGETS[-1])  # a causal batch on the draft layers' builder, as the runner builds on target steps
        if draft.prefill.wrapper._causal is not False:  # FlashInfer's own record of the last plan()
            return "a causal batch built next on the same builder re-planned the draft's wrapper causal: they share it"


def _forward_runs_the_draft(module):
    from vllm.config import set_current_vllm_config

    with _lab(module) as lab:
        md, builder = _build(lab, DRAFTS[1]), lab.builders["draft"][0]
        wrapper = getattr(md.prefill, "wrapper", None)
        if wrapper is None:
            return f"{DRAFTS[1].name}: no FlashInfer prefill wrapper"
        layer, n = lab.layers["draft"][0], md.num_actual_tokens
        q = torch.zeros(n, builder.num_qo_heads, builder.head_dim, dtype=torch.bfloat16)
        kv = torch.zeros(n, builder.num_kv_heads, builder.head_dim, dtype=torch.bfloat16)
        cache = torch.zeros(64, 2, KV_PAGE_SIZE, builder.num_kv_heads, builder.head_dim, dtype=torch.bfloat16)
        # forward()'s own logic up to the kernel: the wrapper's run() is a double, not what is checked here.
        with set_current_vllm_config(lab.builders["draft"][2]), \
                mock.patch.object(wrapper, "run", side_effect=lambda q, *a, **k: torch.zeros_like(q)) as run:
            layer.impl.forward(layer, q, kv, kv, cache, md, torch.empty_like(q))
        if run.call_count != 1:
            return f"forward() ran the draft's prefill wrapper {run.call_count} times"


def _refused_first(module, nvfp4: bool = False, **lab_kwargs):
    """A non-causal batch is refused (NotImplementedError) before build() writes anything."""
    with _lab(module, BLACKWELL, **lab_kwargs) as lab:
        builder = lab.builders["draft"][0]
        if nvfp4:
            builder.is_kvcache_nvfp4 = True  # the one flag its NVFP4 branch reads (a real one needs CUDA buffers)
        buffers = [copy.deepcopy(b.np) for b in (builder.paged_kv_indptr, builder.paged_kv_indices)]
        try:
            _build(lab, DRAFTS[0])
        except NotImplementedError:
            if any((b.np != saved).any() for b, saved in zip((builder.paged_kv_indptr, builder.paged_kv_indices),
                                                              buffers)):
                return "build() refused it only after writing the page table"
            return None
        except Exception as exc:  # e.g. a GPU call no CPU lab can make: build() went on with the batch
            return f"build() went on with it, until {type(exc).__name__}: {textwrap.shorten(str(exc), 60)}"
        return "build() returned metadata for it"


# Step 4: no TRTLLM for a non-causal batch.

def _no_trtllm_for_the_draft(module):
    with _lab(module, BLACKWELL, trtllm=True) as lab:
        md = _build(lab, DRAFTS[0])
        if isinstance(md.prefill, module.TRTLLMPrefill) or isinstance(md.decode, module.TRTLLMDecode):
            return (f"{DRAFTS[0].name}: {type(md.prefill or md.decode).__name__}, whose kernels are causal only")
        if getattr(md.prefill, "wrapper", None) is None or md.prefill.wrapper._causal is not False:
            return f"{DRAFTS[0].name}: its prefill is not planned non-causal"


def _one_warning(module):
    with _lab(module, BLACKWELL, trtllm=True) as lab:
        for batch in DRAFTS:
            _route(lab, batch)
        if len(lab.warnings.messages) != 1:
            return f"{len(lab.warnings.messages)} warnings for {len(DRAFTS)} non-causal batches"


CHECKS = (
    Check(1, "selector accepts the draft", "vLLM's selector accepts FLASHINFER for the DFlash draft's layers "
          "(use_non_causal=True) on every GPU and KV cache dtype", _selector_accepts_the_draft),
    Check(1, "RTX 4090 fp8 draft", "asked for no backend, vLLM gives the RTX 4090's draft with an fp8 KV cache "
          "FLASHINFER (stock vLLM finds none)", _rtx_4090_fp8_draft_gets_flashinfer),
    Check(1, "target selection", "the target's layers get the backends stock vLLM gives them",
          _target_selection_as_stock),
    Check(2, "draft all prefill", "a DFlash draft batch is all prefill (no decode kernel sees it), on SM 9.0 and on "
          "SM 10.0 with TRTLLM", _drafts_all_prefill),
    Check(2, "metadata.causal", "FlashInferMetadata.causal is False for a draft batch, True for a target batch",
          _metadata_says_causality),
    Check(2, "DFlash's check", "DFlash's own check passes (DFlashProposer asserts attn_metadata.causal is False on "
          "every draft layer)", _dflash_check_passes),
    Check(2, "target routing", "causal target batches are routed as stock vLLM routes them, on SM 9.0 and on SM 10.0 "
          "with TRTLLM", _targets_routed_as_stock),
    Check(3, "plan(causal=False)", "the draft batch's prefill is planned non-causal: plan(causal=False)",
          _draft_planned_non_causal),
    Check(3, "a wrapper of its own", "the draft's plan survives a causal batch built next on the same builder "
          "(plan() fixes a wrapper's causality)", _draft_plan_survives_a_causal_batch),
    Check(3, "forward()", "the draft layer's forward() runs the draft batch's metadata (its assertions agree with "
          "the plan)", _forward_runs_the_draft),
    Check(3, "DCP refused", "with decode context parallelism, build() refuses a non-causal batch "
          "(NotImplementedError) before it writes anything", lambda m: _refused_first(m, trtllm=True, dcp=True)),
    Check(3, "NVFP4 refused", "with an NVFP4 KV cache, build() refuses a non-causal batch (NotImplementedError)",
          lambda m: _refused_first(m, nvfp4=True)),
    Check(4, "no TRTLLM for the draft", "on SM 10.0 with TRTLLM, the draft batch runs FlashInfer's own prefill, "
          "planned non-causal, not TRTLLM's causal-only kernels", _no_trtllm_for_the_draft),
    Check(4, "one warning", "on SM 10.0 with TRTLLM, the draft's non-causal batches log one warning, once",
          _one_warning),
)


def checks_of(step: int) -> tuple[Check, ...]:
    return tuple(c for c in CHECKS if c.step <= step)

