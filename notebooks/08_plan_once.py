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
# # 8 · What a metadata build costs: plan once (step 8), then no plan (step 9)
#
# Every decoding step, before the GPU runs a forward, vLLM's host builds attention metadata, once per attention group
# and once more for DFlash's draft block; where the GPU waits for the host, that is the step's time too. A FlashInfer
# build is mostly `plan()`: step 8 keeps the draft's plan across steps; step 9, on SM 9.0, needs none.

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, show, show_hunks, show_source, verdict

live_runs = [P.FLASH_ATTN_GRAPHS, P.graphs_run(8), P.graphs_run(9)]
session = setup("08_plan_once", live=live_runs)

# %% [markdown]
# ## Where vLLM builds, and what a FlashInfer build does
#
# The model runner calls `build()` once per attention group (layers of one backend and KV-cache spec share one
# metadata object; notebook 9 counts them); the drafter calls `build_for_drafting`, by default `build(...,
# fast_build=True)`, which lets vLLM's FlashAttention builder skip its ahead-of-time schedule (FlashInfer's ignores
# the flag). Then stock `build()` in outline, each line that costs the host marked, and where steps 8 and 9 return
# early (after steps 1-7 a DFlash draft step still reaches `plan()`, planned from host-side bounds):

# %%
import inspect
import re
from IPython.display import display
from vllm.v1.attention.backend import AttentionMetadataBuilder
from vllm.v1.attention.backends.flashinfer import FlashInferMetadataBuilder
from dflash_fi.figures.listings import code_block

show_source(AttentionMetadataBuilder.build_for_drafting, [(r"return self\.build\(", r"fast_build=True")])
source = inspect.getsource(FlashInferMetadataBuilder.build).splitlines()
outline = {r"def build\(": "", r"num_actual_tokens = common": "<- steps 8, 9: a draft step returns here",
           r"seq_lens_cpu = common_attn_metadata\.seq": "exact lengths, on the host",
           r"paged_kv_indices = self\._compute_flashinfer": "page table: numpy, GPU ops",
           r"^\s*prefill_wrapper\.plan\($": "the kernel's schedule, made on the host, copied to the GPU",
           r"^\s*return attn_metadata$": ""}
lines = [(next(line for line in reversed(source) if re.search(p, line)).split(" if ")[0], n) for p, n in outline.items()]
display(code_block("\n    ...\n".join(line + (f"  # {n}" if n else "") for line, n in lines),
                   "FlashInferMetadataBuilder.build, vLLM 0.22.1, in outline",
                   tuple(2 * k + 1 for k, (_, n) in enumerate(lines) if n)))

# %% [markdown]
# ## Step 8: keep the plan
#
# A plan is the kernel's schedule: which thread block takes which queries and keys. With each request's keys in one
# piece (step 7) it depends on the requests and their query lengths, not on the contexts, and a DFlash draft batch is
# 16 queries a request every step: `(requests, 16)` is the plan's key. While it matches, only the page table is
# rewritten (one Triton launch, hunk 3). Requests that finish empty the batch's last rows; the plan is kept with them
# where fa2 gives each request one query tile (`_one_query_tile`), whose empty rows read and write nothing:

# %%
show_hunks(8, only=[4, 7], max_lines=60, context=0, joined=True)

# %% [markdown]
# ## Step 9: no plan at all, on SM 9.0
#
# A kept plan still costs a key check, a page-table launch and `build()`'s Python. FlashInfer's XQA kernel reads
# vLLM's own block table and exact `seq_lens` on the GPU and takes one query length per batch with a mask (every bit
# of the block set), so a draft step's metadata is views of tensors vLLM already has. Upstream routes DFlash this way
# on SM 9.0 since #50439; step 9 writes it for 0.22.1, handing XQA a draft step before any plan is looked at:

# %%
show_hunks(9, only=[6, 7], max_lines=40, context=0, joined=True)

# %% [markdown]
# `_xqa_supports_draft_blocks` (hunk 5, appendix) says yes only on SM 9.0 with a bf16 or fp16 cache and the head and
# page sizes XQA compiles; everything else, ragged batches too, keeps step 8's path.
#
# ## What each step saves
#
# The engine benchmark times every engine's builds per decoding step, with CUDA graphs; step 7, not among its
# engines, comes from the kernel benchmark, which times the builders alone:

# %% tags=["nbval-ignore-output"]
import matplotlib.pyplot as plt
from dflash_fi.bench.builds import builder_names
from dflash_fi.bench.e2e import flash_attn_draft, flashinfer_draft
from dflash_fi.bench.results import build_rows, latest_kernels
from dflash_fi.bench.turns import builds_per_step, latest_turns
from dflash_fi.engine.identity import Pair, label
from dflash_fi.engine.records import Role
from dflash_fi.notebook import recorded

