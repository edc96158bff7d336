"""Step 9 - the DFlash draft on FlashInfer's XQA kernel: on SM 9.0 a draft block is planned by nobody.

After step 8 a draft step whose plan holds still costs the host the kept plan's key check, one Triton launch for
the exact page table, and `build()`'s Python. FlashInfer's XQA kernel (`flashinfer.xqa.xqa`, reached through
FlashInfer's own `xqa_batch_decode_with_kv_cache`, both in the pinned flashinfer-python 0.6.11.post2) needs none of
it: it reads vLLM's block table and the exact `seq_lens` on the GPU, and takes a uniform query length
(`q_seq_len`) with a packed mask for the queries of each request's last `q_seq_len` keys. Upstream took this route
on Hopper in vLLM #50439 (0.33.0's `_make_xqa_draft_block_mask`); this step is written for 0.22.1.

- **The route.** A non-causal batch of uniform blocks (every request `max_query_len` queries: one integer of
  `query_start_loc_cpu`, as at step 8) on a builder XQA serves gets `XQADraft` metadata: the block table, the
  exact `seq_lens` and the mask, sliced, with no `plan()`, no page table and no copy from the GPU.
  `forward()` hands them to XQA with the query and the cache as vLLM holds them.
- **The mask.** Per query row, bit j of 32-bit words is block position j (`applyMaskFromInput` in
  FlashInfer's `xqa/mha.cu`; keys before the block are always visible), stored as uint16 halves:
  `[num_reqs, block_len, 2 * cdiv(block_len, 32)]`. For a DFlash block every query sees the whole block, so
  every row is the same: made once per block length for `max_num_seqs` requests, sliced per batch.
- **Scales.** XQA multiplies `q_scale` by `1/sqrt(head_size)` itself (`qkScale` in `mha.cu`); FlashInfer's wrapper
  turns `bmm1_scale` (the layer's softmax scale) into that `q_scale`.
- **Workspace.** XQA's multi-block mode counts on semaphores that must be zero before first use; FlashInfer's
  wrapper takes them from the first 8 MiB of the workspace. The builder's own workspace is the FA2 wrappers'
  scratch, so XQA gets vLLM's zeroed `_get_trtllm_gen_workspace_buffer()`, which on SM 9.0 nothing else uses
  (TRTLLM runs on SM 10.x only).

What keeps step 8's path, each tested in `tests/lab/test_xqa.py`:

- **Other GPUs.** Only SM 9.0 takes XQA here (the RTX 4090, SM 8.9, is not an XQA GPU; Blackwell is left as it
  was).
- **Quantized KV caches (FP8).** With an FP8 cache on SM 9.0, XQA runs its Hopper FP8 kernel (`mha_sm90.cu`), whose
  speculative-decoding variant for short blocks (`q_seq_len * head_group_ratio <= 32`, `SWAP_AB`) builds a causal
  mask (`warpGrpApplyMask`) and ignores the one it is given. So the RTX 4090 + FP8 row and every FP8 draft stay on
  FA2. Only fp16 and bf16 caches of the model's dtype take XQA.
- **Head and page sizes XQA does not compile**: head sizes outside 16..256 or not a multiple of 16, pages other
  than 16, 32, 64 or 128 tokens (`gen_xqa_module` in FlashInfer's `jit/xqa.py`).
- **Ragged blocks.** The pinned XQA takes one `q_seq_len` for every request (its wrapper passes no `qCuSeqLens`),
  so a batch of uneven queries is planned as at step 8. DFlash never drafts one.
- **A sliding window or a logits soft cap.** XQA has no soft cap, and its window would act on a block whose
  queries share one position range. (Attention sinks need TRTLLM on every GPU before step 9 already.)
- **Batch-invariant mode** (`VLLM_BATCH_INVARIANT`). XQA splits a request's keys by the SM count and the
  batch size, with no fixed split size.
- DCP and NVFP4 are refused before either path, as at step 8.

CUDA graphs: no new claim. vLLM 0.22.1's drafter captures piecewise graphs only
(`SpecDecodeBaseProposer.initialize_cudagraph_keys`), so the draft's attention runs eagerly between graph
pieces, and `XQADraft` holds the batch's own `seq_lens` tensor, which DFlash makes afresh every step: a replay
would read a stale one. `get_cudagraph_support` keeps step 6's answer for a draft config.

The plan race (a wrapper planned again before its last `run()` ran): XQA plans nothing, so step 9's draft
cannot meet it; `docs/plan-race.md` says where steps 4, 7 and 8 stand, and the walkthrough's race checks count
it in the engines.
"""

