"""The places the lesson taught, in vLLM 0.22.1, 0.24.0 and 0.33.0's own code (read by `dflash_fi.upstream`), as data.

    PLACES, changes(place)                each place, and what changed at it from release to release, and why
    priorities(version, capability, ...)  a release's `_get_backend_priorities`, run from its own source
    moved_priorities(gpus)                the GPUs whose list for a non-causal layer 0.33.0 changed
    graphs_by_batch(step, capability)     each lab batch's claim and replayed graph, its group asked with its own config
    graph_claims(), by_step(...)          FlashInfer's CUDA-graph claims and the mode resolved, steps 4-6 (notebook 06)
    wrappers_moved(before, after)         the batches whose prefill wrapper a step changed, with CUDA graphs

Each claim about upstream (this project's steps against upstream's code) is `dflash_fi.upstream.CLAIMS`.

0.33.0 cannot be imported against 0.22.1, so `priorities` compiles that one function from its source, without its
`@cache`, in a namespace of its own: `AttentionBackendEnum` is a stub whose members are their names, and
`DeviceCapability` is vLLM 0.22.1's. Nothing runs at import.
"""

from __future__ import annotations

import __future__
import ast
from dataclasses import dataclass
from typing import NamedTuple

from dflash_fi.upstream import (CUDA, FLASHINFER, LESSON, MERGED, PROPOSER, SELECTOR, TODAY, VERSIONS,  # noqa: F401
                                _node, definition, source)


@dataclass(frozen=True)
class Place:
    title: str
    path: str
    qualname: str
    why: tuple[str, str]  # what changed it from 0.22.1 to 0.24.0, and from 0.24.0 to 0.33.0 (when it changed)


PLACES = (
    Place("the priority lists", CUDA, "_get_backend_priorities",
          ("an MLA list for SM 12.x (not the lesson's)",
           "#48167: a non-causal layer on SM 10.x gets FLASH_ATTN first")),
    Place("the selector walk", CUDA, "CudaPlatformBase.get_valid_backends",
          ("keeps each valid backend's class (not the lesson's)",
           "#48167: hands `use_non_causal` to the priority list")),
    Place("where use_non_causal comes from", SELECTOR, "get_attn_backend",
          ("a KV-connector flag (not the lesson's)",
           "more selector flags (not the lesson's); same source")),
    Place("supports_non_causal", FLASHINFER, "FlashInferBackend.supports_non_causal",
          ("#43081 (step 1): FlashInfer serves non-causal layers", "")),
    Place("the non-causal wrapper", FLASHINFER, "FlashInferMetadataBuilder._get_prefill_wrapper",
          ("#43081 (step 3): a separate non-causal wrapper",
           "#49718, #50439: an attention-sink wrapper on SM 9.0 / 12.x")),
    Place("get_cudagraph_support", FLASHINFER, "FlashInferMetadataBuilder.get_cudagraph_support",
          ("", "#48167: no UNIFORM_BATCH if non-causal; #49718, #50439: except SM 9.0 / 12.x")),
    Place("the draft's CUDA graphs", PROPOSER, "SpecDecodeBaseProposer.initialize_cudagraph_keys", ("", "")),
)


@dataclass(frozen=True)
class Change:
    place: Place
    before: str  # release
    after: str
    diff: str  # unified diff of the definition ('' when unchanged)
    why: str


def changes(place: Place) -> tuple[Change, Change]:
    from dflash_fi.steps.patching import unified_diff

    texts = [definition(v, place.path, place.qualname) or "" for v in VERSIONS]
    out = []
    for i, why in enumerate(place.why):
        diff = unified_diff(texts[i], texts[i + 1], f"vllm-{VERSIONS[i]}/{place.path}",
                            f"vllm-{VERSIONS[i + 1]}/{place.path}")
        out.append(Change(place, VERSIONS[i], VERSIONS[i + 1], diff, why if diff else ""))
    return tuple(out)


class _Names:
    """A stand-in for AttentionBackendEnum: each member is its name."""

    def __getattr__(self, name: str) -> str:
        return name