turns, kernels = recorded(latest_turns, "the engine benchmark"), recorded(latest_kernels, "the kernel benchmark")
if turns and kernels:
    batches = turns.batches(Pair.EMBEDDED)
    fa, kept, xqa = engines = [flash_attn_draft(Pair.EMBEDDED), *(flashinfer_draft(Pair.EMBEDDED, s) for s in (8, 9))]
    draft_ms = {run: [sum(t for k, (_, t) in builds_per_step(turns, run, b).items() if k.role is Role.DRAFT)
                      for b in batches] for run in engines}  # host ms per decoding step, median of rounds
    fig, ax = plt.subplots(figsize=(8, 2.1))
    for i, run in enumerate(engines):
        ax.bar([j + (i - 1) * 0.27 for j in range(len(batches))], draft_ms[run], 0.27, label=label(run).removesuffix(", CUDA graphs"))
    ax.set_xticks(range(len(batches)), [f"batch {b}" for b in batches])
    ax.set(ylabel="drafter's build, ms/step")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1, 0.5))
    plt.show()
    step7 = [r["host_ms_busy"] for r in build_rows(kernels, ("bf16",)) if r["kernel"] == next(iter(builder_names()))]
    verdict(f"planning at every step, step 7's draft build takes {min(step7):.3f} to {max(step7):.3f} ms (kernel "
            f"benchmark, bf16, GPU busy). In the engines a kept plan takes {min(draft_ms[kept]):.3f} to "
            f"{max(draft_ms[kept]):.3f} ms, no plan {min(draft_ms[xqa]):.3f} to {max(draft_ms[xqa]):.3f}, the "
            f"FLASH_ATTN draft {min(draft_ms[fa]):.3f} to {max(draft_ms[fa]):.3f}, at every batch: what step 9 still "
            "spends over FLASH_ATTN is build()'s own Python. Notebook 9 weighs it against the whole step.")
else:
    print("not recorded yet: an engine or kernel benchmark is missing from the evidence summary")

# %% [markdown]
# ## On the GPU
#
# The engines, each running this call (the kernel on kept plans, against fresh plans: appendix):

# %%
from dflash_fi.evidence.live import show_engine_calls

show_engine_calls(live_runs)

# %% tags=["gpu"]
live = session.run_live(live_runs)

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import wrapped_lines


def names(backends) -> str:
    return ", ".join(dict.fromkeys((b.name or b.qualname) + (f" (step {b.step})" if b.step else "") for b in backends))


records, reference, source = session.evidence(live_runs)
with wrapped_lines():
    print(source, *(f"  {label(run)}: target {names(r.target_backends)}, draft {names(r.draft_backends)}, "
                    f"{r.cudagraph_mode}" for run, r in records.items()), sep="\n")
modes = {str(r.cudagraph_mode) for r in records.values()}
verdict(f"the engines resolved {' and '.join(sorted(modes))}: " + (
    "a FlashInfer draft with a kept plan (step 8) or with none (step 9) keeps the engine's full CUDA graphs, as "
    "FLASH_ATTN's does." if modes == {"FULL_AND_PIECEWISE"} else "not all of them full graphs: see each line."))

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
from dflash_fi.lab.host_work import plans_over_draft_steps

over = {step: plans_over_draft_steps(step) for step in (7, 8)}
kept_empty = [r["draft_step"] for r in over[8] if r["empty_rows"]]
check("over one decode's draft steps through the real builders (wrappers that count plan()), step 8 plans at the first and where a request joins, step 7 at every one, on "
      "exact page tables; rows of requests that left read no query and no page",
      [r["plans"] for r in over[8]] == [r["expects_plan"] for r in over[8]] and all(r["plans"] for r in over[7])
      and all(r["reads_exact_page_table"] for rows in over.values() for r in rows)
      and bool(kept_empty) and all(r["empty_rows_read_nothing"] for r in over[8] if r["empty_rows"]),
      f"step 8 plans at {[r['draft_step'] for r in over[8] if r['plans']]} of {len(over[8])}, keeps emptied rows at "
      f"{kept_empty}")
check("every engine above resolved FULL_AND_PIECEWISE", modes == {"FULL_AND_PIECEWISE"}, ", ".join(sorted(modes)))
session.check_walkthrough(live_runs);

# %% [markdown]
# ## What you saw, and what's next
#
# A metadata build is host work paid every decoding step, once per attention group and once per draft; a FlashInfer
# build is mostly `plan()`. Step 8 keeps a draft batch's plan while its shape holds (contexts grow, requests leave)
# and rewrites only the page table; step 9, on SM 9.0, gives the draft block to XQA, which needs no plan and no page
# table. Next, notebook 9: what the final FlashInfer draft costs against the FLASH_ATTN draft, step by step.

# %% [markdown]
# ## Appendix

# %% [markdown]
# FlashInfer's fa2 kernel on kept plans (bf16 and fp8 KV), on this GPU, against fresh plans and the reference:

# %% tags=["gpu", "nbval-ignore-output", "appendix"]
from dflash_fi.lab.host_tables import plan_reuse_table
from dflash_fi.lab.host_work import plan_reuse_errors

if session.gpu_cell():
    reused = {kv: plan_reuse_errors(kv) for kv in ("auto", "fp8")}
    show(plan_reuse_table(reused))
    verdict(f"a kept plan computes what a fresh plan of the same schedule does (largest difference "
            f"{max(r['reused_vs_fresh_unsplit'] for v in reused.values() for r in v):.1e}), over page tables step 8's "
            f"kernel wrote; its empty rows wrote past the batch at "
            f"{sum(r['writes_past_output'] for v in reused.values() for r in v)} steps.")
    check("FlashInfer's kernel computes on kept plans what it does on fresh ones, over exact page tables, and writes "
          "nothing past the batch from empty rows",
          all(r["page_table_exact"] and r["reused_vs_fresh_unsplit"] == 0 and not r["writes_past_output"]
              for v in reused.values() for r in v)
          and any(r["empty_rows"] for v in reused.values() for r in v))

# %% [markdown]
# The hunks the body summarised, each under its reason: step 8's key, page-table kernel and held-plan metadata.

# %% tags=["appendix"]
show_hunks(8, only=[1, 2, 3, 5, 6], max_lines=None, context=0, joined=True)

# %% [markdown]
# Step 9's import, mask, metadata and the builders XQA serves; then `forward()` running XQA (hunk 8).

# %% tags=["appendix"]
show_hunks(9, only=[1, 2, 3, 4, 5, 8], max_lines=None, context=0, joined=True)

# %% [markdown]
# Both steps' whole diffs:

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(8)
show_step_diff(9)
