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
# # 07 · What a draft's metadata build costs the host, and three ways to cut it: steps 7, 8 and 9
#
# Every decoding step the **host** (the CPU thread that prepares a step while the GPU runs) builds each attention
# group's **metadata**, the batch as the backend reads it; DFlash's drafter builds one more for its draft block. For
# FlashInfer that is mostly the **page table** (which KV-cache pages each request reads) and `plan()`, the kernel's
# **schedule**, both made on the host. Three ways to cut it:
#
# - **Step 7** plans from host-side bounds of the sequence lengths, so the build never waits for the GPU.
# - **Step 8** plans once and keeps the plan while the batch's shape holds.
# - **Step 9** plans nothing where FlashInfer's XQA kernel is the faster: XQA reads vLLM's block table on the GPU.

# %% tags=["nbval-ignore-output"]
import dflash_fi.records.summary as S
from dflash_fi.notebook import check, recorded, setup, show, show_hunks, show_source, verdict

session = setup("07_draft_build", reads=(S.Section.BENCH_KERNELS,))

# %% [markdown]
# ## What a draft build does, in vLLM 0.22.1
#
# The drafter calls `build_for_drafting`, which is `build(..., fast_build=True)` (FlashInfer ignores the flag).
# Stock `build()` in outline, each line that costs the host marked with the step that cuts it:

# %%
from IPython.display import display
from vllm.v1.attention.backend import CommonAttentionMetadata

from dflash_fi.figures.draft_build import build_outline

display(build_outline())

# %% [markdown]
# **The wait.** A DFlash draft's `CommonAttentionMetadata` has the exact sequence lengths on the GPU only (how many
# drafts the target accepted is known there), with an upper bound on the host. vLLM's `seq_lens_cpu` is a lazy copy:
# its first reader copies from the GPU, waiting for every kernel queued before:

# %%
show_source(CommonAttentionMetadata.seq_lens_cpu.fget, [(r"def seq_lens_cpu", r"return self\._seq_lens_cpu")],
            mark=(r"\.to\(\"cpu\"\)",))

# %% [markdown]
# ## Step 7: plan from the host bounds
#
# `plan()` only schedules work from the lengths it is given; the kernel reads the page table on the GPU. So step 7
# plans from the bounds and writes the exact page table on the GPU from the exact `seq_lens` (appendix). It tells
# `plan()` not to split a request's KV: a split made from the bound could give a thread block pages the exact length
# lacks. The decision, in `build()`:

# %%
show_hunks(7, only=[8], context=0)

# %% [markdown]
# Step 7 also skips the `plan()` nobody reads: the runner's build for the draft layers' group at every *target* step
# (the draft layers read only the drafter's builds). Both, on the real builders with the CPU lab's wrapper doubles
# (pretended SM 9.0): a draft batch of four requests, and the runner's target batches:

# %%
from dflash_fi.lab.host_work import draft_build_reads_gpu_lengths, runner_builds_for_draft_layers

lengths = {step: draft_build_reads_gpu_lengths(step) for step in (6, 7)}
runner = {step: runner_builds_for_draft_layers(step) for step in (6, 7)}
did = lambda copied: "copies" if copied else "does not copy"
verdict(f"step 6 {did(lengths[6]['copied_from_gpu'])} the exact lengths from the GPU; step 7 plans from the "
        f"bounds {lengths[7]['upper_bounds']} (exact {lengths[7]['exact_seq_lens']}), copies nothing, and its kernel "
        f"reads the exact page table {lengths[7]['kernel_indptr']}, step 6's. Of {len(runner[6])} target batches, "
        f"step 6 plans {sum(r['planned'] for r in runner[6])} for the draft layers, step 7 "
        f"{sum(r['planned'] for r in runner[7])}.")

# %% [markdown]
# ## Step 8: keep the plan while the shape holds
#
# With each request's KV in one piece (step 7), a plan depends on the requests and their query lengths only, and a
# DFlash draft batch is 16 queries per request at every step. So the builder keeps its plan under the **key**
# `(requests, 16)`: while a build's key matches, it only rewrites the page table (one Triton launch). A finished
# request's row of the kept plan is emptied, reading nothing. The short path, then one decode's draft steps:

# %%
from dflash_fi.lab.host_work import plans_over_draft_steps

