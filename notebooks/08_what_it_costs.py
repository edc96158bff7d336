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
# # 08 · What it costs: the final FlashInfer draft, end to end
#
# Notebooks 01-04 made DFlash's draft run on FlashInfer (PR #43081); notebook 06 kept vLLM's CUDA graphs for it, and
# notebook 07 cut what its metadata build costs the host and gave the final step a rule that sends each shape to the
# faster of two FlashInfer kernels. This notebook asks what all that costs where it is decided: inside a running engine,
# per decoding step, against the draft vLLM's selector picks on Hopper, the **FLASH_ATTN draft** (the drafter's
# attention on vLLM's FlashAttention). Then what the PR makes possible on the GPU it was written for.
#
# The words this notebook uses:
#
# - **decoding step**: the target verifies one block and the drafter drafts the next, in one forward of its layers.
# - **the draft's own cost**: the two parts of a step that change with the draft's backend: the **host build** (the
#   `build()` calls that make the draft's attention metadata, notebook 02) and the **draft attention** (the draft layers'
#   attention kernels on the GPU, timed with CUDA events).
# - **the final FlashInfer draft**: step 9's. Its **route** is the kernel it runs at a shape: FlashInfer's XQA kernel
#   (no `plan()`), or step 8's fa2 kernel with its plan kept (notebook 07's rule picks).
# - **median of paired rounds, its interval**: the engines take turns; each round gives one difference (final draft
#   minus FLASH_ATTN draft); the estimate is the median over the rounds and the interval the 95 percent bootstrap interval over them. Every
#   comparison here is made this one way.
# - **A/A pair**: the same comparison between two FLASH_ATTN draft engines: what noise alone gives.
# - **share of copy bandwidth**: how fast a kernel reads the KV cache, over the rate the GPU copies memory: a kernel that
#   must read every byte once cannot exceed it.

# %% tags=["nbval-ignore-output"]
import dflash_fi.records.summary as S
from dflash_fi.figures.costs import read_costs
from dflash_fi.notebook import check, recorded, setup, show, show_source, skip, verdict

session = setup("08_what_it_costs", reads=(S.Section.BENCH_E2E, S.Section.BENCH_KERNELS))
costs = recorded(read_costs, "the draft's cost in the engine (`dflash-fi bench e2e --record`)")

# %% [markdown]
# ## Where a decoding step pays for its draft
#
# After the target's verification, vLLM's proposer builds the drafter's attention metadata on the host: one
# `build_for_drafting` for each group of the drafter's attention layers. vLLM's own lines:

# %%
from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

show_source(SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata,
            [(r"for attn_group in", r"per_layer_attn_metadata\[layer_name\]")])

# %% [markdown]
# The drafter's forward then runs its layers, and each calls its backend's `forward()` with that metadata:
# FlashAttention's kernel for the FLASH_ATTN draft, XQA or the fa2 kernel for the final one. Where the draft's backend
# is not the target's, the model runner also builds one more group each step, for the draft's layers (notebook 07). The
# benchmark times the builds with the host's clock and the draft layers' attention with CUDA events, inside running
# engines that differ only in the draft's backend: the target's work is the same in both, so what differs is the
# draft's.
#
# ## The engines it runs
#
# Every engine is a plain `LLM(...)` with DFlash's `speculative_config`; they differ in the draft's attention backend
# (`speculative_config`'s `attention_backend`) and, on the RTX 4090 path, in the KV cache and FlashAttention's version.
# Per pair of models (the embedded pair, trained, and a Qwen3-4B-shaped pair, random weights: only time means anything
# there): the FLASH_ATTN draft, its twin, and the final FlashInfer draft, all with vLLM's CUDA graphs. They take turns,
# in rounds: the first warms up, the rest are measured, and a round's difference is between neighbours.

# %%
from dflash_fi.figures.cost_engines import planned_table, recorded_engines, resolved_table
from dflash_fi.notebook import show_engine_calls
from dflash_fi.steps import FINAL_STEP

