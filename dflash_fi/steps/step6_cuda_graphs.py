"""Step 6 - CUDA-graph prefill wrappers for causal uniform batches: the engine keeps its full decode graphs.

vLLM resolves one CUDA-graph mode for the whole engine from the weakest attention backend in it, draft
layers included: the model runner asks each backend's builder class with the engine's own config
(`GPUModelRunner._check_and_update_cudagraph_mode`). Without TRTLLM (every GPU before Blackwell),
FlashInfer claims only `UNIFORM_SINGLE_TOKEN_DECODE`: a spec-decode verify step, a uniform batch of
1 + num_speculative_tokens = 16 query tokens per request, runs on the prefill wrapper, which a captured
graph cannot replay after a new `plan()`. With speculative decoding that claim turns `FULL_AND_PIECEWISE`
into `PIECEWISE`, so a FlashInfer draft costs even a FLASH_ATTN target its full decode graphs.

FlashInfer's prefill wrapper has a CUDA-graph mode: a fixed batch size and persistent index buffers that
`plan()` fills and a captured `run()` reads. The decode path of the same builder already keeps one such
wrapper per captured batch size. This step does the same for prefill: every causal batch a full graph can
hold (all prefill, each request with the spec-decode query length, padding requests empty) gets the
wrapper of its batch size, planned into the builder's persistent buffers. Then FlashInfer honestly
supports `UNIFORM_BATCH` for causal attention, and the engine keeps `FULL_AND_PIECEWISE` with a FLASH_ATTN
or a FlashInfer target. DCP and NVFP4 prefill have no such wrapper and keep the claim of step 5.

DFlash draft blocks get no CUDA-graph wrapper, and a draft config (`use_non_causal`) keeps step 5's
claim: vLLM 0.22.1's drafter captures piecewise graphs only
(`SpecDecodeBaseProposer.initialize_cudagraph_keys`), so its attention always runs eagerly between graph
pieces, and a graph wrapper would only pad its grid. A later vLLM whose drafter honours its backend's
claim would then not try to replay a draft block either.

vLLM #48167 names this ("adopt the prefill wrapper's cuda-graph mode for draft attention") as its
follow-up; upstream has not done it.
"""

from dflash_fi.steps import step5_upstream_fixes as previous
from dflash_fi.steps.patching import Hunk

HUNKS: tuple[Hunk, ...] = previous.HUNKS + (
    Hunk(
        why="the builder keeps one CUDA-graph prefill wrapper per batch size",
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
            # Likewise one prefill wrapper for each batch size, for uniform
            # causal multi-token batches (spec-decode verify).
            self._prefill_wrappers_cudagraph: dict[
                int, BatchPrefillWithPagedKVCacheWrapper
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
        why="UNIFORM_BATCH for causal configs, wherever the CUDA-graph prefill wrappers exist",
        old='''        # Non-causal batches skip TRTLLM for FlashInfer's prefill wrapper, which a
        # captured graph cannot replay after a new plan() (#48167).
''',
        new='''        # Uniform causal multi-token batches off TRTLLM (spec verify) replay through
        # the CUDA-graph prefill wrappers; DCP and NVFP4 prefill have none. DFlash
        # draft blocks have none either: the drafter captures piecewise graphs only.
        if (
            vllm_config.parallel_config.decode_context_parallel_size == 1
            and vllm_config.cache_config.cache_dtype != "nvfp4"
            and not vllm_config.attention_config.use_non_causal
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
        causal: bool,
        num_decodes: int,
        num_prefill_tokens: int,
        qo_indptr_prefill_cpu: torch.Tensor,
    ) -> int | None:
        """Batch size of the CUDA-graph prefill wrapper for this batch, or None.

        Only causal batches a full cudagraph can hold: all prefill, every request
        with the uniform spec-decode query length (padding requests have none).
        """
        if (
            not causal
            or not self.enable_cuda_graph
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
        self, batch_size: int
    ) -> BatchPrefillWithPagedKVCacheWrapper:
        wrapper = self._prefill_wrappers_cudagraph.get(batch_size)
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
                backend="auto",
            )
            self._prefill_wrappers_cudagraph[batch_size] = wrapper
        return wrapper

    def _get_prefill_wrapper(
        self,
        causal: bool = True,
        cudagraph_batch_size: int | None = None,
    ) -> BatchPrefillWithPagedKVCacheWrapper | BatchDCPPrefillWrapper:
        if cudagraph_batch_size is not None:
            return self._get_prefill_wrapper_cudagraph(cudagraph_batch_size)
        if not causal:
''',
    ),
    Hunk(
        why="build() hands a graph-capturable causal batch its CUDA-graph prefill wrapper",
        old='''                prefill_wrapper = self._get_prefill_wrapper(causal=causal)
''',
        new='''                prefill_wrapper = self._get_prefill_wrapper(
                    causal=causal,
                    cudagraph_batch_size=self._prefill_cudagraph_batch_size(
                        causal, num_decodes, num_prefill_tokens, qo_indptr_prefill_cpu
                    ),
                )
''',
    ),
)
