"""Step 5 - what upstream fixed next, and the faster kernel for DFlash blocks.

vLLM #48167 (after PR #43081): a non-causal batch never runs on TRTLLM, so it runs FlashInfer's prefill
wrapper, which a captured CUDA graph cannot replay after a new `plan()`. `get_cudagraph_support` therefore
must not claim `UNIFORM_BATCH` for non-causal attention, even where TRTLLM would allow it for causal
batches (Blackwell). vLLM asks with the config of the layers in question: DFlash's draft config says
`use_non_causal=True`.

The kernel: PR #43081's non-causal wrapper uses `backend="auto"`, which is FA3 on SM 9.0 and FA2 on every
other GPU FlashInfer runs here (an RTX 4090 has only FA2). A DFlash draft request brings one block of
1 + num_speculative_tokens = 16 query tokens; for queries that short FA2 is the faster kernel on SM 9.0
(`dflash-fi bench kernels`, notebook 09), and FlashInfer's FA3 has no kernel for the
bf16 queries vLLM's FlashInfer backend keeps on an FP8 KV cache (`flashinfer.utils.is_fa3_backend_supported`).
So the non-causal wrapper asks for FA2 on every architecture.
"""

from dflash_fi.steps import step4_trtllm_gating as previous
from dflash_fi.steps.patching import Hunk

HUNKS: tuple[Hunk, ...] = previous.HUNKS + (
    Hunk(
        why="the non-causal prefill kernel for DFlash blocks, chosen by measurement",
        old='''logger = init_logger(__name__)
''',
        new='''logger = init_logger(__name__)

# DFlash draft requests are one block of 1 + num_speculative_tokens queries. For queries
# that short FA2 beats FA3 ("auto" on SM 9.0), and FA3 does not build for an FP8 KV
# cache; every other architecture gets FA2 from "auto" anyway.
NON_CAUSAL_PREFILL_BACKEND = "fa2"
''',
    ),
    Hunk(
        why="the non-causal wrapper runs FA2",
        old='''                self._noncausal_prefill_wrapper = BatchPrefillWithPagedKVCacheWrapper(
                    self._get_workspace_buffer(),
                    get_kv_cache_layout(),
                    backend="auto",
                )
''',
        new='''                self._noncausal_prefill_wrapper = BatchPrefillWithPagedKVCacheWrapper(
                    self._get_workspace_buffer(),
                    get_kv_cache_layout(),
                    backend=NON_CAUSAL_PREFILL_BACKEND,
                )
''',
    ),
    Hunk(
        why="#48167: no UNIFORM_BATCH claim for non-causal attention",
        old='''        if has_trtllm_support:
            return AttentionCGSupport.UNIFORM_BATCH
        else:
            return AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
''',
        new='''        # Non-causal batches skip TRTLLM for FlashInfer's prefill wrapper, which a
        # captured graph cannot replay after a new plan() (#48167).
        if has_trtllm_support and not vllm_config.attention_config.use_non_causal:
            return AttentionCGSupport.UNIFORM_BATCH
        else:
            return AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
''',
    ),
)
