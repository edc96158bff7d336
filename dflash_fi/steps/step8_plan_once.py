"""Step 8 - plan once: a DFlash draft block's metadata costs the host about what FLASH_ATTN's does.

After step 7 a draft build no longer waits for the GPU, but it still plans every decoding step: `plan()`
(FlashInfer's host-side scheduling and a copy of the plan to the GPU), numpy over the bounds, and a chain of
small GPU ops for the exact page table (`cumsum`, `floor_divide`, `where`, copies), each launch costing host
time. FLASH_ATTN's draft build does none of that (`fast_build=True`: no ahead-of-time scheduling).

- **The plan holds while the batch's shape does.** A batch planned from host bounds does not split KV (step 7), and
  then FlashInfer's FA2 plan (`PrefillSplitQOKVIndptr` in `scheduler.cuh`) depends on the batch size and `qo_indptr`
  alone, besides what is fixed per builder (heads, head size, page size, dtypes, window, scale): each request is one
  KV chunk whatever its length (the lengths enter only as `max(kv_len, 1)`), and the kernel reads every request's
  exact length from the page table (`paged_kv_indptr`, `paged_kv_last_page_len`). Of the arguments the builder hands
  `plan()` for such a batch, the rest being the builder's own, `qo_indptr`, the batch size and
  `max_token_per_sequence` (the block's query length) can change from one draft step to the next, and the page table
  from the bounds (`paged_kv_indptr`, `paged_kv_last_page_len`, the length of `paged_kv_indices`) changes every
  step: KV unsplit, it changes no plan, and `run()` reads the builder's exact page table instead. The builder keeps
  the key of the non-causal wrapper's plan, (num_reqs, max_query_len), and a draft batch that matches it is not
  planned again (nor one with fewer requests, below): DFlash's blocks are 16 queries per request, so from step to
  step the contexts grow and the key stays. The key holds for uniform blocks only (every query max_query_len long,
  which one integer of `query_start_loc_cpu` tells), where it fixes `qo_indptr`: comparing the whole array instead
  (`np.array_equal` on its host copy) cost the host as much as the kernel launch
  (a build profile taken then, in git history). Any other plan of that wrapper (non-uniform queries, a non-causal
  batch with exact host lengths) clears it.
- **The plan holds while requests leave.** A request that leaves the batch keeps its row of the plan, empty: the
  builder sets the row's `qo_indptr` entries to the total (no queries, in the plan's own `_qo_indptr_buf`, and the
  total `run()` checks q's rows against, `_qo_indptr_last`; once per departure) and the page-table kernel gives it
  no pages (every step). FA2's kernel bounds every load and store of a request by its query length
  (`load_q_global_smem`, `write_o_reg_gmem` in `prefill.cuh`), so an empty row reads and writes nothing, provided it
  is one query tile: with several, a later tile would compute its KV range as if the row had queries. FA2's plan
  never tiles a uniform batch shorter than its packed query length (block length times query heads per KV head) when
  that is at most 64 (`FA2DetermineCtaTileQ` in `utils.cuh`): a 16-query DFlash block with up to 4 query heads per
  KV head; above that, a departure plans again. A request that joins (the batch outgrows the rows that still have
  queries) plans again, at the new size, so a plan never keeps more empty rows than requests have left since. Step 8
  as first landed planned again at every departure too, and the trained pair's requests finish at different steps:
  its draft builds at batch 8 and 32 cost the host more per step than the Qwen3-4B shape's at batch 32, whose
  requests all finish together. One wrapper serves every size: a cache
  of wrappers per batch size would bring each its own 8 MB integer workspace on the GPU and 8 MB of pinned host
  memory.
- **The exact page table in one launch.** A Triton kernel next to vLLM's `_copy_page_indices_kernel` writes
  `paged_kv_indptr`, `paged_kv_last_page_len` and `paged_kv_indices` from `seq_lens` and the block table, one
  program per row of the plan (each sums the pages of the rows before it; rows past the batch get none), into the
  builder's persistent GPU buffers. After its first launch the builder launches the compiled kernel itself: Triton's
  dispatch (binding the arguments, specializing on them, looking the kernel up) cost the host more than the launch
  in the profile taken before this hunk (`JITFunction.run` against
  the launcher), and the kernel is declared not to specialize on what changes between calls (`do_not_specialize`).
  The planned wrapper's `run()` reads those buffers (`_paged_kv_indptr_buf`, `_paged_kv_indices_buf`,
  `_paged_kv_last_page_len_buf`); its plan and its `_qo_indptr_buf` are plan()'s own and hold with the key. Step 7's
  copy of `seq_lens` into the wrapper's `_kv_lens_buffer` goes: FA2's `run()` never hands that buffer to its kernel
  (in FlashInfer's `prefill.py` only the trtllm-gen kernel reads it).
- **A short path through build().** A draft batch whose plan holds gets its metadata from that one launch and the
  few fields `forward()` reads. Everything else takes the general path: causal batches, non-causal batches with
  exact host lengths, and a new key (planned from the bounds as at step 7, its page table written by the same
  launch); DCP and NVFP4 are still refused before either path.
"""

