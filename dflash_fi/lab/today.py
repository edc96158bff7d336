"""The places the lesson taught, in vLLM 0.22.1, 0.24.0 and 0.33.0's own code (read by `dflash_fi.upstream`), as data.

    definition(version, path, qualname)   a function's or class's source in that release (None: it has none)
    PLACES, changes(place)                each place, and what changed at it from release to release, and why
    priorities(version, capability, ...)  a release's `_get_backend_priorities`, run from its own source
    UPSTREAM, Upstream.since()            each step of this project against what upstream's code shows, and since when

0.33.0 cannot be imported against 0.22.1, so `priorities` compiles that one function from its source, without its
`@cache`, in a namespace of its own: `AttentionBackendEnum` is a stub whose members are their names, and
`DeviceCapability` is vLLM 0.22.1's. Nothing runs at import.
"""

from __future__ import annotations

import __future__
import ast
import re
import textwrap
from dataclasses import dataclass

from dflash_fi.upstream import CUDA, FLASHINFER, LESSON, MERGED, PROPOSER, SELECTOR, TODAY, VERSIONS, source


def _node(tree: ast.AST, qualname: str):
    node = tree
    for name in qualname.split("."):
        node = next((n for n in getattr(node, "body", []) if getattr(n, "name", None) == name), None)
        if node is None:
            return None
    return node


def definition(version: str, path: str, qualname: str) -> str | None:
    """The source of `qualname` (e.g. 'FlashInferBackend.supports_non_causal') in `path` of vLLM `version`, its
    decorators included and dedented; None where that release has no such definition."""
    text = source(version, path)
    node = _node(ast.parse(text), qualname)
    if node is None:
        return None
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return textwrap.dedent("\n".join(text.splitlines()[first - 1:node.end_lineno])) + "\n"


@dataclass(frozen=True)
class Place:
    title: str
    path: str
    qualname: str
    why: tuple[str, str]  # what changed it from 0.22.1 to 0.24.0, and from 0.24.0 to 0.33.0 (when it changed)


