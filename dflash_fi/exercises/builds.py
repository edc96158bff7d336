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


def _merged() -> str:
    from dflash_fi.upstream import MERGED

    return MERGED


def _late_refusal() -> str:
    return ("build() refused it only after writing the page table. PR #43081 (merged in vLLM "
            f"{_merged()}) refuses DCP at the top of build() but an NVFP4 cache that late, inside "
            "_get_prefill_wrapper(); the lesson asks for both before build() writes any state, so a refused batch "
            "leaves the builder's buffers as they were for the next one")


LATE_REFUSAL = "build() refused it only after writing the page table"  # the line's start: what the tests find


def refused_first(module, nvfp4: bool = False, **lab_kwargs):
    """A non-causal batch is refused (NotImplementedError) before build() writes anything."""
    with _lab(module, BLACKWELL, **lab_kwargs) as lab:
        builder = lab.builders["draft"][0]
        if nvfp4:
            builder.is_kvcache_nvfp4 = True  # the one flag its NVFP4 branch reads (a real one needs CUDA buffers)
        buffers = [copy.deepcopy(b.np) for b in (builder.paged_kv_indptr, builder.paged_kv_indices)]
        try:
            md = _build(lab, DRAFTS[0])
        except NotImplementedError:
            if any((b.np != saved).any() for b, saved in zip((builder.paged_kv_indptr, builder.paged_kv_indices),
                                                              buffers)):
                return _late_refusal()
            return None
        except Exception as exc:  # e.g. a GPU call no CPU lab can make: build() went on with the batch
            return f"build() went on with it, until {type(exc).__name__}: {textwrap.shorten(str(exc), 60)}"
        ran = ", ".join(type(part).__name__ for part in (md.prefill, md.decode) if part is not None)
        return (f"build() returned metadata for it ({ran or 'no prefill, no decode'}). A refusal inside "
                f"_get_prefill_wrapper() alone (where PR #43081, merged in vLLM {_merged()}, refuses an NVFP4 cache) "
                "is never reached by a batch build() sends elsewhere; the lesson refuses at the top of build(), "
                "whatever path follows")


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


def refusals(step: int) -> dict[str, tuple[str | None, bool]]:
    """For decode context parallelism and an NVFP4 cache: the message of the NotImplementedError the project's step
    `step` raises in build() for a DFlash draft batch (None: it raised none), and whether the caller's metadata, the
    builder's page-table buffers and its non-causal wrapper are as they were."""
    from vllm.config import set_current_vllm_config

    from dflash_fi.lab.routing import RoutingLab

    found = {}
    for name, lab_kwargs in (("DCP", dict(dcp=True)), ("NVFP4", dict(capability=BLACKWELL))):
        with RoutingLab(step, **lab_kwargs) as lab:
            builder, _, config = lab.builders["draft"]
            if name == "NVFP4":
                builder.is_kvcache_nvfp4 = True  # an NVFP4 impl needs CUDA buffers; the builder's flag is what matters
            cad = common_metadata(DRAFTS[0])
            seq_lens, page_table = cad.seq_lens.clone(), builder.paged_kv_indptr.cpu.clone()
            message = None
            with set_current_vllm_config(config):
                try:
                    builder.build(0, cad)
                except NotImplementedError as exc:
                    message = str(exc)
            untouched = (bool((cad.seq_lens == seq_lens).all()) and getattr(builder, "_noncausal_prefill_wrapper", None)
                         is None and bool((builder.paged_kv_indptr.cpu == page_table).all()))
            found[name] = (message, untouched)
    return found