def priorities(version: str, capability: tuple[int, int], use_non_causal: bool = False) -> tuple[str, ...]:
    """The backends `_get_backend_priorities` of vLLM `version` lists for a non-MLA layer, by name, from its own
    source; `use_non_causal` reaches the releases whose function takes it (0.33.0)."""
    from vllm.platforms.interface import DeviceCapability

    tree = ast.parse(source(version, CUDA))
    function = _node(tree, "_get_backend_priorities")
    function.decorator_list = []  # no @cache: each call runs the function
    namespace = {"AttentionBackendEnum": _Names(), "DeviceCapability": DeviceCapability}
    exec(compile(ast.Module([function], []), f"vllm-{version}/{CUDA}", "exec",
                 flags=__future__.annotations.compiler_flag, dont_inherit=True), namespace)
    takes = {a.arg for a in function.args.args}
    kwargs = {"use_non_causal": use_non_causal} if "use_non_causal" in takes else {}
    return tuple(namespace["_get_backend_priorities"](False, DeviceCapability(*capability), **kwargs))


def moved_priorities(gpus) -> list:
    """The capabilities among `gpus` whose 0.33.0 list for a non-causal layer is not 0.22.1's."""
    return [cap for cap in gpus if priorities(TODAY, cap, True) != priorities(LESSON, cap)]


class Replay(NamedTuple):
    path: str  # the batch's path through `build()`
    claim: str  # its layers' CUDA-graph claim
    graph: str  # the graph it would replay


def graphs_by_batch(step: int, capability) -> dict:
    """Batch -> `Replay` (its path through `build()`, its layers' CUDA-graph claim, the graph it would replay), for each
    of the CPU lab's standard batches at `step` (TRTLLM on, CUDA graphs on), each group asked with its own layers'
    config: where #48167's claim bites (vLLM 0.22.1's runner asks every group with the target's)."""
    import copy

    from vllm.config import set_current_vllm_config

    from dflash_fi.lab.batches import STANDARD_BATCHES
    from dflash_fi.lab.graphs import SPEC_DECODE_QUERY_LEN
    from dflash_fi.lab.routes import paths
    from dflash_fi.lab.routing import RoutingLab

    rows = {}
    with RoutingLab(step, capability, trtllm=True, cuda_graphs=True) as lab:
        for batch in STANDARD_BATCHES:
            builder, _, config = lab.builders[batch.role]
            with set_current_vllm_config(config):
                claim = type(builder).get_cudagraph_support(config, lab.kv_cache_spec)
                mode = copy.deepcopy(lab.vllm_config.compilation_config).resolve_cudagraph_mode_and_sizes(
                    claim, "FlashInferBackend", uniform_decode_query_len=SPEC_DECODE_QUERY_LEN)
            uniform = set(batch.query_lens) == {SPEC_DECODE_QUERY_LEN}
            replay = mode.decode_mode() if uniform else mode.mixed_mode()
            rows[batch] = Replay(paths(lab.route(batch)), claim.name, replay.name)
    return rows


def graph_claims(steps=(4, 5, 6)) -> dict:
    """(step, capability) -> `cudagraph_claims`' row, on SM 9.0 without TRTLLM and on SM 10.0 with it."""
    from dflash_fi.lab.graphs import cudagraph_claims
    from dflash_fi.vocabulary import BLACKWELL, HOPPER

    return {(step, cap): cudagraph_claims(step, cap, trtllm) for step in steps
            for cap, trtllm in ((HOPPER, False), (BLACKWELL, True))}


def by_step(claims: dict, capability, field: str) -> dict:
    """Step -> one field of `graph_claims`' rows at `capability` ('flashinfer_claim_draft_config', 'resolved_mode')."""
    return {step: row[field] for (step, cap), row in claims.items() if cap == tuple(capability)}


def wrappers_moved(before: int, after: int) -> list:
    """The routes of step `after` (CUDA graphs on, the lab's standard batches) whose prefill object is not step
    `before`'s."""
    from dflash_fi.lab.routing import routing_report

    old, new = (routing_report(s, cuda_graphs=True).routes for s in (before, after))
    return [b for a, b in zip(old, new) if a.prefill is not b.prefill]


def installed_priorities(capability: tuple[int, int]) -> tuple[str, ...]:
    """What the installed vLLM 0.22.1's own `_get_backend_priorities` lists for a non-MLA layer on `capability`, by
    name (its CUDA platform module imported without a driver), to hold `priorities(LESSON, ...)` to."""
    import importlib

    from vllm.platforms.interface import DeviceCapability

    from dflash_fi.lab.pretend_gpu import cuda_platform_class

    cuda = importlib.import_module(cuda_platform_class().__module__)  # vllm.platforms.cuda
    return tuple(b.name for b in cuda._get_backend_priorities(False, DeviceCapability(*capability)))
