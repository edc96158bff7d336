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
# - **Step 9** runs the draft on FlashInfer's XQA kernel where it is the faster: no plan, no page table.

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
# (the draft layers read only the drafter's builds). Both, on the real builders with the CPU lab's stand-in wrappers
# (pretended SM 9.0): a draft batch of four requests, and the runner's target batches:

# %%
from dflash_fi.figures.draft_build import lengths_verdict
from dflash_fi.lab.host_work import draft_build_reads_gpu_lengths, runner_builds_for_draft_layers

lengths = {step: draft_build_reads_gpu_lengths(step) for step in (6, 7)}
runner = {step: runner_builds_for_draft_layers(step) for step in (6, 7)}
verdict(lengths_verdict(lengths, runner))

# %% [markdown]
# ## Step 8: keep the plan while the shape holds
#
# With each request's KV in one piece (step 7), a plan depends on the requests and their query lengths only, and a
# DFlash draft batch is 16 queries per request at every step. So the builder keeps its plan under the **key**
# `(requests, 16)`: while a build's key matches, it only rewrites the page table (one Triton launch). A batch that
# only lost requests keeps the plan too: the finished requests' rows are emptied, reading nothing. The short path,
# then one decode's draft steps:

# %%
from dflash_fi.figures.draft_build import plans_table, reuse_verdict
from dflash_fi.lab.host_work import plans_over_draft_steps

show_hunks(8, only=[7], context=0)
over = {step: plans_over_draft_steps(step) for step in (7, 8)}
show(plans_table(over))
verdict(reuse_verdict(over))

# %% [markdown]
# ## Step 9: no plan at all, where XQA is faster
#
# A kept plan still runs fa2's kernel after a page-table launch. FlashInfer's **XQA** kernel reads vLLM's block table
# and exact `seq_lens` on the GPU: no plan, no page table. Where it is the faster (the benchmark below), step 9 sends a
# draft step there by a **route rule**, on SM 9.0 with a bf16/fp16 cache only (the pinned FlashInfer's Hopper FP8 XQA
# kernel masks short blocks causally, and a DFlash block is not; vLLM 0.33.0 pins a later FlashInfer, not read here):

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
# ## The wait, and what steps 7-9 cut
#
# The same benchmark times the draft layers' real builders per requests x context: step 7's (it plans every step),
# the final step's (steps 8 and 9) and the FLASH_ATTN draft's with the GPU idle; then step 6's (where a pass timed
# it) and step 7's with a long kernel queued before each build, so a build that waits takes about that kernel's time:

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
    verdict(build_verdict(builds, final_paths(builds)))

# %% [markdown]
# ## On the GPU
#
# FlashInfer's real kernels, bf16 and fp8 caches: step 7's plans from bounds against exact plans, step 8's kept plans
# against fresh ones; then step 6's and step 7's draft builds, timed here with a kernel queued before each.

# %% tags=["gpu", "nbval-ignore-output"]
from dflash_fi.figures.draft_build import gpu_verdict
from dflash_fi.lab.draft_build import busy_build_ms, gpu_holds
from dflash_fi.lab.host_work import bound_planning_errors, plan_reuse_errors

if session.gpu_cell():
    bounded = bound_planning_errors("auto") + bound_planning_errors("fp8")
    reused = plan_reuse_errors("auto") + plan_reuse_errors("fp8")
    waited = {step: busy_build_ms(step) for step in (6, 7)}
    verdict(gpu_verdict(bounded, reused, waited))
    check("step 7 and step 8 compute what exact, fresh plans do, and step 6's build waits where step 7's does not",
          gpu_holds(bounded, reused, waited))

# %% [markdown]
# ### Check

# %%
from dflash_fi.lab.draft_build import route_cases, route_claim, routes_hold, step7_holds, step8_holds

check("step 7 plans from bounds, copies nothing and reads step 6's page table; it plans nothing at target steps",
      step7_holds(lengths, runner))
check("step 8 plans at the first draft step and where a request joins; emptied rows read nothing",
      step8_holds(over))
cases = route_cases()  # the rule at its bounds, and one past each
check(route_claim(cases), routes_hold(cases))

# %% [markdown]
# ## What you saw, and what's next

# %%
from dflash_fi.figures.draft_build import closing_verdict

verdict(closing_verdict(builds))

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