engines = recorded(recorded_engines, "the engine benchmark's engines") if costs else None
if engines:
    show_engine_calls([r.spec for r in engines])  # the calls as recorded, then what vLLM resolved in each
    show(resolved_table(engines))
    verdict("the calls above say what each engine asks for, the table what vLLM resolved: a pair's three draft-cost "
            "engines should differ in the draft's backend only, with the same CUDA-graph mode.")
else:
    show(planned_table(FINAL_STEP))
    verdict("the engines the benchmark starts, as planned; their `LLM(...)` calls and what vLLM resolved in each (the "
            "draft's backend, its CUDA-graph mode) show here once a GPU pass has recorded them.")

# %% [markdown]
# Inside each engine the benchmark measures the two parts of the draft's cost: the host build, timed with the host's
# clock around every `build()` of a decoding step (the target's builds are the same in every engine, so a difference is
# the draft's), and the draft attention, CUDA events around each draft layer's attention call, summed over the
# drafter's layers. Both are taken per decoding step and compared by paired rounds, with the A/A pair beside them to
# show how wide noise alone is.

# %% [markdown]
# ## On the GPU: the route here
#
# The final draft's route depends on the GPU it runs on (notebook 07's rule reads the compute capability). On a GPU,
# this cell says which kernel the rule sends each of the benchmark's shapes down there: the embedded pair's drafter and
# the Qwen3-4B-shaped one, at the benchmark's batches.

# %% tags=["gpu"]
from dflash_fi.lab.draft_route import final_draft_route
from dflash_fi.lab.routes import Prefill
from dflash_fi.models.recipe import TARGET_DIMS

if session.gpu_cell():
    for pair, heads in (("embedded pair", (TARGET_DIMS.num_attention_heads, TARGET_DIMS.num_key_value_heads)),
                        ("Qwen3-4B shape", (32, 8))):
        for batch in (1, 8, 32):
            route = final_draft_route(session.gpu.capability, "auto", *heads, batch)
            print(f"{pair}, {heads[0]}/{heads[1]} heads, batch {batch}: "
                  + ("XQA" if route is Prefill.XQA else "fa2, plan kept"))

# %% [markdown]
# ## The draft's cost, in one picture
#
# Left, per pair of models and batch: how much more host build and draft attention a decoding step of the final draft
# takes than one of the FLASH_ATTN draft (above 0: the final draft costs more), each a median with its interval;
# behind each, in grey, the A/A pair's interval. Under each shape, the route the final draft took there. The right
# panel shows the RTX 4090 path, described under its own heading below.

# %%
from dflash_fi.figures import cost_figure
from dflash_fi.figures.costs import figure_verdict
from dflash_fi.figures.style import pyplot

if costs:
    cost_figure(costs)
    pyplot().show()  # the picture, then what it says
    verdict(figure_verdict(costs))
else:
    print("not drawn: the draft's cost is not recorded yet (the final GPU pass records it)")

# %% [markdown]
# ## The targets, shape by shape
#
# Two targets, judged on the estimates above (their bounds print with the verdict): the final draft's host build at
# most the FLASH_ATTN draft's (steps 7-9 exist to cut it: a build that still costs more than FlashAttention's is work
# left on the host), and its attention on the fastest FlashInfer kernel at that shape (the route's rule exists to pick
# it: a slower one is a wrong route). When both hold, whatever it still loses to the FLASH_ATTN draft is the kernel's,
# and the kernels' shares of copy bandwidth say how far each is from the limit. The kernel times are the kernel benchmark's, one attention call at the drafter's heads and the
# shape's batch:

# %%
from dflash_fi.figures.costs import cost_table, targets_verdict

if costs:
    show(cost_table(costs))
    verdict(targets_verdict(costs))
else:
    print("not recorded yet: the targets' outcomes come from the final GPU pass")

