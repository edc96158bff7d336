"""Step 4 beside what vLLM merged: vLLM 0.24.0's own flashinfer.py, driven through the same builds as step 4.

`MergedLab` is a `RoutingLab` whose FlashInfer module is `dflash_fi.patched.vllm_0_24_0` (0.24.0's file from its
wheel, unchanged) instead of a step's; everything else is vLLM 0.22.1's, as in every lab. 0.24.0's file imports
against 0.22.1's modules as it is; one name means something else there: `PIN_MEMORY`, which 0.24.0 defines in `vllm.utils.torch_utils` as
`is_pin_memory_available()` and 0.22.1 as "not WSL". Each lab sets it to 0.24.0's meaning, asked of the pretended GPU.

`compare(configs, seeds)` builds the standard batches and seeded random draft and target batches under both, for each
configuration (GPU, KV-cache dtype, TRTLLM, DCP), and keeps each decision as data (`Decision`); `difference(build)`
names why two decisions differ (`Difference`), or says that nothing explains it. Nothing runs at import.
"""

from __future__ import annotations

import copy
import enum
import importlib
import itertools
import random
from dataclasses import dataclass, fields, replace
from unittest import mock

import torch

from dflash_fi.lab.batches import STANDARD_BATCHES, Batch, common_metadata
from dflash_fi.lab.routing import RoutingLab
from dflash_fi.vocabulary import BLACKWELL, DRAFT_BLOCK_SIZE, HOPPER, RTX_4090

MERGED_STEP = 4  # the step that is PR #43081 complete


class Prefill(enum.Enum):
    TRTLLM = "TRTLLM prefill"
    CAUSAL_WRAPPER = "FlashInfer's shared causal prefill wrapper"
    NON_CAUSAL_WRAPPER = "FlashInfer's separate non-causal prefill wrapper"


class Decode(enum.Enum):
    TRTLLM = "TRTLLM decode"
    FLASHINFER = "FlashInfer's decode wrapper"


class Phase(enum.Enum):
    INIT = "when the builder is made"
    BUILD = "in build()"


@dataclass(frozen=True)
class Config:
    capability: tuple[int, int]
    kv_cache_dtype: str  # "auto" (bf16, the model's), "fp8" or "nvfp4"
    trtllm: bool  # TRTLLM attention available (as on Blackwell with its cubins)
    dcp: bool  # decode context parallelism, world size 2


@dataclass(frozen=True)
class Refusal:
    phase: Phase
    error: type  # the exception's class
    wrote_page_table: bool  # the builder had computed the batch's page table (_compute_flashinfer_kv_metadata) first


@dataclass(frozen=True)
class Decision:
    """What one implementation decided for one batch under one configuration."""

    selected: bool  # vLLM 0.22.1's selector accepted FLASHINFER for the role's layers
    cudagraph: object  # the builder's get_cudagraph_support (an AttentionCGSupport)
    refusal: Refusal | None
    split: tuple[int, int, int, int] | None = None  # decodes, prefills, decode tokens, prefill tokens
    prefill: Prefill | None = None
    decode: Decode | None = None
    plan_causal: tuple[bool, ...] | None = None  # causal= of each prefill plan() of the build
    metadata_causal: bool | None = None
    cascade: bool | None = None
    dflash_check: bool | None = None  # DFlash's own check passes (draft batches)
    warned: bool = False  # the backend logged a warning during the build


@dataclass(frozen=True)
class Build:
    config: Config
    batch: Batch
    step4: Decision
    merged: Decision

    @property
    def differing(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(Decision) if getattr(self.step4, f.name) != getattr(self.merged, f.name))


class Difference(enum.Enum):
    """Why step 4 and vLLM 0.24.0 decide differently, each from the code that does it."""

    NVFP4_NEEDS_SM100F = ("vLLM 0.24.0 refuses an NVFP4 KV cache off SM 10.x when the builder is made (#43669, "
                          "another PR in 0.24.0: FlashInfer's FP4 attention exists for sm100f only); vLLM 0.22.1, "
                          "under step 4, makes the builder")
    NVFP4_REFUSED_LATER = ("both refuse a non-causal batch on an NVFP4 KV cache; 0.24.0 only in _get_prefill_wrapper, "
                           "after it wrote the page table (and logged its TRTLLM warning), step 3 first thing in "
                           "build(), on purpose: a refused batch leaves the builder as it was")
    UNEXPLAINED = "nothing above explains it"


