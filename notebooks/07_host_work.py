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
# # 7 · No host work that waits, and none that nobody reads: step 7
#
# With full graphs kept (notebook 6), what is left of a FlashInfer draft's cost is host work: the *host* (the CPU
# thread that prepares each engine step while the GPU runs the one before) does two things for the draft that step 7
# removes: a copy that waits for the GPU, and a build nobody reads.

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, show, show_hunks, skip, verdict

# The engines of "On the GPU" start now, in the background: each takes most of a minute.
live_runs = [P.graphs_run(6), P.graphs_run(7)]
session = setup("07_host_work", live=live_runs)

# %% [markdown]
# ## The wait
#
# The host prepares step n + 1 while the GPU runs step n, which pays only if it never waits. DFlash builds the draft's
# metadata with only an upper bound of the sequence lengths on the host (how many drafts the target accepted is known
# on the GPU only). vLLM's `seq_lens_cpu` copies them on first use, waiting for every kernel queued before. FlashInfer's
# builder read it; step 7 plans from the bound. `plan()` only schedules work from the lengths it is given; the kernel
# reads the *page table* on the GPU. So the page table's host copy, which `plan()` reads, comes from the bounds (numpy),
# its GPU copy from the exact `seq_lens` (GPU operations); `run()` is pointed at it, and a bound-planned request's KV is
# not split (chunks cut by bounds and filled by exact lengths can leave one empty: wrong attention, `tests/gpu`):

# %%
show_hunks(7, only=[8, 9, 6, 10], max_lines={6: 100, 8: 100, 9: 10, 10: 100}, context=0, joined=True)

# %% [markdown]
# **A build nobody reads.** The runner builds metadata for every attention group every step; with a FLASH_ATTN target
# the FlashInfer draft layers are a group of their own, planned every *target* step though they read only the
# drafter's builds. Built under the draft config, each layer records it; the builder asks its layers, and a target
# step's build for draft layers only returns at once, with metadata that a forward would refuse, saying why:

# %%
show_hunks(7, only=[1, 2, 3, 4, 7, 5, 11], max_lines={5: 8, 1: 100, 2: 100, 3: 100, 4: 100, 7: 100, 11: 100},
           context=0, joined=True)

# %% [markdown]
# Step 7 on the real builders (wrappers are the CPU lab's doubles): a draft batch of four requests, and the runner's
# kinds of target batch, built for the draft layers:

# %%
from dflash_fi.lab.host_work import draft_build_reads_gpu_lengths, runner_builds_for_draft_layers

lengths = {step: draft_build_reads_gpu_lengths(step) for step in (6, 7)}
runner = {step: runner_builds_for_draft_layers(step) for step in (6, 7)}
verdict(f"step 6 copies the exact lengths from the GPU ({lengths[6]['copied_from_gpu']}), step 7 plans from the bounds "
        f"{lengths[7]['upper_bounds']} (exact {lengths[7]['exact_seq_lens']}) and copies nothing; its kernel reads page "
        f"table {lengths[7]['kernel_indptr']}, step 6's. Of {len(runner[6])} target batches step 6 plans "
        f"{sum(r['planned'] for r in runner[6])} for the draft layers, step 7 {sum(r['planned'] for r in runner[7])}.")

# %% [markdown]
# Step 7 keeps step 6's CUDA-graph claims (vLLM's resolution on the CPU, pretended SM 9.0):

# %%
from dflash_fi.lab.graphs import cudagraph_claims
from dflash_fi.vocabulary import HOPPER

claims = {step: cudagraph_claims(step, HOPPER) for step in (6, 7)}
keys = ("resolved_mode", "resolved_mode_flashinfer_target")
verdict(f"step 7 resolves {claims[7]['resolved_mode']} ({claims[7]['resolved_mode_flashinfer_target']} with a "
        f"FlashInfer target), as step 6 does: its hunks change what the host does, not what a graph holds.")