# %% [markdown]
# ## What the PR makes possible: the RTX 4090 path
#
# An RTX 4090 runs vLLM's FlashAttention 2, and with an FP8 KV cache the draft's only backend there is FlashInfer:
# vLLM 0.22.1 refuses DFlash on that path (notebook 01), the PR runs it (notebook 04). The benchmark runs the path on the
# evidence GPU (vLLM's FlashAttention 2 forced, an FP8 cache, the embedded pair): no speculation, DFlash with the PR's own draft (step 4),
# and with the final draft. Tokens/s at the median step, the gains paired by round as above. It is the 4090's path,
# not a 4090:

# %%
from dflash_fi.figures.costs import gain_table

if costs and costs.gains:
    show(gain_table(costs))
    best = max(costs.gains, key=lambda g: g.final_gain.value if g.final_gain else 0)
    verdict(f"on this path DFlash with the final draft runs at {best.final_gain.value:.2f}x no speculation's tokens/s "
            f"at batch {best.batch}, its best; the last column is what steps 5-9 add to the PR's draft there.")
else:
    print("not recorded yet: the RTX 4090 path's tokens/s come from the final GPU pass")

# %% [markdown]
# ## Bottom line

# %%
from dflash_fi.figures.costs import bottom_line

if costs:
    verdict(bottom_line(costs))
else:
    print("not recorded yet: the bottom line is computed from the final GPU pass's numbers")

# %% [markdown]
# ### Check

# %%
from dflash_fi.figures.costs import route_agrees

agrees = {s.name: route_agrees(costs, s) for s in costs.shapes} if costs else {}
if agrees and None not in agrees.values():
    check("at every shape the final draft took the route its rule gives (notebook 07)", all(agrees.values()),
          ", ".join(name for name, ok in agrees.items() if not ok))
else:
    skip("the route at every shape against its rule", "the routes and the drafter's heads are not recorded yet")

# %% [markdown]
# ## What you saw, and what's next
#
# A decoding step's draft costs two things that depend on its backend, the host's metadata builds and the attention
# kernel, and the benchmark measures both inside the engine, paired against the FLASH_ATTN draft with noise shown
# beside them. Which of the two the final FlashInfer draft still pays, from the numbers:

# %%
from dflash_fi.figures.cost_engines import remaining_cost

verdict(remaining_cost(costs))

# %% [markdown]
# The course ends here; the map is in notebook 00 and the README. Again on a GPU: `dflash-fi bench kernels --record`,
# `dflash-fi bench e2e --record`, `dflash-fi notebooks --only 08`. The appendix below says where each number comes from.

# %% [markdown] tags=["appendix"]
# ## Appendix: where the notebook's numbers come from
#
# | number | written by | how it is measured |
# |---|---|---|
# | host build, ms per decoding step | `dflash-fi bench e2e --record` | host time of every attention metadata build in a step; the target's builds are the same in both engines, so the difference is the draft's |
# | draft attention, ms per decoding step | `dflash-fi bench e2e --record` | CUDA events around each draft layer's attention, summed over the drafter's layers; median over a turn |
# | final - FLASH_ATTN draft [interval], A/A pair | `dflash-fi bench e2e --record` | engines in turns; the median over paired rounds of the difference (ratio for tokens/s), a 95 percent bootstrap interval over the rounds |
# | route | `dflash-fi bench e2e --record` | the kernel the final draft's builds made at that shape, in the engine |
# | kernels per call, share of copy bandwidth | `dflash-fi bench kernels --record` | one attention call at the drafter's heads and the batch, over CUDA-graph replays; KV bytes read per second over the GPU's copy rate |
# | RTX 4090 path, tokens/s | `dflash-fi bench e2e --record` | tokens per step over the median step time, vLLM's FlashAttention 2 forced and an FP8 cache, embedded pair |
#
# Everything above was recorded by one engine benchmark:

# %% tags=["nbval-ignore-output", "appendix"]
from dflash_fi.figures.costs import recorded_on

if costs:
    print(recorded_on(costs))
else:
    print("not recorded yet: the final GPU pass records it")
