"""The words the notebooks use, each defined once (notebook 00 shows them before any notebook uses one).

Where vLLM's own code defines a word (its enums `AttentionCGSupport` and `CUDAGraphMode`, the GPUs it tells
apart), the definition is generated from that code: vLLM 0.22.1's docstrings and mode methods, and the
compute capabilities the CPU lab pretends to be. Each entry carries the regexes that find the word in a
notebook's text, for the test that no notebook uses a word before the glossary defines it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dflash_fi.vocabulary import GPU_NAMES, sm


@dataclass(frozen=True)
class Term:
    term: str  # as the glossary shows it
    patterns: tuple[str, ...]  # regexes (case-sensitive) that find a use of the word
    definition: str
    source: str = ""  # the vLLM code the definition is generated from, if any


_WRITTEN = (
    Term("SM 8.9, SM 9.0, SM 10.0", (r"\bSM \d+\.\d\b",), "a GPU's compute capability, which vLLM's selector reads: "
         "{gpus}."),
    Term("vLLM's FlashAttention 2 and 3", (r"FlashAttention (?:version )?[23]\b", r"\bFA[23]\b"),
         "the two versions of the FlashAttention library vLLM's FLASH_ATTN backend is built with "
         "(`attention_config={{\"flash_attn_version\": 2}}` forces one). Version 3 needs SM 9.0; version 2 is all an "
         "RTX 4090 has, and it stores no FP8 KV cache."),
    Term("FlashInfer's fa2 and fa3 kernels", (r"\bfa[23]\b",),
         "FlashInfer's own attention kernels, picked per wrapper (`backend=\"fa2\"`, `\"fa3\"`, or `\"auto\"`: "
         "FlashInfer chooses). Not vLLM's FlashAttention: another library, which only shares the names."),
    Term("TRTLLM", (r"TRTLLM", r"trtllm"),
         "NVIDIA's TensorRT-LLM attention kernels (trtllm-gen), which vLLM's FlashInfer backend prefers on Blackwell "
         "(SM 10.x) for prefill and decode. They are causal only."),
    Term("DCP", (r"\bDCP\b",), "decode context parallelism: a request's KV cache split across GPUs, attention computed "
         "in parts and merged. Its split assumes causal new tokens."),
    Term("NVFP4", (r"NVFP4", r"nvfp4"), "NVIDIA's 4-bit floating-point format (4-bit values, one FP8 scale per block "
         "of 16). vLLM's FlashInfer backend serves an NVFP4 KV cache with TRTLLM kernels only."),
    Term("`plan()` and `run()`", (r"\bplan\(", r"\brun\("),
         "a FlashInfer wrapper's two calls. `plan(...)` takes the batch's shape and `causal`, picks a kernel and "
         "computes a work schedule on the host; `run(q, kv_cache)` launches it, once per layer. A *CUDA-graph "
         "wrapper* keeps its buffers at fixed addresses, so that a captured graph can replay its `run()`."),
    Term("`qo_indptr`, `paged_kv_indptr`", (r"qo_indptr", r"kv_indptr"),
         "what `plan()` is told about the batch, as offsets: request i's query tokens are rows "
         "`qo_indptr[i]:qo_indptr[i+1]`; its KV pages are `paged_kv_indices[paged_kv_indptr[i]:paged_kv_indptr[i+1]]`."),
)
_MEASURES = (
    Term("tau", (r"\btau\b",), "the mean acceptance length, `1 + accepted drafts / verification steps`: the tokens "
         "each forward of the target yields (vLLM's counters `num_accepted_tokens`, `num_drafts`)."),
    Term("top-2 gap, nats", (r"top-2 gap", r"\bnats?\b"), "at one position of an output, the target's logprob of its "
         "best candidate minus that of its second best, in nats (natural-log units: 0.69 = twice as likely, 0 = a tie)."),
    Term("near-tie", (r"near-tie",), "a position where an output parts from its baseline's and the top-2 gap there is "
         "within the near-tie margin (measured from correct engines, notebook 9's appendix): rounding can flip such "
         "a choice. A parting at a larger gap, a *confident token*, fails a check."),
    Term("the mixed workload", (r"mixed workload",), "prompts of many lengths with many `max_tokens`, more requests "
         "than `max_num_seqs`: prefills run beside decodes and batches change shape. The walkthrough runs it "
         "(README, its mixed-batch table); no notebook does."),
    Term("split KV", (r"split KV",), "FlashInfer cutting one request's KV into chunks that different thread blocks "
         "attend to, their partial outputs merged after: how `plan()` spreads a few long requests over the GPU. "
         "`disable_split_kv=True` keeps each request whole."),
    Term("95% interval, A/A pair", (r"95% interval", r"A/A pair"), "how the benchmark states a comparison of two "
         "engines over paired rounds: the estimate, and the range that 95% of bootstrap resamples of the rounds give. "
         "An A/A pair, two engines of the same configuration, shows how wide that range is when nothing differs; a "
         "target is met or missed when the whole range is on one side of it, unresolved when it straddles it."),
    Term("attention backend, selector", (), "the class that runs a layer's attention (FLASH_ATTN, FLASHINFER, ...); "
         "at engine start the selector takes the first of the GPU's priority list whose `validate_configuration` "
         "does not refuse."),
    Term("metadata builder, `build()`", (), "a backend's builder turns each batch into the metadata its kernels "
         "read, on the host."),
    Term("KV cache, FP8", (), "the keys and values so far, in pages; `kv_cache_dtype=\"fp8\"` stores them in 8 bits."),
    Term("step, hunk", (), "a step is a few hunks: exact text replacements in vLLM 0.22.1's FlashInfer backend, each "
         "with its why."),
    Term("XQA", (r"\bXQA\b",), "FlashInfer's decode kernel from TensorRT-LLM: it reads vLLM's block table itself, "
         "with no `plan()`."),
    Term("#48167 (a bare number)", (r"(?<!PR )#\d{4,}",), "a vLLM pull request (PR) by its number on GitHub, "
         "vllm-project/vllm: PR #43081 is the change this tutorial rebuilds (steps 1-4); #48167 is upstream's later "
         "fix of FlashInfer's CUDA-graph claim (step 5)."),
)


def _enum_docstrings(enum) -> dict[str, str]:
    """The string literal under each member of a vLLM enum: its docstring in vLLM's source."""
    import ast
    import inspect

    body = ast.parse(inspect.getsource(enum)).body[0].body
    docs = {}
    for statement, following in zip(body, body[1:]):
        if isinstance(statement, ast.Assign) and isinstance(following, ast.Expr) and isinstance(following.value,
                                                                                                 ast.Constant):
            docs[statement.targets[0].id] = " ".join(str(following.value.value).split())
    return docs


