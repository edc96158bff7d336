# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags
#     notebook_metadata_filter: kernelspec,jupytext
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 7 · Plan once: step 8
#
# After step 7 (notebook 6) a FlashInfer draft build waits for nothing, but still plans every draft step: `plan()`
# (scheduling on the host, a copy of the schedule to the GPU), numpy over the bounds, and a chain of small GPU
# operations for the page table, each launch costing the host time. The FLASH_ATTN draft's build does none of that
# (`fast_build=True`: no ahead-of-time schedule). Step 8 plans a draft batch once and keeps the plan while the contexts
# grow and requests leave, until the batch outgrows it; notebook 8 measures what it saves.

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, show, show_hunks, skip, verdict

# The engines of "On the GPU" start now, in the background: each takes most of a minute.
live_runs = [P.FLASH_ATTN_GRAPHS, *(P.graphs_run(step) for step in (7, 8)), P.graphs_fi_target_run(8)]
session = setup("07_plan_once", live=live_runs)

# %%
from dflash_fi.figures.path import LANDS, STAGES

landed = [name for key, name, *_ in STAGES if key in LANDS[8]]
verdict(f"on notebook 1's picture of a draft layer's path, step 8 lands in {', '.join(landed)}: not in the selector or "
        "the attention kernel.")

# %% [markdown]
# ## Why a plan can hold
#
# Unsplit (step 7), the schedule no longer depends on the lengths. Where `plan()` for FlashInfer's fa2 kernel reads
# them:

# %%
from dflash_fi.lab.flashinfer_source import FA2_SCHEDULE_EXCERPT
from dflash_fi.notebook import show_flashinfer_source

show_flashinfer_source(*FA2_SCHEDULE_EXCERPT)

# %% [markdown]
# A length only counts its request's chunks; unsplit, every request is one chunk. Left are the batch size and
# `qo_indptr` (and what each builder fixes: heads, page size, dtypes, ...). A DFlash draft block is 16 queries for
# every request, so `qo_indptr` follows from the batch size and the block's length, and one integer of it, the
# total, tells that a batch is made of such blocks. The batch size and the block's length are the key of a plan
# (`_noncausal_plan_key`); a batch that matches it, or has fewer requests (next section), keeps the plan:

# %%
show_hunks(8, only=[1, 4], context=0, joined=True)

# %% [markdown]
# Comparing the whole `qo_indptr` instead (with numpy, on its host copy) cost the host as much as launching the page
# table's kernel, in a profile of the builds (`runs/nvidia-h200.build-profile-31f293d.json`). A batch of uneven
# queries keeps no key and is planned every time, as at step 7; DFlash never drafts one. A draft step that matches the
# key takes a short path through `build()`:

# %%
show_hunks(8, only=[7], context=0)

# %% [markdown]
# From one draft step to the next the contexts grow and the key stays. DCP and NVFP4 are still refused first
# (notebook 3). The short path's metadata is what the general path returns for the same batch; what it writes on the
# GPU comes next.
#
# ## Requests that leave
#
# With a trained drafter (the embedded pair of notebook 1), requests finish at different steps, and each one that
# finishes leaves the draft batch: a plan keyed on the exact batch size would be made again at every departure. The
# first version of step 8 did that, and its builds at batch 8 and 32 cost the host more per step than the Qwen3-4B
# shape's at batch 32, whose requests all finish together (`runs/nvidia-h200.bench-turns-afd2af4.json`).
#
# A plan's rows are positions in the batch, not requests, and vLLM keeps a batch's requests in its first rows (it
# condenses the batch when one finishes): the rows that lose their requests are the last ones. When requests leave,
# those rows are emptied. Their `qo_indptr` entries become the new total, 16 times the requests left (in the
# wrapper's `_qo_indptr_buf`, once per departure), and the builder lowers `_qo_indptr_last` with them: the total that
# FlashInfer's `run()` checks q's rows against before any kernel, which would otherwise refuse the smaller q. The
# page-table kernel gives them no pages, every step. The plan's work list still sends thread blocks to every row it
# was made with, so the kernel meets these rows. What FlashInfer's fa2 kernel does with one, in the function each of
# its thread blocks runs:

# %%
from dflash_fi.lab.flashinfer_source import EMPTY_ROW_EXCERPT, FA2_QUERY_TILE_EXCERPT

show_flashinfer_source(*EMPTY_ROW_EXCERPT)

