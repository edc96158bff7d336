"""The exercises' checks of steps 2-4: what vLLM 0.22.1's `FlashInferMetadataBuilder.build()` does with DFlash and
target batches in the CPU lab (`dflash_fi.lab.routing.RoutingLab`), the FlashInfer module given in the step's place.
Each returns None when it holds, or what it saw instead.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import fields
import textwrap
from types import ModuleType
from unittest import mock

import torch

from dflash_fi.lab.batches import STANDARD_BATCHES, common_metadata
from dflash_fi.lab.routes import paths
from dflash_fi.vocabulary import BLACKWELL, HOPPER, KV_PAGE_SIZE, sm

DRAFTS = [b for b in STANDARD_BATCHES if not b.causal]
TARGETS = [b for b in STANDARD_BATCHES if b.causal]
MACHINES = ((HOPPER, False), (BLACKWELL, True))  # (capability, TRTLLM available)


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


def _route(lab, batch):
    """The lab's `Route` for `batch`; Saw when build() refused it."""
    route = lab.route(batch)
    if route.refused:
        raise Saw(f"{batch.name}: build() raised {route.refused.cls.__name__}: {route.refused.error}")
    return route


# Step 2: the causal field, all-prefill.

def drafts_all_prefill(module):
    for capability, trtllm in MACHINES:
        with _lab(module, capability, trtllm) as lab:
            for batch in DRAFTS:
                route = _route(lab, batch)
                if route.num_decodes:
                    return (f"{_machine(capability, trtllm)}, {batch.name}: {route.num_decodes} decode + "
                            f"{route.num_prefills} prefill requests")


def metadata_says_causality(module):
    with _lab(module) as lab:
        for batch in STANDARD_BATCHES:
            found = _route(lab, batch).metadata_causal
            if found is not batch.causal:
                return f"{batch.name}: {'FlashInferMetadata has no field causal' if found is None else found}"


def dflash_check_passes(module):
    with _lab(module) as lab:
        route = _route(lab, DRAFTS[0])
        if not route.dflash_check_passed:
            return f"{route.batch.name}: AssertionError: {route.dflash_check.error}"


@functools.cache
def _stock_routing(capability, trtllm: bool) -> tuple:
    from dflash_fi.lab.routing import RoutingLab

    with RoutingLab(0, capability, trtllm=trtllm) as stock:
        return tuple(stock.route(batch) for batch in TARGETS)


def targets_routed_as_stock(module):
    for capability, trtllm in MACHINES:
        with _lab(module, capability, trtllm) as lab:
            for batch, theirs in zip(TARGETS, _stock_routing(capability, trtllm)):
                ours = _route(lab, batch)
                for key in (f.name for f in fields(theirs) if f.name not in ("metadata_causal", "selection_refused")):
                    if getattr(ours, key) != getattr(theirs, key):
                        return (f"{_machine(capability, trtllm)}, {batch.name}: {key} is {getattr(ours, key)!r} where "
                                f"stock vLLM has {getattr(theirs, key)!r}")


# Step 3: a non-causal wrapper, planned non-causal.

def draft_planned_non_causal(module):
    with _lab(module) as lab:
        route = _route(lab, DRAFTS[0])
        if route.plan_causal is not False:
            return f"{route.batch.name}: plan(causal={route.plan_causal})" if route.plan_causal else \
                f"{route.batch.name}: no FlashInfer prefill plan ({paths(route)})"


def draft_plan_survives_a_causal_batch(module):
    with _lab(module) as lab:
        draft = _build(lab, DRAFTS[0])
        if getattr(draft.prefill, "wrapper", None) is None:
            return f"{DRAFTS[0].name}: no FlashInfer prefill wrapper"
        _build(lab, TARGETS[-1])  # a causal batch on the draft layers' builder, as the runner builds on target steps
        if draft.prefill.wrapper._causal is not False:  # FlashInfer's own record of the last plan()
            return "a causal batch built next on the same builder re-planned the draft's wrapper causal: they share it"


def forward_runs_the_draft(module):
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


def refused_first(module, nvfp4: bool = False, **lab_kwargs):
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

def no_trtllm_for_the_draft(module):
    with _lab(module, BLACKWELL, trtllm=True) as lab:
        md = _build(lab, DRAFTS[0])
        if isinstance(md.prefill, module.TRTLLMPrefill) or isinstance(md.decode, module.TRTLLMDecode):
            return (f"{DRAFTS[0].name}: {type(md.prefill or md.decode).__name__}, whose kernels are causal only")
        if getattr(md.prefill, "wrapper", None) is None or md.prefill.wrapper._causal is not False:
            return f"{DRAFTS[0].name}: its prefill is not planned non-causal"


def one_warning(module):
    with _lab(module, BLACKWELL, trtllm=True) as lab:
        for batch in DRAFTS:
            _route(lab, batch)
        logged = [w for w in lab.warnings.warnings if w.hunk is not None]  # by the step's own lines
        if len(logged) != 1:
            return f"{len(logged)} warnings for {len(DRAFTS)} non-causal batches"