def _graph_terms() -> tuple[Term, Term]:
    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.attention.backend import AttentionCGSupport

    docs = _enum_docstrings(AttentionCGSupport)
    claims = "; ".join(f"`{c.name}`: \"{docs.get(c.name, '')}\"" for c in AttentionCGSupport)
    run = {"NONE": "eager", "PIECEWISE": "piecewise", "FULL": "full"}
    modes = "; ".join(f"`{m.name}`: {run[m.decode_mode().name]} / {run[m.mixed_mode().name]}" for m in CUDAGraphMode)
    return (
        Term("`CUDAGraphMode` (`PIECEWISE`, `FULL_AND_PIECEWISE`)", (r"\bPIECEWISE\b", r"FULL_AND_PIECEWISE",
                                                                    r"CUDA graph", r"CUDA-graph"),
             "a CUDA graph records a step's GPU kernels once and replays them, without launching each: *full* with "
             "attention captured too, *piecewise* with attention run eagerly between captured pieces. vLLM's engine "
             f"mode says which, for uniform decode batches / other batches: {modes}.",
             f"{CUDAGraphMode.__module__}.CUDAGraphMode"),
        Term("`AttentionCGSupport` (`UNIFORM_BATCH`, `UNIFORM_SINGLE_TOKEN_DECODE`)",
             (r"UNIFORM_BATCH", r"UNIFORM_SINGLE_TOKEN_DECODE", r"AttentionCGSupport"),
             "a metadata builder's claim (`get_cudagraph_support()`): which batches a full graph of its attention "
             f"may hold. vLLM's docstrings: {claims}.", f"{AttentionCGSupport.__module__}.AttentionCGSupport"),
    )


def glossary() -> list[Term]:
    """Every term, in the order the glossary shows them (imports vLLM's enums)."""
    gpus = ", ".join(f"SM {sm(c)} {name}" for c, name in GPU_NAMES.items())
    written = [Term(t.term, t.patterns, t.definition.format(gpus=gpus)) for t in _WRITTEN]
    return [*written, *_graph_terms(), *_MEASURES]


def glossary_table(terms: list[Term] | None = None) -> str:
    """Markdown: one row per term."""
    rows = [f"| {t.term} | {t.definition.replace('|', '/')} |" for t in (terms or glossary())]
    return "\n".join(["| word | what it means here |", "|---|---|", *rows])