# %% [markdown]
# A row with no queries loads no query and stores no output row: the load is bounded by `qo_upper_bound` (at most
# `qo_len`), the store by `qo_len`. Its first query tile (`qo_tile_idx` 0) also reads no key: a row with no pages has
# `kv_len` 0 (`paged_kv_t::get_length` in FlashInfer's `page.cuh`), so `kv_start_idx` is 0 and the chunk ends at 0.
# A second tile would start its KV range past 0, and `chunk_end - chunk_start` would wrap around (unsigned) to
# billions of keys, read through pages that are not there: so a plan keeps empty rows only where each request is one
# query tile. A query tile is `CTA_TILE_Q` packed rows, one per query and query head; the fa2 plan picks it from the
# batch's average packed query length (block length times query heads per KV head):

# %%
show_flashinfer_source(*FA2_QUERY_TILE_EXCERPT)

# %% [markdown]
# The tile is 16 rows up to a packed length of 16 and 64 up to 64, so a packed length of at most 64 is always one
# tile: a 16-query block with up to 4 query heads per KV head (the embedded pair has 2 and the Qwen3-4B shape 4, by
# their configs); with more, a departure plans again. The metadata of a kept plan, and that test:

# %%
show_hunks(8, only=[5], context=0)

# %% [markdown]
# The key's first entry, `rows_with_queries`, is what a departure lowers to `num_reqs`; `_noncausal_plan_rows` keeps
# the plan's full row count, the page-table kernel's grid. `_one_query_tile` (hunk 4, with the key) is the test
# above: 16 times the query heads per KV head at most 64.
#
# The builder plans again when the batch has more requests than rows with queries: an emptied row would need its
# `qo_indptr` restored, which step 8 does not do, and rows past the plan have no thread blocks at all. (A departure
# and a join in the same step leave the count, and the plan, as they were.) So a plan keeps no more empty rows than
# requests have left since it was made. The short path writes the page table with one launch of a Triton kernel, in
# place of step 7's chain of GPU operations:

# %%
show_hunks(8, only=[2, 3], max_lines={2: 8, 3: 45}, context=0, joined=True)

# %% [markdown]
# One program per row sums the pages of the requests before it, writes its offsets and last-page length, and
# copies its pages from the block table. The kernel is launched over the plan's rows (`_noncausal_plan_rows`), not
# `num_reqs`: every step, an emptied row gets `paged_kv_indptr` at the total page count and a last-page length of 0.
# A kept plan reads those buffers, rewritten in place by every build (hunk 6, below).
# A launch through Triton's dispatch first binds the arguments, specializes on them and looks the compiled kernel up,
# in Python, which cost the host more than the launch itself in a profile taken before the direct launch
# (`runs/nvidia-h200.build-profile-c97f3e8.json`); the kernel is declared not to specialize on what changes between
# calls, so once compiled the builder launches it directly (hunk 3, above). Where a plan's `run()` reads them:

# %%
show_hunks(8, only=[6], max_lines={6: 12}, context=0)

# %% [markdown]
# Step 7's copy into `_kv_lens_buffer` goes (FlashInfer's fa2 `run()` never reads it). One decode's draft steps through
# the real builders, contexts growing, requests leaving and joining (wrappers are doubles that count `plan()`;
# step 8's kernel runs from its own source under Triton's CPU interpreter):

# %%
from dflash_fi.lab.host_tables import plans_table
from dflash_fi.lab.host_work import plans_over_draft_steps

over = {step: plans_over_draft_steps(step) for step in (7, 8)}
show(plans_table(over))
planned = [r["draft_step"] for r in over[8] if r["plans"]]
kept_empty = [r["draft_step"] for r in over[8] if r["empty_rows"]]
verdict(f"of {len(over[8])} draft steps, step 8 plans at {planned} (the first, and where a request joins) and keeps "
        f"the plan at the other {len(over[8]) - len(planned)}, of which {len(kept_empty)} with the rows of requests "
        "that left emptied; step 7 plans at every one.")

# %% [markdown]
# ## Step 9: no plan at all, on Hopper
#
# A kept plan still costs a key check, one page-table launch and `build()`'s Python. On SM 9.0 FlashInfer's XQA kernel
# reads vLLM's block table and the exact `seq_lens` on the GPU and takes one query length per batch with a mask, so a
# DFlash draft block needs neither `plan()` nor a page table. Upstream took this route in vLLM #50439; step 9 writes
# it for 0.22.1, hunk by hunk. First the kernel's entry point and what it compiles:

# %%
show_hunks(9, only=[1, 2], max_lines=24, context=1)

# %% [markdown]
# The mask is one row of bits per query, every bit of the block set: a DFlash query sees its whole block. What XQA
# does not compile (head and page sizes, FP8 caches, whose Hopper kernel masks causally) keeps step 8's path. Then
# the metadata a draft step carries on XQA, and where `build()` hands a draft step to it:

# %%
show_hunks(9, only=[3, 4, 5, 6, 7], max_lines=30, context=1)

# %% [markdown]
# A uniform non-causal block goes to XQA before any plan is looked at; everything else, ragged blocks included, takes
# step 8's path. Last, `forward()` runs XQA with the query and the cache as vLLM holds them:

# %%
show_hunks(9, only=[8], max_lines=30, context=1)

# %% [markdown]
# No `plan()`, no wrapper, no page table: the host work left in a draft build is the metadata's few fields. The
# engine benchmark (notebook 8) measures what that saves; `tests/gpu/test_xqa.py` checks XQA against the reference
# and step 8 as batches change step to step.

# %% [markdown]
# ## On the GPU
#
# FlashInfer's fa2 kernel, bf16 and fp8 KV, through the draft steps above: each kept plan against a fresh plan of the
# same schedule, one planned by default, and the reference; the output past the batch's rows filled with a sentinel
# that an empty row's write would overwrite. Then the engines of the first cell, with CUDA graphs
# (notebook 0, "Numbers you will see"), for the walkthrough's checks below.

# %% tags=["gpu", "nbval-ignore-output"]
from dflash_fi.lab.host_tables import plan_reuse_table
from dflash_fi.lab.host_work import plan_reuse_errors

if session.gpu_cell():
    reused = {kv: plan_reuse_errors(kv) for kv in ("auto", "fp8")}
    show(plan_reuse_table(reused))
    verdict(f"a kept plan computes what a fresh plan of the same schedule does (largest difference "
            f"{max(r['reused_vs_fresh_unsplit'] for v in reused.values() for r in v):.1e}), over page tables step 8's "
            f"kernel wrote, launched directly after its first launch; its empty rows wrote past the batch at "
            f"{sum(r['writes_past_output'] for v in reused.values() for r in v)} steps.")

# %% tags=["gpu"]
live = session.run_live(live_runs)

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
from dflash_fi.lab.graphs import cudagraph_claims
from dflash_fi.vocabulary import HOPPER

claims = cudagraph_claims(8, HOPPER)
check("step 8 keeps SM 9.0's FULL_AND_PIECEWISE, with a FLASH_ATTN and a FlashInfer target",
      {claims["resolved_mode"], claims["resolved_mode_flashinfer_target"]} == {"FULL_AND_PIECEWISE"})
check("step 8 plans at the first draft step and where a request joins, step 7 at every one, on exact page tables; "
      "rows of requests that left read no query and no page",
      [r["plans"] for r in over[8]] == [r["expects_plan"] for r in over[8]] and all(r["plans"] for r in over[7])
      and all(r["reads_exact_page_table"] for rows in over.values() for r in rows)
      and bool(kept_empty) and all(r["empty_rows_read_nothing"] for r in over[8] if r["empty_rows"]))
if session.on_gpu:
    check("FlashInfer's kernel computes on kept plans what it does on fresh ones, over exact page tables, and writes "
          "nothing past the batch from empty rows",
          all(r["page_table_exact"] and r["reused_vs_fresh_unsplit"] == 0 and not r["writes_past_output"]
              for v in reused.values() for r in v)
          and any(r["empty_rows"] for v in reused.values() for r in v))
else:
    skip("FlashInfer's kernel on kept plans, against fresh plans", "no CUDA GPU here")
session.check_walkthrough(live_runs);

# %% [markdown]
# ## What you saw, and what's next
#
# Step 8 plans a draft batch once (an unsplit fa2 schedule depends on nothing but the batch size and block length),
# keeps the plan while the contexts grow and requests leave (their rows emptied) until the batch outgrows it, and
# writes the exact page table in one launch, past Triton's dispatch. Next, notebook 8: what the final FlashInfer draft
# costs against the FLASH_ATTN draft.
#
# ## Appendix

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(8)
show_step_diff(9)