show_hunks(8, only=[7], context=0)
over = {step: plans_over_draft_steps(step) for step in (7, 8)}
planned = {step: [r["draft_step"] for r in rows if r["plans"]] for step, rows in over.items()}
kept_empty = [r["draft_step"] for r in over[8] if r["empty_rows"]]
verdict(f"over {len(over[8])} draft steps step 7 plans at {len(planned[7])}, step 8 at {len(planned[8])} "
        f"(steps {planned[8]}: the first, and where a request joins); at steps {kept_empty} requests had left and "
        "their rows stayed in the kept plan, empty. Every step's kernel reads the exact page table.")

# %% [markdown]
# ## Step 9: no plan at all, where XQA is faster
#
# A kept plan still costs a key check, a page-table launch and `build()`'s Python. FlashInfer's **XQA** kernel reads
# vLLM's own block table and exact `seq_lens` on the GPU, with one query length per batch and a mask (all bits set:
# DFlash's blocks see themselves whole), so its metadata is views of tensors vLLM has. XQA is not always the faster
# kernel, so step 9 sends a draft step there by a **route rule**, its bounds set from the benchmark below:

# %%
from dflash_fi.steps import backend_module

show_source(backend_module(9).use_xqa_for_draft, [(r"return \($", r"^\s*\)$")])
show_hunks(9, only=[7], context=0)

# %% [markdown]
# The rule's numbers come from the evidence pass's kernel benchmark: per shape (heads, requests, context; bf16 cache,
# one 16-query block per request), XQA's time over the kept-plan fa2 kernel's (below 1: XQA is faster), the rule's
# route, and whether its pick is the faster kernel, **level** with it (the verdict says what that means) or slower:

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures.benchmarks import kernel_rows
from dflash_fi.figures.draft_build import route_table, route_verdict
from dflash_fi.notebook import section_note
from dflash_fi.lab.draft_route import route_by_shape
from dflash_fi.vocabulary import HOPPER

kernels = recorded(lambda: S.read().rows(S.Section.BENCH_KERNELS), "the kernel benchmark")
if kernels:
    shapes = [r for r in route_by_shape(kernel_rows(kernels), HOPPER) if r.kv_dtype == "bf16" and r.xqa_ms]
    show(route_table(shapes))
    print(section_note(S.Section.BENCH_KERNELS))
    verdict(route_verdict(shapes, kernels["gpu"]))

# %% [markdown]
# ## The wait, and what steps 7-9 cut: four draft builds with the GPU busy
#
# The same benchmark times the draft layers' real builders per requests x context, with a long kernel queued on the
# GPU before each build, so a build that waits takes about that kernel's time: step 6's (in passes that timed it),
# step 7's (it plans every step), the final step's (steps 8 and 9 together) and the FLASH_ATTN draft's:

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures.draft_build import build_figure, build_rows, build_verdict, final_paths
from dflash_fi.figures.style import pyplot

builds = build_rows(kernels)  # the bf16 cache's, at the heads of the course's small models (the embedded pair)
if not builds:
    print("the kernel benchmark has no host-build rows yet: `dflash-fi bench kernels --record` on a GPU writes them")
else:
    build_figure(builds, final_paths(builds))
    pyplot().show()
    print(section_note(S.Section.BENCH_KERNELS))
    verdict(build_verdict(builds))

# %% [markdown]
# ## On the GPU
#
# FlashInfer's real kernels, bf16 and fp8 caches: step 7's plans from bounds against exact plans, step 8's kept plans
# against fresh ones; then step 6's and step 7's draft builds, timed here with a kernel queued before each.

# %% tags=["gpu", "nbval-ignore-output"]
from dflash_fi.lab.draft_build import busy_build_ms
from dflash_fi.lab.host_work import bound_planning_errors, plan_reuse_errors

if session.gpu_cell():
    bounded = [row for kv in ("auto", "fp8") for row in bound_planning_errors(kv)]
    reused = [row for kv in ("auto", "fp8") for row in plan_reuse_errors(kv)]
    waited = {step: busy_build_ms(step) for step in (6, 7)}
    verdict(f"from bounds each batch computes what its exact plan does (largest difference "
            f"{max(r['bounds_vs_exact'] for r in bounded):.1e}); a kept plan what a fresh one does (largest "
            f"{max(r['reused_vs_fresh_unsplit'] for r in reused):.1e}). With the GPU busy, the fastest of 20 draft builds "
            f"takes {waited[6]:.2f} ms at step 6 (it waits for the queued kernel), {waited[7]:.2f} ms at step 7.")
    check("step 7 and step 8 compute what exact, fresh plans do, and step 6's build waits where step 7's does not",
          max(r["bounds_vs_exact"] for r in bounded) < 5e-3
          and all(r["reused_vs_fresh_unsplit"] == 0 and not r["writes_past_output"] for r in reused)
          and waited[6] > 2.5 > waited[7])