def difference(build: Build) -> Difference | None:
    a, b, differing = build.step4, build.merged, set(build.differing)
    if not differing:
        return None
    if (build.config.kv_cache_dtype == "nvfp4" and build.config.capability[0] != 10 and b.refusal is not None
            and b.refusal.phase is Phase.INIT and b.refusal.error is ValueError):
        return Difference.NVFP4_NEEDS_SM100F
    if (build.config.kv_cache_dtype == "nvfp4" and differing <= {"refusal", "warned"} and a.refusal and b.refusal
            and (a.refusal.phase, a.refusal.error) == (b.refusal.phase, b.refusal.error)
            and not a.refusal.wrote_page_table and not a.warned and b.refusal.wrote_page_table):
        return Difference.NVFP4_REFUSED_LATER
    return Difference.UNEXPLAINED


class MergedLab(RoutingLab):
    """The lab's builders on vLLM 0.24.0's own flashinfer.py."""

    def __init__(self, capability, **kwargs):
        super().__init__(MERGED_STEP, capability, **kwargs)  # the step is only what it is compared with

    def _backend(self, stack):
        from vllm.utils.platform_utils import is_pin_memory_available

        from dflash_fi.patched import MERGED_MODULE
        from dflash_fi.plugin import using_backend

        stack.enter_context(using_backend(f"{MERGED_MODULE}.FlashInferBackend"))
        module = importlib.import_module(MERGED_MODULE)
        stack.enter_context(mock.patch.object(module, "PIN_MEMORY", is_pin_memory_available()))  # 0.24.0's meaning
        return module


CAPABILITIES = (RTX_4090, HOPPER, BLACKWELL)
KV_CASES = (("auto", False), ("fp8", False), ("auto", True), ("fp8", True), ("nvfp4", False))  # (KV dtype, DCP)
CONFIGS = tuple(Config(cap, kv, trtllm, dcp) for cap, (kv, dcp), trtllm
                in itertools.product(CAPABILITIES, KV_CASES, (False, True)))


def seeded_batches(seed: int) -> tuple[Batch, Batch]:
    """A DFlash draft batch and a target batch (decodes first, as the runner orders them), drawn from `seed`."""
    rng = random.Random(seed)
    n = rng.randint(1, 8)
    draft = Batch(f"draft, seed {seed}", (DRAFT_BLOCK_SIZE,) * n, tuple(rng.randint(0, 700) for _ in range(n)),
                  False, tuple(rng.randint(0, DRAFT_BLOCK_SIZE - 1) for _ in range(n)))
    kinds = sorted(rng.choice((1, DRAFT_BLOCK_SIZE, rng.randint(2, 120))) for _ in range(rng.randint(1, 8)))
    target = Batch(f"target, seed {seed}", tuple(kinds), tuple(rng.randint(0, 700) for _ in kinds), True)
    return draft, target


def batches(seeds: int) -> tuple[Batch, ...]:
    return STANDARD_BATCHES + tuple(b for seed in range(seeds) for b in seeded_batches(seed))