PLACES = (
    Place("the priority lists", CUDA, "_get_backend_priorities",
          ("an MLA list for SM 12.x only (not the lesson's)",
           "#48167: `use_non_causal` is a parameter, and on SM 10.x a non-causal layer gets FLASH_ATTN first; "
           "also new entries for multimodal prefixes and MLA (not the lesson's)")),
    Place("the selector walk", CUDA, "CudaPlatformBase.get_valid_backends",
          ("each valid backend is kept with its class (`_BackendCandidate`; not the lesson's)",
           "#48167: the walk hands `use_non_causal` (and head size, multimodal prefix) to the priority list; "
               "a backend that fails to load with an OSError is skipped like an ImportError")),
    Place("where use_non_causal comes from", SELECTOR, "get_attn_backend",
          ("a KV-connector flag (not the lesson's)",
           "per-KV-group backends, more selector flags (not the lesson's); `use_non_causal` still comes from "
           "`attention_config.use_non_causal`, as in 0.22.1")),
    Place("supports_non_causal", FLASHINFER, "FlashInferBackend.supports_non_causal",
          ("#43081 (steps 1-4): FlashInfer says it can serve a non-causal layer", "")),
    Place("the non-causal wrapper", FLASHINFER, "FlashInferMetadataBuilder._get_prefill_wrapper",
          ("#43081: a separate non-causal wrapper, refusing DCP and NVFP4 when it is first asked for",
           "the non-causal wrapper is an attention-sink wrapper for models with sinks on SM 9.0 / 12.x (the XQA GPUs, "
           "#49718, #50439); the layout is named by a string")),
    Place("get_cudagraph_support", FLASHINFER, "FlashInferMetadataBuilder.get_cudagraph_support",
          ("", "#48167: no UNIFORM_BATCH for a non-causal config, except on the XQA GPUs (SM 9.0, 12.x: #49718, "
               "#50439); UNIFORM_BATCH for causal spec decoding below SM 9.0 (FlashInfer's fa2 decode); DCP keeps "
               "single-token graphs (#50439)")),
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


@dataclass(frozen=True)
class Probe:
    """`pattern` (a regex) occurs in the definition `qualname` of `path`, or, with absent=True, does not."""

    path: str
    qualname: str
    pattern: str
    absent: bool = False

    def holds(self, version: str) -> bool:
        text = definition(version, self.path, self.qualname)
        found = text is not None and re.search(self.pattern, text) is not None
        return found != self.absent


@dataclass(frozen=True)
class Upstream:
    """A step of this project, what upstream's code does at the same place, and the PRs that say why."""

    step: str
    ours: str
    theirs: str
    prs: str
    probes: tuple[Probe, ...]  # all hold where `theirs` is true
    claimed: str | None  # the first release of LESSON, MERGED, TODAY where it is true, as `theirs` is written

    def since(self) -> str | None:
        """The first release whose code shows `theirs` (and every one after it does), from the probes."""
        holds = [all(p.holds(v) for p in self.probes) for v in VERSIONS]
        return next((v for i, v in enumerate(VERSIONS) if all(holds[i:])), None)


_BUILD = "FlashInferMetadataBuilder.build"
_WRAPPER = "FlashInferMetadataBuilder._get_prefill_wrapper"
_CLAIM = "FlashInferMetadataBuilder.get_cudagraph_support"
UPSTREAM = (
    Upstream("1", "supports_non_causal()", "the same flag", "#43081",
             (Probe(FLASHINFER, "FlashInferBackend.supports_non_causal", r"return True"),), MERGED),
    Upstream("2", "metadata.causal; a non-causal batch is all prefill", "the same", "#43081",
             (Probe(FLASHINFER, "FlashInferMetadata", r"causal: bool"),
              Probe(FLASHINFER, _BUILD, r"num_prefills = num_reqs")), MERGED),
    Upstream("3", "a separate non-causal wrapper; DCP, NVFP4 refused first thing in build()",
             "the same wrapper; DCP refused in build(), NVFP4 only when the wrapper is asked for", "#43081",
             (Probe(FLASHINFER, _WRAPPER, r"_noncausal_prefill_wrapper = "),
              Probe(FLASHINFER, _WRAPPER, r"if self\.is_kvcache_nvfp4:\s+raise NotImplementedError")), MERGED),
    Upstream("4", "no TRTLLM for a non-causal batch, one warning", "the same", "#43081",
             (Probe(FLASHINFER, _BUILD, r"prefill_use_trtllm = causal and"),
              Probe(FLASHINFER, _BUILD, r"if not causal and self\.use_trtllm_decode_attention:")), MERGED),
    Upstream("5", "no UNIFORM_BATCH claim for a non-causal config (#48167)",
             "the same claim, except on the XQA GPUs (SM 9.0, 12.x)", "#48167, #50439",
             (Probe(FLASHINFER, _CLAIM, r"not use_non_causal or is_xqa_arch"),), TODAY),
    Upstream("5", "the non-causal wrapper runs FA2 (measured faster for 16-query blocks)",
             "not done: backend='auto' (FA3 on SM 9.0)", "not found in public threads",
             (Probe(FLASHINFER, _WRAPPER, r'backend="auto"'), Probe(FLASHINFER, _WRAPPER, r'"fa2"', absent=True)),
             MERGED),
    Upstream("6", "CUDA-graph prefill wrappers: UNIFORM_BATCH for causal spec decoding without TRTLLM",
             "not done with prefill wrappers (none is built with use_cuda_graph); below SM 9.0 UNIFORM_BATCH comes "
             "from FlashInfer's fa2 decode of uniform spec queries, on SM 9.0 / 12.x from XQA",
             "#50439, #49718 (the fa2 decode: not looked up)",
             (Probe(FLASHINFER, _WRAPPER, r"use_cuda_graph", absent=True),
              Probe(FLASHINFER, _CLAIM, r"_use_fa2_native_decode\(\)")), TODAY),
    Upstream("6", "the drafter captures PIECEWISE graphs only (vLLM's, kept)", "still PIECEWISE only",
             "#48167 names full draft graphs as its follow-up",
             (Probe(PROPOSER, "SpecDecodeBaseProposer.initialize_cudagraph_keys",
                    r"eagle_cudagraph_mode = CUDAGraphMode\.PIECEWISE"),), LESSON),
    Upstream("7", "a draft plans from host bounds, no seq_lens copy from the GPU",
             "not done: the bound is used only without speculative tokens; else seq_lens is copied from the GPU",
             "#57352 (open)",
             (Probe(FLASHINFER, _BUILD, r"_num_speculative_tokens == 0\s+and common_attn_metadata\.seq_lens_cpu_upper"),
              Probe(FLASHINFER, _BUILD, r"seq_lens\.cpu\(\)")), TODAY),
    Upstream("8", "plan once: a draft's plan reused while its shape holds",
             "not done: every non-causal prefill build plans; on SM 9.0 / 12.x the draft skips plan() on XQA",
             "not found in public threads", (Probe(FLASHINFER, _BUILD, r"causal=attn_metadata\.causal"),), MERGED),
    Upstream("9", "the draft on XQA (another engineer is building it now)",
             "a non-causal draft block decodes on XQA (SM 9.0 and 12.x), packed block mask, no plan()",
             "#50439 (SM 9.0), #49718 (SM 12.x)",
             (Probe(FLASHINFER, _BUILD, r"route_decode = causal or self\.use_xqa"),
              Probe(FLASHINFER, "_make_xqa_draft_block_mask", r"if causal else")), TODAY),
)
