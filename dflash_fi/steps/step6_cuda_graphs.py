"""Step 6 - CUDA-graph prefill wrappers: the engine keeps its full decode graphs with a FlashInfer draft.

vLLM resolves one CUDA-graph mode for the whole engine from the weakest attention backend in it, draft
layers included. Without TRTLLM (every GPU before Blackwell), FlashInfer claims only
`UNIFORM_SINGLE_TOKEN_DECODE`: a uniform batch of 16-token requests (a spec-decode verify step, a DFlash
draft block) runs on the prefill wrapper, which a captured graph cannot replay after a new `plan()`. With
speculative decoding that claim turns `FULL_AND_PIECEWISE` into `PIECEWISE`, so a FlashInfer draft costs
the FLASH_ATTN target its full decode graphs.

FlashInfer's prefill wrapper has a CUDA-graph mode: a fixed batch size and persistent index buffers that
`plan()` fills and a captured `run()` reads. The decode path of the same builder already keeps one such
wrapper per captured batch size. This step does the same for prefill: every batch a full graph can hold
(all prefill, each request with the spec-decode query length, padding requests empty) gets the wrapper
of its batch size and causality, planned into the builder's persistent buffers. Then FlashInfer honestly
supports `UNIFORM_BATCH`, for causal and non-causal batches alike, and the engine keeps
`FULL_AND_PIECEWISE`. DCP and NVFP4 prefill have no such wrapper and keep the claim of step 5.

vLLM #48167 names this ("adopt the prefill wrapper's cuda-graph mode for draft attention") as its
follow-up; upstream has not done it.
"""

from dflash_fi.steps import step5_upstream_fixes as previous
from dflash_fi.steps.patching import Hunk

HUNKS: tuple[Hunk, ...] = previous.HUNKS + (
    Hunk(
        why="the builder keeps one CUDA-graph prefill wrapper per batch size and causality",
        old='''        self.enable_cuda_graph = (
            self.compilation_config.cudagraph_mode.decode_mode() == CUDAGraphMode.FULL
        )
        if self.enable_cuda_graph:
            # For full cudagraph capture, one `decode_wrapper` for each batch
            # size is needed for FlashInfer.
            self._decode_wrappers_cudagraph: dict[
                int, BatchDecodeWithPagedKVCacheWrapper
            ] = {}
''',
        new='''        # Query tokens of each request in a uniform spec-decode batch (the batches
        # a full cudagraph holds): 1 + num_speculative_tokens.
        self._uniform_query_len = 1 + num_spec_tokens
        self.enable_cuda_graph = (
            self.compilation_config.cudagraph_mode.decode_mode() == CUDAGraphMode.FULL
        )
        if self.enable_cuda_graph:
            # For full cudagraph capture, one `decode_wrapper` for each batch
            # size is needed for FlashInfer.
            self._decode_wrappers_cudagraph: dict[
                int, BatchDecodeWithPagedKVCacheWrapper
            ] = {}
            # Likewise one prefill wrapper for each batch size and causality, for
            # uniform multi-token batches (spec verify, DFlash draft blocks).
            self._prefill_wrappers_cudagraph: dict[
                tuple[int, bool], BatchPrefillWithPagedKVCacheWrapper
            ] = {}
''',
    ),
    Hunk(
        why="a persistent qo_indptr for the CUDA-graph prefill wrappers",
        old='''        self.paged_kv_last_page_len = self._make_buffer(max_num_reqs)
''',
        new='''        self.paged_kv_last_page_len = self._make_buffer(max_num_reqs)
        self.prefill_qo_indptr = self._make_buffer(max_num_reqs + 1)
''',
    ),
    Hunk(
        why="UNIFORM_BATCH wherever the CUDA-graph prefill wrappers exist",
        old='''        # Non-causal batches skip TRTLLM for FlashInfer's prefill wrapper, which a
        # captured graph cannot replay after a new plan() (#48167).
''',
        new='''        # Uniform multi-token batches off TRTLLM (spec verify, DFlash draft blocks)
        # replay through the CUDA-graph prefill wrappers, of either causality.
        # DCP and NVFP4 prefill have none.
        if (
            vllm_config.parallel_config.decode_context_parallel_size == 1
            and vllm_config.cache_config.cache_dtype != "nvfp4"
        ):
            return AttentionCGSupport.UNIFORM_BATCH
        # Non-causal batches skip TRTLLM for FlashInfer's prefill wrapper, which a
        # captured graph cannot replay after a new plan() (#48167).
''',
    ),
    Hunk(
        why="which batches get a CUDA-graph prefill wrapper, and that wrapper",
        old='''    def _get_prefill_wrapper(
        self,
        causal: bool = True,
    ) -> BatchPrefillWithPagedKVCacheWrapper | BatchDCPPrefillWrapper:
        if not causal:
''',
        new='''    def _prefill_cudagraph_batch_size(
        self,
        num_decodes: int,
        num_prefill_tokens: int,
        qo_indptr_prefill_cpu: torch.Tensor,
    ) -> int | None:
        """Batch size of the CUDA-graph prefill wrapper for this batch, or None.

        Only batches a full cudagraph can hold: all prefill, every request with
        the uniform spec-decode query length (padding requests have none).
        """
        if (
            not self.enable_cuda_graph
            or self._uniform_query_len == 1
            or num_decodes > 0
            or self.use_dcp
            or self.is_kvcache_nvfp4
            or num_prefill_tokens > self._decode_cudagraph_max_bs
        ):
            return None
        query_lens = qo_indptr_prefill_cpu[1:] - qo_indptr_prefill_cpu[:-1]
        uniform = (query_lens == self._uniform_query_len) | (query_lens == 0)
        return len(query_lens) if bool(uniform.all()) else None

    def _get_prefill_wrapper_cudagraph(
        self, batch_size: int, causal: bool
    ) -> BatchPrefillWithPagedKVCacheWrapper:
        wrapper = self._prefill_wrappers_cudagraph.get((batch_size, causal))
        if wrapper is None:
            wrapper = BatchPrefillWithPagedKVCacheWrapper(
                self._get_workspace_buffer(),
                get_kv_cache_layout(),
                use_cuda_graph=True,
                qo_indptr_buf=self.prefill_qo_indptr.gpu[: batch_size + 1],
                paged_kv_indptr_buf=self.paged_kv_indptr.gpu[: batch_size + 1],
                paged_kv_indices_buf=self.paged_kv_indices.gpu,
                paged_kv_last_page_len_buf=self.paged_kv_last_page_len.gpu[
                    :batch_size
                ],
                backend="auto" if causal else NON_CAUSAL_PREFILL_BACKEND,
            )
            self._prefill_wrappers_cudagraph[(batch_size, causal)] = wrapper
        return wrapper

    def _get_prefill_wrapper(
        self,
        causal: bool = True,
        cudagraph_batch_size: int | None = None,
    ) -> BatchPrefillWithPagedKVCacheWrapper | BatchDCPPrefillWrapper:
        if cudagraph_batch_size is not None:
            return self._get_prefill_wrapper_cudagraph(cudagraph_batch_size, causal)
        if not causal:
''',
    ),
    Hunk(
        why="build() hands a graph-capturable batch its CUDA-graph prefill wrapper",
        old='''                prefill_wrapper = self._get_prefill_wrapper(causal=causal)
''',
        new='''                prefill_wrapper = self._get_prefill_wrapper(
                    causal=causal,
                    cudagraph_batch_size=self._prefill_cudagraph_batch_size(
                        num_decodes, num_prefill_tokens, qo_indptr_prefill_cpu
                    ),
                )
''',
    ),
)