def _nvfp4_builder(lab: RoutingLab, role: str):
    """The role's builder made again for an NVFP4 KV cache (the layers are not: their impl allocates CUDA buffers)."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.kv_cache_interface import KVQuantMode

    builder, names, config = lab.builders[role]
    config = copy.deepcopy(config)
    config.cache_config.cache_dtype = "nvfp4"
    spec = replace(builder.kv_cache_spec, kv_quant_mode=KVQuantMode.NVFP4, dtype=torch.uint8)
    with set_current_vllm_config(config):
        try:
            made = type(builder)(spec, names, config, builder.device)
        except ValueError as exc:
            return exc, names, config, spec
    made.set_workspace_buffer(torch.empty(0, dtype=torch.uint8))
    return made, names, config, spec


def decide(lab: RoutingLab, config: Config, role_builders: dict, batch: Batch) -> Decision:
    from vllm.config import set_current_vllm_config

    builder, names, vllm_config, spec = role_builders[batch.role]
    selected = lab.rejection[batch.role] is None
    with set_current_vllm_config(vllm_config):
        cudagraph = type(lab.builders[batch.role][0]).get_cudagraph_support(vllm_config, spec)
    if isinstance(builder, Exception):
        return Decision(selected, cudagraph, Refusal(Phase.INIT, type(builder), False))
    warned_before, cad = len(lab.warnings.records), common_metadata(batch)
    page_table = mock.patch.object(builder, "_compute_flashinfer_kv_metadata",
                                   wraps=builder._compute_flashinfer_kv_metadata)
    try:
        with set_current_vllm_config(vllm_config), page_table as computed:
            md = builder.build(0, cad)
    except NotImplementedError as exc:
        return Decision(selected, cudagraph, Refusal(Phase.BUILD, type(exc), computed.called),
                        warned=len(lab.warnings.records) > warned_before)
    prefill = plan = None
    if md.prefill is not None:
        wrapper = getattr(md.prefill, "wrapper", None)
        prefill = (Prefill.TRTLLM if wrapper is None else Prefill.NON_CAUSAL_WRAPPER
                   if wrapper is getattr(builder, "_noncausal_prefill_wrapper", None) else Prefill.CAUSAL_WRAPPER)
        # DCP's wrapper plans two: the context (never causal) and the new tokens
        planned = [wrapper] if hasattr(wrapper, "plans") else [getattr(wrapper, n, None)
                                                               for n in ("_context", "_new_tokens")]
        plan = tuple(w.plans[-1]["causal"] for w in planned if getattr(w, "plans", None))
    decode = None if md.decode is None else Decode.FLASHINFER if hasattr(md.decode, "wrapper") else Decode.TRTLLM
    check = None if batch.causal else lab.run_dflash_check(md, cad) is None
    return Decision(selected, cudagraph, None, (md.num_decodes, md.num_prefills, md.num_decode_tokens,
                    md.num_prefill_tokens), prefill, decode, plan, md.causal, md.use_cascade, check,
                    len(lab.warnings.records) > warned_before)


def _decisions(lab: RoutingLab, config: Config, all_batches) -> list[Decision]:
    if config.kv_cache_dtype == "nvfp4":
        role_builders = {role: _nvfp4_builder(lab, role) for role in ("target", "draft")}
    else:
        role_builders = {role: (*lab.builders[role], lab.layers[role][0].get_kv_cache_spec(lab.builders[role][2]))
                         for role in ("target", "draft")}
    return [decide(lab, config, role_builders, b) for b in all_batches]


def compare(configs=CONFIGS, seeds: int = 8) -> list[Build]:
    """Every batch (the standard ones and `seeds` seeded draft and target batches) under every configuration, decided
    by step 4 and by vLLM 0.24.0's flashinfer.py."""
    all_batches, builds = batches(seeds), []
    for config in configs:
        kv = "auto" if config.kv_cache_dtype == "nvfp4" else config.kv_cache_dtype
        options = dict(trtllm=config.trtllm, kv_cache_dtype=kv, dcp=config.dcp)
        with RoutingLab(MERGED_STEP, config.capability, **options) as lab:
            ours = _decisions(lab, config, all_batches)
        with MergedLab(config.capability, **options) as lab:
            theirs = _decisions(lab, config, all_batches)
        builds += [Build(config, b, x, y) for b, x, y in zip(all_batches, ours, theirs)]
    return builds


def warning_texts(capability=BLACKWELL) -> tuple[list[str], list[str]]:
    """The warnings step 4 and vLLM 0.24.0 log for the standard draft batch with TRTLLM available: the same condition
    (`Decision.warned` compares it), in each one's words."""
    texts = []
    for lab in (RoutingLab(MERGED_STEP, capability, trtllm=True), MergedLab(capability, trtllm=True)):
        with lab:
            lab.route(STANDARD_BATCHES[0])
            texts.append([r.getMessage() for r in lab.warnings.records])
    return texts[0], texts[1]
