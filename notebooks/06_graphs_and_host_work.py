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
# # 6 · Full CUDA graphs, and no host work that waits: steps 6 and 7
#
# Notebook 5 ended with a FlashInfer draft costing an SM 9.0 engine its full CUDA graphs: step 6 keeps them. Step 7
# removes two things the *host* (the CPU thread that prepares each engine step while the GPU runs the one before) does
# for the draft: a copy that waits for the GPU, and a build nobody reads. Notebook 7 takes away the `plan()` of every
# draft step; notebook 8 measures what is left.

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, show, show_hunks, skip, verdict

# The engines of "On the GPU" start now, in the background: each takes most of a minute.
live_runs = [P.FLASH_ATTN_GRAPHS, *(P.graphs_run(step) for step in (6, 7))]
session = setup("06_graphs_and_host_work", live=live_runs)

# %%
from dflash_fi.figures.path import LANDS, STAGES

landed = {name for key, name, *_ in STAGES if any(key in LANDS[s] for s in (6, 7))}
verdict(f"on notebook 1's picture of a draft layer's path, steps 6 and 7 land in {', '.join(sorted(landed))}: not in "
        "the selector or the attention kernel.")

# %% [markdown]
# ## Step 6: prefill wrappers a CUDA graph can replay
#
# A target step verifies 1 + 15 tokens per request: a *uniform* batch, which `FULL_AND_PIECEWISE` replays as a full
# graph if every backend claims `UNIFORM_BATCH`. FlashInfer runs it on its prefill wrapper, whose replay never sees a
# later `plan()`, so it claims less, and the engine falls back to `PIECEWISE` (notebook 5). A wrapper made with
# `use_cuda_graph=True` has a fixed batch size and fixed buffers, which `plan()` fills and a replay reads. The decode
# path keeps one per batch size; so does step 6, for prefill:

# %%
show_hunks(6, only=[1, 2, 3], context=0, joined=True)

# %% [markdown]
# One wrapper per captured batch size, on the builder's persistent buffers plus one for `qo_indptr`; asked with a draft
# config (`use_non_causal=True`), FlashInfer keeps step 5's claim. Which batches get a graph wrapper, in `build()`:

# %%
show_hunks(6, only=[4, 5], max_lines={4: 12}, context=0, joined=True)

# %% [markdown]
# What a full graph holds: causal, all prefill, each request with the verify query length or none (vLLM pads a
# captured batch with empty requests). A draft block keeps step 3's wrapper, at no loss: vLLM 0.22.1's drafter captures
# piecewise graphs only (`SpecDecodeBaseProposer.initialize_cudagraph_keys`), and a graph wrapper would only pad its
# grid (notebook 8 measures it). vLLM resolving the engine's mode, on the CPU, FLASH_ATTN target, FLASHINFER draft:

# %%
from dflash_fi.lab.graphs import cudagraph_claims, format_claims
from dflash_fi.lab.batches import VERIFY
from dflash_fi.lab.routes import label
from dflash_fi.lab.routing import routing_report
from dflash_fi.vocabulary import HOPPER

claims = {step: cudagraph_claims(step, HOPPER) for step in (5, 6, 7)}
show(format_claims([claims[5], claims[6]]))  # step 7 claims what step 6 does (checked below)
wrappers = {s: {r.batch: r for r in routing_report(s, cuda_graphs=True).routes} for s in (5, 6)}
changed = [batch for batch in wrappers[5] if wrappers[5][batch].prefill is not wrappers[6][batch].prefill]
verdict(f"step 5 resolves {claims[5]['resolved_mode']}, step 6 {claims[6]['resolved_mode']}. Of the CPU lab's "
        f"batches only '{changed[0].name}' changes wrapper, to "
        f"'{label(wrappers[6][changed[0]].prefill, wrappers[6][changed[0]])}'.")

# %% [markdown]
# ## Step 7: no host work that waits, and none that nobody reads
#
# The host prepares step n + 1 while the GPU runs step n, which pays only if it never waits. DFlash builds the draft's
# metadata with no host copy of the sequence lengths (how many drafts the target accepted is known on the GPU only),
# only an upper bound. vLLM's `seq_lens_cpu` copies them on first use (`self.seq_lens.to("cpu")`), waiting for every
# kernel queued before, the target's whole forward included. FlashInfer's builder read it; step 7 plans from the bound:

# %%
show_hunks(7, only=[6, 8, 9], max_lines={6: 1, 8: 9, 9: 9}, context=0, joined=True)

# %% [markdown]
# `plan()` only schedules work from the lengths it is given; the kernel attends over the *page table* on the GPU
# (`paged_kv_indptr`, `paged_kv_indices`, `paged_kv_last_page_len`: each request's KV pages, and how full its last
# one is). So the new method fills the page table's host copy, which `plan()` reads, from the bounds (numpy), its GPU
# copy from `seq_lens` (GPU operations). `plan()` learns two more things, and `run()` reads the exact page table:

# %%
show_hunks(7, only=[10], max_lines=13, context=0, joined=True)

# %% [markdown]
# FlashInfer may cut a request's KV into chunks on separate thread blocks and merge their partial outputs: *split
# KV*. Chunks cut by the bounds but filled by the exact lengths can leave one empty (wrong attention on the GPU,
# `tests/gpu`): planned from bounds, KV is not split. The block's query length (16) spares `plan()` a `max()`.
#
# **A build nobody reads.** The model runner builds metadata for every attention group every step; with a FLASH_ATTN
# target the FlashInfer draft layers are a group of their own, planned every *target* step though they read only the
# drafter's builds. Built under the draft config (`use_non_causal=True`, notebook 1), each records it:

# %%
show_hunks(7, only=[1, 2, 3, 4], context=0, joined=True)

# %% [markdown]
# The builder asks its layers, by the names it is made with. A target step's build for draft layers only then returns
# at once, planning nothing, with metadata that has no wrapper: a forward that read it would fail, and say why:

# %%
show_hunks(7, only=[5, 7, 11], max_lines={5: 8}, context=0, joined=True)

# %% [markdown]
# The `assert` names the cause a bare `is not None` would hide. Step 7 on the real builders (wrappers are the CPU
# lab's doubles): a draft batch of four requests, and the runner's kinds of target batch, for the draft layers:

# %%
from dflash_fi.lab.host_tables import draft_build_table
from dflash_fi.lab.host_work import draft_build_reads_gpu_lengths, runner_builds_for_draft_layers

lengths = {step: draft_build_reads_gpu_lengths(step) for step in (6, 7)}
runner = {step: runner_builds_for_draft_layers(step) for step in (6, 7)}
show(draft_build_table(lengths))
verdict(f"step 7 plans from the bounds {lengths[7]['upper_bounds']} (exact: {lengths[7]['exact_seq_lens']}) and "
        f"copies nothing. Of {len(runner[6])} target batches step 6 plans {sum(r['planned'] for r in runner[6])} for "
        f"the draft layers, step 7 {sum(r['planned'] for r in runner[7])}.")

# %% [markdown]
# ## On the GPU
#
# FlashInfer's fa2 kernel, bf16 and fp8 KV: step 7 planned from bounds and from exact lengths, against the reference.
# Then the engines of the first cell, with CUDA graphs (notebook 0, "Numbers you will see"), for the walkthrough's
# checks below.

# %% tags=["gpu", "nbval-ignore-output"]
from dflash_fi.lab.host_tables import bound_planning_table
from dflash_fi.lab.host_work import bound_planning_errors

if session.gpu_cell():
    bounded = [row for kv in ("auto", "fp8") for row in bound_planning_errors(kv)]
    show(bound_planning_table(bounded))
    verdict(f"from bounds, each batch computes what its exact plan does (largest difference "
            f"{max(r['bounds_vs_exact'] for r in bounded):.1e}).")

# %% tags=["gpu"]
live = session.run_live(live_runs)

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
graphs = {claims[s][k] for s in (6, 7) for k in ("resolved_mode", "resolved_mode_flashinfer_target")}
check("steps 6 and 7 keep SM 9.0's FULL_AND_PIECEWISE (step 5: PIECEWISE), changing the verify batch's wrapper only",
      claims[5]["resolved_mode"] == "PIECEWISE" and graphs == {"FULL_AND_PIECEWISE"}
      and changed == [VERIFY])
check("step 7 plans from bounds, copies nothing (step 6 did), its kernel reads step 6's page table, and plans "
      "nothing on target steps for the draft layers (step 6 did)", lengths[6]["copied_from_gpu"] and not lengths[7][
          "copied_from_gpu"] and lengths[7]["planned_indptr"] != lengths[7]["kernel_indptr"] == lengths[6][
          "kernel_indptr"] and all(r["planned"] for r in runner[6]) and not any(r["planned"] for r in runner[7]))
if session.on_gpu:
    check("FlashInfer's kernel computes the same planned from bounds (step 7) as from exact lengths",
          max(r["bounds_vs_exact"] for r in bounded) < 5e-3 and not any(r["copied_from_gpu"] for r in bounded))
else:
    skip("FlashInfer's kernel planned from bounds, against exact planning", "no CUDA GPU here")
session.check_walkthrough(live_runs);

# %% [markdown]
# ## What you saw, and what's next
#
# Step 6 keeps the engine's full graphs with replayable prefill wrappers for verify batches. Step 7 plans the draft
# from host bounds, KV unsplit, copying nothing, and plans nothing for nobody. It still plans every draft step: next,
# notebook 7 plans once.
#
# ## Appendix

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(6)
show_step_diff(7)