# %% [markdown]
# ## On the GPU
#
# FlashInfer's fa2 kernel, bf16 and fp8 KV: step 7 planned from bounds and from exact lengths, against the reference.

# %% tags=["gpu", "nbval-ignore-output"]
from dflash_fi.lab.host_tables import bound_planning_table
from dflash_fi.lab.host_work import bound_planning_errors

if session.gpu_cell():
    bounded = [row for kv in ("auto", "fp8") for row in bound_planning_errors(kv)]
    show(bound_planning_table(bounded))
    verdict(f"from bounds, each batch computes what its exact plan does (largest difference "
            f"{max(r['bounds_vs_exact'] for r in bounded):.1e}).")

# %% [markdown]
# Then the engines of the first cell, steps 6 and 7 with CUDA graphs. Each is one process running this call, with what
# the table changes:

# %%
from dflash_fi.evidence.live import show_engine_calls

show_engine_calls(live_runs)

# %% tags=["gpu"]
live = session.run_live(live_runs)

# %% [markdown]
# What each engine resolved (backends, CUDA-graph mode), its text and its tau:

# %% tags=["nbval-ignore-output"]
from dflash_fi.engine.identity import label as run_label
from dflash_fi.engine.records import short_backend

records, reference, source = session.evidence(live_runs)
names = lambda backends: ", ".join(sorted({short_backend(b) for b in backends})) or "-"
show(f"{source}\n\n| engine | target, draft layers | CUDA-graph mode | text (sha256) | tau |\n|---|---|---|---|---|\n"
     + "\n".join(f"| {run_label(run)} | {names(r.target_backends)}; {names(r.draft_backends)} | {r.cudagraph_mode} | "
                 f"`{r.generate().tokens_sha256[:10]}` | {r.tau:.3f} |" for run, r in records.items()))
at6, at7 = records[P.graphs_run(6)], records[P.graphs_run(7)]
same_text = at6.generate().tokens_sha256 == at7.generate().tokens_sha256
verdict(f"step 7 writes {'the same text as' if same_text else 'another text than'} step 6 "
        f"(tau {at7.tau:.3f} against {at6.tau:.3f}): planning from bounds changes no attention, only when the "
        "host may go on." + ("" if same_text else " The texts part at near-ties: the walkthrough's checks below judge "
                             "that by the near-tie rule."))

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
check("step 7 keeps step 6's CUDA-graph claims", all(claims[7][k] == claims[6][k] == "FULL_AND_PIECEWISE" for k in keys))
check("step 7 plans from bounds, copies nothing (step 6 did), its kernel reads step 6's page table, and plans "
      "nothing on target steps for the draft layers (step 6 did)", lengths[6]["copied_from_gpu"] and not lengths[7][
          "copied_from_gpu"] and lengths[7]["planned_indptr"] != lengths[7]["kernel_indptr"] == lengths[6][
          "kernel_indptr"] and all(r["planned"] for r in runner[6]) and not any(r["planned"] for r in runner[7]))
check("both engines resolved FULL_AND_PIECEWISE", {r.cudagraph_mode for r in records.values()} == {"FULL_AND_PIECEWISE"})
if session.on_gpu:
    check("FlashInfer's kernel computes the same planned from bounds (step 7) as from exact lengths",
          max(r["bounds_vs_exact"] for r in bounded) < 5e-3 and not any(r["copied_from_gpu"] for r in bounded))
else:
    skip("FlashInfer's kernel planned from bounds, against exact planning", "no CUDA GPU here")
session.check_walkthrough(live_runs);

# %% [markdown]
# ## What you saw, and what's next
#
# Step 7 plans the draft from host bounds, KV unsplit, copying nothing, and plans nothing for nobody; the graphs and
# the text stay step 6's. The draft still plans every draft step: notebook 8 plans once, then not at all.
#
# ## Appendix

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(7)
