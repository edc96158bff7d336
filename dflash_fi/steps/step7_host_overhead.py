"""Step 7 - no host overhead: the FlashInfer draft plans from host-side bounds and builds nothing nobody reads.

With step 6 the engine keeps its full CUDA graphs, but each decoding step still pays for FlashInfer metadata
on the host where the FLASH_ATTN draft pays almost nothing (`dflash-fi bench e2e`):

- **A copy that waits for the GPU.** DFlash builds its draft metadata with no host copy of the sequence
  lengths (`_seq_lens_cpu=None`), only `seq_lens_cpu_upper_bound` (it cannot know on the host how many drafts
  the target rejected). The builder read `common_attn_metadata.seq_lens_cpu`, which copies `seq_lens` from
  the GPU and so waits for all queued GPU work, the target's whole forward under full graphs. Now a
  non-causal batch without host lengths plans from the bound: `plan()` only schedules work from the lengths
  it is given, and the kernel reads each request's exact length from the page-table buffers on the GPU
  (`paged_kv_indptr`, `paged_kv_last_page_len`), which the builder now fills on the GPU from `seq_lens`.
  Such a batch does not split a request's KV into chunks: the kernel sizes its partial outputs from the
  exact length and the merge would follow the bound's chunks (measured on the GPU: with split KV, a bound
  one page over a chunk boundary gave wrong attention; `tests/gpu`). A draft block is 16 queries per request,
  so the batches that lose split KV are the smallest with the longest contexts.
- **A build nobody reads.** The model runner builds metadata for every attention group on every step.
  With a FLASH_ATTN target, DFlash's FlashInfer draft layers form a group of their own, so each target step
  planned FlashInfer for layers that only ever run on the drafter's own (non-causal) builds. A builder
  whose layers are all DFlash draft layers (built under the draft config, `use_non_causal=True`) now
  returns metadata for such a causal batch without planning it; a forward that read it would fail loudly.
- **A cheaper plan().** A draft block's query length is known on the host (`max_query_len`): handed to
  `plan()`, it spares FlashInfer's Python `max()` over the query lengths.

Upstream's open vLLM #57352 plans FlashInfer from host bounds too; nothing here is taken from it.
"""

from dflash_fi.steps import step6_cuda_graphs as previous
from dflash_fi.steps.patching import Hunk