# %% [markdown]
# ### Check

# %%
from dflash_fi.lab.draft_route import final_draft_route
from dflash_fi.lab.routes import Prefill

check("step 7 plans from bounds, copies nothing and reads step 6's page table; it plans nothing at target steps",
      lengths[6]["copied_from_gpu"] and not lengths[7]["copied_from_gpu"]
      and lengths[7]["kernel_indptr"] == lengths[6]["kernel_indptr"]
      and all(r["planned"] for r in runner[6]) and not any(r["planned"] for r in runner[7]))
check("step 8 plans at the first draft step and where a request joins; emptied rows read nothing",
      [r["plans"] for r in over[8]] == [r["expects_plan"] for r in over[8]] and all(r["plans"] for r in over[7])
      and bool(kept_empty) and all(r["empty_rows_read_nothing"] for r in over[8] if r["empty_rows"]))
ratio, reqs = backend_module(9).XQA_DRAFT_MAX_HEAD_RATIO, backend_module(9).XQA_DRAFT_MIN_REQS  # the rule's bounds
fa2_cases = ((HOPPER, "auto", 2 * ratio + 2, 2, reqs), (HOPPER, "auto", 2 * ratio, 2, reqs - 1),
             (HOPPER, "fp8", 2 * ratio, 2, reqs), ((8, 9), "auto", 2 * ratio, 2, reqs))
check(f"the route rule: XQA on SM 9.0 with bf16, at most {ratio} query heads per KV head and at least {reqs} requests; "
      "fa2 one past either bound, with fp8 and off SM 9.0", final_draft_route(HOPPER, "auto", 2 * ratio, 2, reqs)
      is Prefill.XQA and all(final_draft_route(*case) is not Prefill.XQA for case in fa2_cases))

# %% [markdown]
# ## What you saw, and what's next

# %%
from dflash_fi.figures.draft_build import busy_ranges
from dflash_fi.upstream import Agreement, claim

said = {k: claim(k) for k in ("host_bounds", "plan_once", "xqa_draft")}
not_done = " and ".join(str(c.step) for c in said.values() if c.agreement is Agreement.NOT_DONE)
verdict(f"a FlashInfer draft's build is host work paid at every decoding step, and `plan()` is most of it. Step 7 "
        "removes the wait for the GPU, step 8 the plan while the shape holds, step 9 the plan altogether where XQA is "
        f"the faster kernel. Host ms per draft build (GPU busy): {busy_ranges(builds)}. Upstream's code has not done "
        f"steps {not_done}; it puts {said['xqa_draft'].theirs} ({said['xqa_draft'].when()}), where step 9 keeps fa2 "
        "wherever it is faster. Next, notebook 08: what the final draft costs end to end against FLASH_ATTN's.")

# %% [markdown] tags=["appendix"]
# ## Appendix: the hunks the body summarised
#
# Step 7: the page table from bounds and exact lengths, `plan()` told not to split, and the build nobody reads.

# %% tags=["appendix"]
show_hunks(7, only=[6, 9, 10, 1, 2, 3, 4, 5, 7, 11], max_lines=None, context=0, joined=True)

# %% [markdown] tags=["appendix"]
# Step 8's key, page-table kernel and held-plan metadata:

# %% tags=["appendix"]
show_hunks(8, only=[1, 2, 3, 4, 5, 6], max_lines=None, context=0, joined=True)

# %% [markdown] tags=["appendix"]
# Step 9's import, the route rule's constants and mask, its metadata, the builders it serves and `forward()`:

# %% tags=["appendix"]
show_hunks(9, only=[1, 2, 3, 4, 5, 6, 8], max_lines=None, context=0, joined=True)

# %% [markdown] tags=["appendix"]
# The three steps' whole diffs:

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(7)
show_step_diff(8)
show_step_diff(9)