from dflash_fi.steps import step7_host_overhead as previous
from dflash_fi.steps.patching import Hunk

HUNKS: tuple[Hunk, ...] = previous.HUNKS + (
    Hunk(
        why="the key of the non-causal wrapper's plan, while it holds, and the page table's kernel once compiled",
        old='''        self._noncausal_prefill_wrapper: BatchPrefillWithPagedKVCacheWrapper | None = None
''',
        new='''        self._noncausal_prefill_wrapper: BatchPrefillWithPagedKVCacheWrapper | None = None
        # (num_reqs, max_query_len) of the non-causal wrapper's plan, if it was planned
        # from host bounds for uniform query blocks: draft steps that match reuse it.
        # Requests that leave keep their rows of the plan, empty; num_reqs counts
        # the rest, and _noncausal_plan_rows all of them.
        self._noncausal_plan_key: tuple[int, int] | None = None
        self._noncausal_plan_rows = 0
        self._fill_paged_kv_compiled = None  # _fill_paged_kv_kernel, once launched
''',
    ),
    Hunk(
        why="the Triton kernel of the exact page table",
        old='''            page_indices + start_idx + i + offset,
            block_ids,
            mask=i + offset < num_blocks,
        )
''',
        new='''            page_indices + start_idx + i + offset,
            block_ids,
            mask=i + offset < num_blocks,
        )


@triton.jit(
    do_not_specialize=["block_table_stride", "num_reqs"],
    do_not_specialize_on_alignment=["seq_lens", "block_table"],
)
def _fill_paged_kv_kernel(
    paged_kv_indptr,
    paged_kv_indices,
    paged_kv_last_page_len,
    seq_lens,
    block_table,
    block_table_stride,
    num_reqs,
    PAGE_SIZE: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # FlashInfer's page table of seq_lens, one program per row; rows from num_reqs
    # on (requests that left a batch whose plan holds) get no pages.
    req_idx = tl.program_id(0)
    offset = tl.arange(0, BLOCK_SIZE)
    # This row's first page: the pages of the requests before it.
    num_pages_before = tl.full([BLOCK_SIZE], 0, dtype=tl.int32)
    for i in tl.range(0, req_idx, BLOCK_SIZE):
        before = (i + offset < req_idx) & (i + offset < num_reqs)
        lens = tl.load(seq_lens + i + offset, mask=before, other=0)
        num_pages_before += (lens.to(tl.int32) + PAGE_SIZE - 1) // PAGE_SIZE
    start_idx = tl.sum(num_pages_before)
    seq_len = tl.load(seq_lens + req_idx, mask=req_idx < num_reqs, other=0).to(tl.int32)
    num_blocks = (seq_len + PAGE_SIZE - 1) // PAGE_SIZE
    if req_idx == 0:
        tl.store(paged_kv_indptr, 0)
    tl.store(paged_kv_indptr + req_idx + 1, start_idx + num_blocks)
    tl.store(
        paged_kv_last_page_len + req_idx,
        tl.where(seq_len > 0, (seq_len - 1) % PAGE_SIZE + 1, 0),
    )

    row_ptr = block_table + req_idx * block_table_stride
    for i in tl.range(0, num_blocks, BLOCK_SIZE):
        block_ids = tl.load(row_ptr + i + offset, mask=i + offset < num_blocks)
        tl.store(
            paged_kv_indices + start_idx + i + offset,
            block_ids,
            mask=i + offset < num_blocks,
        )
''',
    ),
    Hunk(
        why="the exact page table written on the GPU in one kernel launch, without Triton's dispatch once compiled",
        old='''        seq_lens = seq_lens[:num_reqs]
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
''',
        new='''        self._fill_exact_paged_kv(seq_lens, block_table_tensor, num_reqs)
        return self.paged_kv_indices.gpu[: self.paged_kv_indptr.np[num_reqs]]

    def _fill_exact_paged_kv(
        self,
        seq_lens: torch.Tensor,
        block_table_tensor: torch.Tensor,
        num_reqs: int,
        num_rows: int | None = None,
    ) -> None:
        """paged_kv_indptr, paged_kv_indices and paged_kv_last_page_len of the
        exact seq_lens, written into the GPU buffers in one launch; rows from
        num_reqs up to num_rows (requests that left a held plan) get no pages."""
        args = (
            self.paged_kv_indptr.gpu,
            self.paged_kv_indices.gpu,
            self.paged_kv_last_page_len.gpu,
            seq_lens,
            block_table_tensor,
            block_table_tensor.stride(0),
            num_reqs,
        )
        grid = (num_rows or num_reqs, 1, 1)
        if self._fill_paged_kv_compiled is not None:
            # Triton's dispatch (binding, specialization, cache lookup) costs the host
            # more than the launch; nothing it would specialize on changes between
            # calls (the kernel does not specialize its inputs), so launch directly.
            self._fill_paged_kv_compiled[grid](*args, self.page_size, 1024)
            return
        self._fill_paged_kv_compiled = _fill_paged_kv_kernel[grid](
            *args, PAGE_SIZE=self.page_size, BLOCK_SIZE=1024
        )
''',
    ),
    Hunk(
        why="whether a draft batch's plan holds: uniform blocks, its key, and rows emptied within one FA2 query tile",
        old='''    def use_cascade_attention(self, *args, **kwargs) -> bool:
''',
        new='''    @staticmethod
    def _uniform_blocks(
        query_start_loc_cpu: torch.Tensor, num_reqs: int, max_query_len: int
    ) -> bool:
        """Every query is max_query_len long (DFlash's blocks): none is longer, so
        the total says so, and qo_indptr is arange(num_reqs + 1) * max_query_len."""
        return int(query_start_loc_cpu[num_reqs]) == num_reqs * max_query_len

    def _one_query_tile(self, max_query_len: int) -> bool:
        """Whether FA2's plan makes each uniform block of max_query_len queries one
        query tile: it never tiles shorter than the packed query length when that
        is at most 64 (FA2DetermineCtaTileQ in FlashInfer's utils.cuh)."""
        return max_query_len * (self.num_qo_heads // self.num_kv_heads) <= 64

    def _noncausal_plan_holds(
        self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata
    ) -> bool:
        """Whether this batch would be planned from host bounds exactly as the
        non-causal wrapper's plan was: without split KV, FA2's plan does not
        depend on the KV lengths, only on the key (with uniform blocks, the key
        fixes qo_indptr). A batch that lost requests keeps the plan, their rows
        empty, where an empty row is one query tile, which reads and writes
        nothing; a later tile of it would take a KV range as if it had queries."""
        num_reqs = common_attn_metadata.num_reqs
        max_query_len = common_attn_metadata.max_query_len
        key = self._noncausal_plan_key
        return (
            key is not None
            and key[1] == max_query_len
            and (
                key[0] == num_reqs
                or (key[0] > num_reqs and self._one_query_tile(max_query_len))
            )
            and common_prefix_len == 0
            and common_attn_metadata._seq_lens_cpu is None
            and common_attn_metadata.seq_lens_cpu_upper_bound is not None
            and self._uniform_blocks(
                common_attn_metadata.query_start_loc_cpu, num_reqs, max_query_len
            )
        )

    def use_cascade_attention(self, *args, **kwargs) -> bool:
''',
    ),
    Hunk(
        why="a held plan's metadata: rows of requests that left are emptied, the page table written",
        old='''    def use_cascade_attention(self, *args, **kwargs) -> bool:
''',
        new='''    def _build_on_noncausal_plan(
        self, common_attn_metadata: CommonAttentionMetadata
    ) -> FlashInferMetadata:
        """A draft step whose plan holds: only the exact page table is written."""
        num_reqs = common_attn_metadata.num_reqs
        num_tokens = common_attn_metadata.num_actual_tokens
        assert self._noncausal_prefill_wrapper is not None
        assert self._noncausal_plan_key is not None
        rows_with_queries, max_query_len = self._noncausal_plan_key
        if num_reqs < rows_with_queries:
            # Requests left: the plan's rows past num_reqs keep no queries (and,
            # below, no pages). A row is a position in the batch, not a request.
            wrapper = self._noncausal_prefill_wrapper
            wrapper._qo_indptr_buf[num_reqs + 1 :].fill_(num_tokens)
            wrapper._qo_indptr_last = num_tokens  # run() checks q's rows against it
            self._noncausal_plan_key = (num_reqs, max_query_len)
        self._fill_exact_paged_kv(
            common_attn_metadata.seq_lens,
            common_attn_metadata.block_table_tensor,
            num_reqs,
            self._noncausal_plan_rows,
        )
        return FlashInferMetadata(
            num_actual_tokens=num_tokens,
            slot_mapping=common_attn_metadata.slot_mapping,
            q_data_type=self.q_data_type,
            num_decodes=0,
            num_decode_tokens=0,
            num_prefills=num_reqs,
            num_prefill_tokens=num_tokens,
            prefill=FIPrefill(wrapper=self._noncausal_prefill_wrapper),
            decode=None,
            use_cascade=False,
            cascade_wrapper=None,
            causal=False,
        )

    def use_cascade_attention(self, *args, **kwargs) -> bool:
''',
    ),
    Hunk(
        why="run() reads the builder's page table on reuse too, and the plan's key is kept",
        old='''                    if plan_from_bounds:
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
''',
        new='''                    if plan_from_bounds:
                        # plan() copied the bounds to the GPU; run() reads the exact
                        # page table instead, which every later build that reuses this
                        # plan rewrites in the same buffers. (FA2's run() never reads
                        # _kv_lens_buffer; only trtllm-gen's does.)
                        prefill_wrapper._paged_kv_indptr_buf = self.paged_kv_indptr.gpu[
                            : num_reqs + 1
                        ]
                        prefill_wrapper._paged_kv_indices_buf = (
                            self.paged_kv_indices.gpu
                        )
                        prefill_wrapper._paged_kv_last_page_len_buf = (
                            self.paged_kv_last_page_len.gpu[:num_reqs]
                        )
                    if not causal:
                        max_query_len = common_attn_metadata.max_query_len
                        self._noncausal_plan_key = (
                            (num_reqs, max_query_len)
                            if plan_from_bounds
                            and self._uniform_blocks(qo_indptr_cpu, num_reqs, max_query_len)
                            else None
                        )
                        self._noncausal_plan_rows = num_reqs
''',
    ),
    Hunk(
        why="a draft step whose plan holds takes the short path",
        old='''        if not causal:
            self._check_non_causal_supported()
        if causal:
            num_decodes, num_prefills, num_decode_tokens, num_prefill_tokens = (
''',
        new='''        if not causal:
            self._check_non_causal_supported()
            if self._noncausal_plan_holds(common_prefix_len, common_attn_metadata):
                return self._build_on_noncausal_plan(common_attn_metadata)
        if causal:
            num_decodes, num_prefills, num_decode_tokens, num_prefill_tokens = (
''',
    ),
)