from dflash_fi.steps import step8_plan_once as previous
from dflash_fi.steps.patching import Hunk

HUNKS: tuple[Hunk, ...] = previous.HUNKS + (
    Hunk(
        why="FlashInfer's XQA entry point for vLLM's paged cache",
        old='''from flashinfer.decode import fast_decode_plan, trtllm_batch_decode_with_kv_cache
''',
        new='''from flashinfer.decode import (
    fast_decode_plan,
    trtllm_batch_decode_with_kv_cache,
    xqa_batch_decode_with_kv_cache,
)
''',
    ),
    Hunk(
        why="what XQA compiles, and the packed mask of a DFlash block",
        old='''    return trtllm_gen_workspace_buffer
''',
        new='''    return trtllm_gen_workspace_buffer


# The page and head sizes flashinfer.jit.xqa.gen_xqa_module compiles.
XQA_PAGE_SIZES = (16, 32, 64, 128)
XQA_HEAD_SIZES = range(16, 257, 16)
# XQA's mask: per query, one bit per block position in 32-bit words (MaskType),
# read as 16-bit halves.
_XQA_MASK_WORD_BITS = torch.iinfo(torch.int32).bits
_XQA_MASK_HALF_BITS = torch.iinfo(torch.int16).bits


def _xqa_non_causal_block_mask(
    num_reqs: int, block_len: int, device: torch.device
) -> torch.Tensor:
    """XQA's packed mask of blocks whose queries each see the whole block:
    [num_reqs, block_len, 2 * cdiv(block_len, 32)] uint16, every bit of the
    block's positions set. Keys before the block are always visible."""
    first_bit = torch.arange(
        0, _XQA_MASK_WORD_BITS * cdiv(block_len, _XQA_MASK_WORD_BITS),
        _XQA_MASK_HALF_BITS,
    )
    halves = (1 << (block_len - first_bit).clamp(0, _XQA_MASK_HALF_BITS)) - 1
    # int16 to the GPU, then the same bits as uint16 (which has few kernels).
    mask = halves.to(torch.int16).expand(num_reqs, block_len, -1).contiguous()
    return mask.to(device).view(torch.uint16)
''',
    ),
    Hunk(
        why="the metadata of a draft step on XQA",
        old='''@dataclass
class FlashInferMetadata:
''',
        new='''@dataclass
class XQADraft:
    """A DFlash draft step on XQA (SM 9.0): nothing planned, the kernel reads
    the block table and the exact seq_lens on the GPU."""

    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    max_seq_len: int
    block_len: int
    mask: torch.Tensor
    """[num_reqs, block_len, 2 * cdiv(block_len, 32)] uint16: every query sees
    its whole block."""


@dataclass
class FlashInferMetadata:
''',
    ),
    Hunk(
        why="a draft step's prefill may be XQA's",
        old='''    prefill: FIPrefill | TRTLLMPrefill | None
''',
        new='''    prefill: FIPrefill | TRTLLMPrefill | XQADraft | None
''',
    ),
    Hunk(
        why="which builders XQA serves, and a draft step's metadata on it",
        old='''    def use_cascade_attention(self, *args, **kwargs) -> bool:
''',
        new='''    def _xqa_supports_draft_blocks(self) -> bool:
        """Whether XQA runs this builder's non-causal blocks correctly: SM 9.0; an
        fp16/bf16 cache (an FP8 one runs XQA's Hopper FP8 kernel, whose short-block
        speculative mask is causal); head and page sizes XQA compiles; no window
        or soft cap; not batch-invariant (XQA splits keys by SM count)."""
        return (
            current_platform.is_device_capability(90)
            and self.kv_cache_dtype in (torch.float16, torch.bfloat16)
            and self.page_size in XQA_PAGE_SIZES
            and self.head_dim in XQA_HEAD_SIZES
            and self.window_left == -1
            and not self.logits_soft_cap
            and not envs.VLLM_BATCH_INVARIANT
        )

    def _build_on_xqa(
        self, common_attn_metadata: CommonAttentionMetadata
    ) -> FlashInferMetadata:
        """A draft step of uniform blocks on XQA: nothing is planned or written."""
        num_reqs = common_attn_metadata.num_reqs
        num_tokens = common_attn_metadata.num_actual_tokens
        block_len = common_attn_metadata.max_query_len
        mask = self._xqa_block_masks.get(block_len)
        if mask is None:
            mask = _xqa_non_causal_block_mask(
                self._xqa_max_reqs, block_len, self.device
            )
            self._xqa_block_masks[block_len] = mask
        return FlashInferMetadata(
            num_actual_tokens=num_tokens,
            slot_mapping=common_attn_metadata.slot_mapping,
            q_data_type=self.q_data_type,
            num_decodes=0,
            num_decode_tokens=0,
            num_prefills=num_reqs,
            num_prefill_tokens=num_tokens,
            prefill=XQADraft(
                block_tables=common_attn_metadata.block_table_tensor[:num_reqs],
                seq_lens=common_attn_metadata.seq_lens[:num_reqs],
                max_seq_len=common_attn_metadata.max_seq_len,
                block_len=block_len,
                mask=mask[:num_reqs],
            ),
            decode=None,
            use_cascade=False,
            cascade_wrapper=None,
            causal=False,
        )

    def use_cascade_attention(self, *args, **kwargs) -> bool:
''',
    ),
    Hunk(
        why="the builder knows once whether XQA serves its draft blocks",
        old='''        if self.has_sinks and not can_use_trtllm:
''',
        new='''        # DFlash's draft blocks on XQA: no plan(), no page table (SM 9.0).
        self._draft_on_xqa = self._xqa_supports_draft_blocks()
        self._xqa_max_reqs = max_num_reqs
        self._xqa_block_masks: dict[int, torch.Tensor] = {}  # per block length
        if self.has_sinks and not can_use_trtllm:
''',
    ),
    Hunk(
        why="a draft step of uniform blocks goes to XQA before any plan is looked at",
        old='''            self._check_non_causal_supported()
            if self._noncausal_plan_holds(common_prefix_len, common_attn_metadata):
''',
        new='''            self._check_non_causal_supported()
            if (
                self._draft_on_xqa
                and common_prefix_len == 0
                and self._uniform_blocks(
                    common_attn_metadata.query_start_loc_cpu,
                    num_reqs,
                    common_attn_metadata.max_query_len,
                )
            ):
                return self._build_on_xqa(common_attn_metadata)
            if self._noncausal_plan_holds(common_prefix_len, common_attn_metadata):
''',
    ),
    Hunk(
        why="XQA runs the draft step",
        old='''            output.copy_(attn_metadata.cascade_wrapper.run(query, kv_cache))
            return output
''',
        new='''            output.copy_(attn_metadata.cascade_wrapper.run(query, kv_cache))
            return output

        if isinstance(attn_metadata.prefill, XQADraft):
            draft = attn_metadata.prefill
            assert is_strictly_contiguous(draft.block_tables)  # rows of its width
            xqa_batch_decode_with_kv_cache(
                query.contiguous(),  # XQA reads [num_reqs, block_len, heads] densely
                kv_cache,
                _get_trtllm_gen_workspace_buffer(),  # zeroed semaphores
                draft.block_tables,
                draft.seq_lens,
                draft.max_seq_len,
                bmm1_scale=self.bmm1_scale,
                bmm2_scale=self.bmm2_scale,
                out=output,
                # vLLM's kv_cache has NHD's shape whatever its memory layout
                # (get_kv_cache_shape); XQA follows its strides.
                kv_layout="NHD",
                q_len_per_req=draft.block_len,
                mask=draft.mask,
            )
            return output_padded
''',
    ),
)
