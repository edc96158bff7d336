"""Step 3 - a separate non-causal prefill wrapper, planned with `causal=False`.

`BatchPrefillWithPagedKVCacheWrapper.plan()` fixes causality for everything the wrapper runs until the
next plan, and the causal wrapper is shared by every causal layer group of the step. The draft therefore
gets its own wrapper, created on first use and never handed to a causal batch. `forward` checks that the
wrapper it runs was planned with the batch's causality. DCP (its context/new-token split assumes causal
new tokens) and the NVFP4 KV cache (served by trtllm-gen only) have no non-causal path: `build()` refuses
such a batch first thing, before it logs, plans or writes anything (as vLLM 0.24.0 does).
"""

from dflash_fi.steps import step2_causal_metadata as previous
from dflash_fi.steps.patching import Hunk

HUNKS: tuple[Hunk, ...] = previous.HUNKS + (
    Hunk(
        why="the builder owns a second, non-causal prefill wrapper",
        old='''        self._decode_wrapper = None  # Wrapper for decode (general shape)
''',
        new='''        self._decode_wrapper = None  # Wrapper for decode (general shape)
        # Never shared with causal batches: plan() fixes a wrapper's causality.
        self._noncausal_prefill_wrapper: BatchPrefillWithPagedKVCacheWrapper | None = None
''',
    ),
    Hunk(
        why="_get_prefill_wrapper(causal=False) returns the non-causal wrapper",
        old='''    def _get_prefill_wrapper(
        self,
    ) -> BatchPrefillWithPagedKVCacheWrapper | BatchDCPPrefillWrapper:
        if self._prefill_wrapper is None:
''',
        new='''    def _check_non_causal_supported(self) -> None:
        """Non-causal attention (a DFlash draft) runs on FlashInfer's native prefill only."""
        if self.use_dcp:
            raise NotImplementedError(
                "FlashInfer has no non-causal prefill with decode context "
                "parallelism (DCP); run the DFlash draft without DCP or on "
                "another attention backend."
            )
        if self.is_kvcache_nvfp4:
            raise NotImplementedError(
                "FlashInfer has no non-causal prefill for an NVFP4 KV cache; "
                "use kv_cache_dtype auto or fp8 for a DFlash draft."
            )

    def _get_prefill_wrapper(
        self,
        causal: bool = True,
    ) -> BatchPrefillWithPagedKVCacheWrapper | BatchDCPPrefillWrapper:
        if not causal:
            self._check_non_causal_supported()
            if self._noncausal_prefill_wrapper is None:
                self._noncausal_prefill_wrapper = BatchPrefillWithPagedKVCacheWrapper(
                    self._get_workspace_buffer(),
                    get_kv_cache_layout(),
                    backend="auto",
                )
            return self._noncausal_prefill_wrapper
        if self._prefill_wrapper is None:
''',
    ),
    Hunk(
        why="build() refuses an unsupported non-causal batch before touching anything",
        old='''        causal = common_attn_metadata.causal
        if causal:
''',
        new='''        causal = common_attn_metadata.causal
        if not causal:
            self._check_non_causal_supported()
        if causal:
''',
    ),
    Hunk(
        why="build() asks for the wrapper of the batch's causality",
        old='''                prefill_wrapper = self._get_prefill_wrapper()
''',
        new='''                prefill_wrapper = self._get_prefill_wrapper(causal=causal)
''',
    ),
    Hunk(
        why="the prefill wrapper is planned with the batch's causality",
        old='''                        head_dim_qk=self.head_dim,
                        page_size=self.page_size,
                        causal=True,
''',
        new='''                        head_dim_qk=self.head_dim,
                        page_size=self.page_size,
                        causal=causal,
''',
    ),
    Hunk(
        why="forward checks the planned causality against the metadata",
        old='''                    assert prefill_wrapper._causal
''',
        new='''                    assert prefill_wrapper._causal == attn_metadata.causal
''',
    ),
)