HUNKS: tuple[Hunk, ...] = previous.HUNKS + (
    Hunk(
        why="the names the builder needs to look at its layers",
        old='''from vllm.config import (
    CUDAGraphMode,
    VllmConfig,
    get_current_vllm_config_or_none,
)
''',
        new='''from vllm.config import (
    CUDAGraphMode,
    VllmConfig,
    get_current_vllm_config_or_none,
    get_layers_from_vllm_config,
)
''',
    ),
    Hunk(
        why="the attention layer base class, to find the builder's layers",
        old='''from vllm.logger import init_logger
''',
        new='''from vllm.logger import init_logger
from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
''',
    ),
    Hunk(
        why="an attention layer knows whether it is a DFlash draft layer",
        old='''        self.support_trtllm_attn = can_use_trtllm_attention(num_heads, num_kv_heads)
        vllm_config = get_current_vllm_config_or_none()
''',
        new='''        self.support_trtllm_attn = can_use_trtllm_attention(num_heads, num_kv_heads)
        vllm_config = get_current_vllm_config_or_none()
        # DFlash builds its draft layers under its draft config (use_non_causal):
        # they run only on the drafter's own, non-causal attention metadata.
        self.non_causal = (
            vllm_config is not None and vllm_config.attention_config.use_non_causal
        )
''',
    ),
    Hunk(
        why="the builder knows whether all its layers are DFlash draft layers",
        old='''        self.has_sinks = self.global_hyperparameters.has_sinks
''',
        new='''        self.has_sinks = self.global_hyperparameters.has_sinks
        # The model runner builds metadata for every attention group on every
        # step; a group of DFlash draft layers reads only the drafter's builds.
        layers = get_layers_from_vllm_config(
            vllm_config,
            AttentionLayerBase,  # type: ignore[type-abstract]
            layer_names,
        )
        self._draft_layers_only = bool(layers) and all(
            getattr(layer.impl, "non_causal", False) for layer in layers.values()
        )
''',
    ),
    Hunk(
        why="the metadata of a build nobody reads: no plan, and loud if it is ever read",
        old='''    def _check_non_causal_supported(self) -> None:
''',
        new='''    def _unread_metadata(
        self, common_attn_metadata: CommonAttentionMetadata
    ) -> FlashInferMetadata:
        """A target step's metadata for DFlash draft layers, which never read it.

        Nothing is planned. Its prefill has no wrapper, so a forward that read
        it would fail on that, not compute with a stale plan.
        """
        return FlashInferMetadata(
            num_actual_tokens=common_attn_metadata.num_actual_tokens,
            slot_mapping=common_attn_metadata.slot_mapping,
            q_data_type=self.q_data_type,
            num_decodes=0,
            num_decode_tokens=0,
            num_prefills=common_attn_metadata.num_reqs,
            num_prefill_tokens=common_attn_metadata.num_actual_tokens,
            prefill=FIPrefill(wrapper=None),  # type: ignore[arg-type]
            decode=None,
            use_cascade=False,
            cascade_wrapper=None,
            causal=True,
        )

    def _check_non_causal_supported(self) -> None:
''',
    ),
    Hunk(
        why="the page-table buffers filled from host-side bounds (host) and exact lengths (GPU)",
        old='''    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> FlashInferMetadata:
''',
        new='''    def _compute_flashinfer_kv_metadata_from_bounds(
        self,
        bound_num_blocks_np: np.ndarray,
        bound_seq_lens_np: np.ndarray,
        seq_lens: torch.Tensor,
        block_table_tensor: torch.Tensor,
        num_reqs: int,
        page_size: int,
    ) -> torch.Tensor:
        """_compute_flashinfer_kv_metadata from host-side upper bounds on seq_lens.

        The CPU buffers, which plan() schedules from, hold the bounds. The GPU
        buffers, which the kernel reads, get the exact layout, computed on the
        GPU from `seq_lens`: nothing waits for the GPU. Returns paged_kv_indices,
        sized by the bounds; the kernel reads only the exact pages.
        """
        np.cumsum(
            bound_num_blocks_np,
            dtype=np.int32,
            out=self.paged_kv_indptr.np[1 : num_reqs + 1],
        )
        bound_last_page_len_np = bound_seq_lens_np % page_size
        self.paged_kv_last_page_len.np[:num_reqs] = np.where(
            (bound_last_page_len_np == 0) & (bound_seq_lens_np != 0),
            page_size,
            bound_last_page_len_np,
        )

        seq_lens = seq_lens[:num_reqs]
        paged_kv_indptr = self.paged_kv_indptr.gpu[: num_reqs + 1]
        paged_kv_indptr[:1] = 0
        torch.cumsum(
            (seq_lens + page_size - 1) // page_size,
            dim=0,
            dtype=torch.int32,
            out=paged_kv_indptr[1:],
        )
        torch.where(
            seq_lens > 0,
            (seq_lens - 1) % page_size + 1,
            seq_lens,  # 0 where it is not > 0
            out=self.paged_kv_last_page_len.gpu[:num_reqs],
        )
        paged_kv_indices = self.paged_kv_indices.gpu[
            : self.paged_kv_indptr.np[num_reqs]
        ]
        _copy_page_indices_kernel[(num_reqs,)](
            paged_kv_indices,
            block_table_tensor,
            block_table_tensor.stride(0),
            paged_kv_indptr,
            BLOCK_SIZE=1024,
        )
        return paged_kv_indices

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> FlashInferMetadata:
''',
    ),
    Hunk(
        why="a target step's build for DFlash draft layers is skipped",
        old='''        causal = common_attn_metadata.causal
        if not causal:
            self._check_non_causal_supported()
''',
        new='''        causal = common_attn_metadata.causal
        if causal and self._draft_layers_only:
            return self._unread_metadata(common_attn_metadata)
        if not causal:
            self._check_non_causal_supported()
''',
    ),
    Hunk(
        why="a draft batch without host sequence lengths plans from their upper bound",
        old='''        needs_seq_lens_cpu = self.use_dcp or use_cascade or not all_uses_trtllm
        seq_lens_cpu = common_attn_metadata.seq_lens_cpu if needs_seq_lens_cpu else None
''',
        new='''        needs_seq_lens_cpu = self.use_dcp or use_cascade or not all_uses_trtllm
        # DFlash's draft metadata has no host copy of seq_lens, only an upper
        # bound; reading seq_lens_cpu would copy them from the GPU and wait for it.
        plan_from_bounds = (
            needs_seq_lens_cpu
            and not causal
            and common_attn_metadata._seq_lens_cpu is None
            and common_attn_metadata.seq_lens_cpu_upper_bound is not None
        )
        if plan_from_bounds:
            seq_lens_cpu = common_attn_metadata.seq_lens_cpu_upper_bound[:num_reqs]
        else:
            seq_lens_cpu = (
                common_attn_metadata.seq_lens_cpu if needs_seq_lens_cpu else None
            )
''',
    ),
    Hunk(
        why="the page-table buffers of a bound-planned batch",
        old='''            paged_kv_indices = self._compute_flashinfer_kv_metadata(
                num_blocks_np,
                seq_lens_np,
                block_table_tensor,
                num_reqs,
                page_size,
            )
''',
        new='''            if plan_from_bounds:
                paged_kv_indices = self._compute_flashinfer_kv_metadata_from_bounds(
                    num_blocks_np,
                    seq_lens_np,
                    seq_lens,
                    block_table_tensor,
                    num_reqs,
                    page_size,
                )
            else:
                paged_kv_indices = self._compute_flashinfer_kv_metadata(
                    num_blocks_np,
                    seq_lens_np,
                    block_table_tensor,
                    num_reqs,
                    page_size,
                )
''',
    ),
    Hunk(
        why="plan() is told the draft's query length, and run() reads the exact page table",
        old='''                        fixed_split_size=self.prefill_fixed_split_size,
                        disable_split_kv=self.disable_split_kv,
                    )
                attn_metadata.prefill = FIPrefill(wrapper=prefill_wrapper)
''',
        new='''                        fixed_split_size=self.prefill_fixed_split_size,
                        # A bound can add a KV chunk that the exact length lacks, and the
                        # kernel lays out its partial outputs by the exact length: planned
                        # from bounds, each request's KV is not split.
                        disable_split_kv=self.disable_split_kv or plan_from_bounds,
                        # Known on the host for a draft block; spares plan() a max().
                        max_token_per_sequence=(
                            None if causal else common_attn_metadata.max_query_len
                        ),
                    )
                    if plan_from_bounds:
                        # plan() copied the bounds to the GPU; run() reads the exact
                        # page table (and lengths) instead.
                        prefill_wrapper._paged_kv_indptr_buf = self.paged_kv_indptr.gpu[
                            : num_reqs + 1
                        ]
                        prefill_wrapper._paged_kv_last_page_len_buf = (
                            self.paged_kv_last_page_len.gpu[:num_reqs]
                        )
                        prefill_wrapper._kv_lens_buffer[:num_reqs].copy_(
                            seq_lens[:num_reqs], non_blocking=True
                        )
                attn_metadata.prefill = FIPrefill(wrapper=prefill_wrapper)
''',
    ),
    Hunk(
        why="a forward that reads unplanned metadata says so",
        old='''                prefill_wrapper = attn_metadata.prefill.wrapper
                assert prefill_wrapper is not None
''',
        new='''                prefill_wrapper = attn_metadata.prefill.wrapper
                assert prefill_wrapper is not None, (
                    "FlashInfer metadata of a target step, built for DFlash draft "
                    "layers, is never planned and must not be read"
                )
''',
    ),
)
