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
# Notebooks 01-07 made DFlash's draft run on FlashInfer, kept its CUDA graphs and cut its host build. This one measures,
# inside running engines, what a **decoding step** (the target verifies a block, then the drafter drafts the next: one
# forward each) pays for the draft on the **final FlashInfer draft** (step 9's) against the **FLASH_ATTN draft**
# (vLLM's FlashAttention, what its selector picks on Hopper); then what the PR makes possible on an RTX 4090's path.

# %% tags=["nbval-ignore-output"]
import dflash_fi.records.summary as S
from dflash_fi.figures.costs import read_costs
from dflash_fi.notebook import check, recorded, setup, show, show_source, skip, verdict, wrapped_lines

session = setup("08_what_it_costs", reads=(S.Section.BENCH_E2E, S.Section.BENCH_KERNELS))
with wrapped_lines():
    costs = recorded(read_costs, "the draft's cost in the engine, which the figure, tables and bottom line below read")

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
# Then each draft layer calls its backend's `forward()` with that metadata: FlashAttention's kernel for the FLASH_ATTN
# draft; for the final one, its **route**, the kernel notebook 07's rule picks at that shape (XQA, or step 8's fa2
# with its plan kept). So the **draft's own cost** has two parts: the **host build** (every `build()` of a step, timed
# with the host's clock) and the **draft attention** (CUDA events around each draft layer's attention, summed).

# %% [markdown]
# ## The engines it runs
#
# Per pair of models (the embedded pair, trained; a Qwen3-4B-shaped pair, random weights: only its times mean anything):
# the FLASH_ATTN draft, its twin (the **A/A pair**: noise alone) and the final draft, with CUDA graphs, taking turns in
# rounds; each comparison below is a median over the rounds with its bootstrap interval:

# %%
from dflash_fi.figures.cost_engines import engines_verdict, planned_table, recorded_engines, resolved_columns
from dflash_fi.notebook import show_engine_calls
from dflash_fi.steps import FINAL_STEP

engines = recorded(recorded_engines, "the engine benchmark's engines") if costs else None
if engines:
    show_engine_calls([r.spec for r in engines], resolved_columns(engines))  # the calls, and what vLLM resolved
    verdict(engines_verdict(engines, FINAL_STEP))
else:
    show(planned_table(FINAL_STEP))
    verdict("the engines the benchmark starts, as planned; their `LLM(...)` calls and what vLLM resolved in each (the "
            "draft's backend, its CUDA-graph mode) show here once a GPU pass has recorded them.")

# %% [markdown]
# ## The draft's cost, in one picture
#
# Left, per pair and batch: the final draft's host build and draft attention per decoding step minus the FLASH_ATTN
# draft's (above 0: it costs more), with the A/A pair's interval behind each in grey and the route under each shape.
# Right: the RTX 4090 path (its own heading below).

# %%
from dflash_fi.figures import cost_figure
from dflash_fi.figures.cost_verdicts import figure_verdict
from dflash_fi.figures.style import pyplot

if costs:
    cost_figure(costs)
    pyplot().show()  # the picture, then what it says
    verdict(figure_verdict(costs))
else:
    print("not recorded yet: the GPU pass measures it")

# %% [markdown]
# ## The targets, shape by shape
#
# Two targets: the final draft's host build at most the FLASH_ATTN draft's (what steps 7-9 are for; notebook 07 timed
# the builders alone, this is whether the difference shows inside an engine), and its attention
# on the fastest FlashInfer kernel at that shape (what the route's rule is for). When both hold, what it still loses is
# the kernel's; the kernel benchmark's times at each shape say how far each kernel is from the limit, as its **share
# of copy bandwidth** (KV bytes read per second over the GPU's copy rate, which a kernel reading each byte once cannot
# beat):

# %%
from dflash_fi.figures.cost_verdicts import targets_verdict
from dflash_fi.figures.costs import cost_table

if costs:
    show(cost_table(costs))
    verdict(targets_verdict(costs))
else:
    print("not recorded yet: the GPU pass measures it")

# %% [markdown]
# ## What the PR makes possible: the RTX 4090 path
#
# On an RTX 4090 (FlashAttention 2) with an FP8 cache the draft's only backend is FlashInfer: vLLM 0.22.1 refuses DFlash
# there (notebook 01), the PR runs it (notebook 04). The benchmark runs that path on the evidence GPU (FlashAttention 2
# forced, FP8 cache, the embedded pair; the 4090's path, not a 4090): no speculation, the PR's step-4 draft, the final
# draft. Tokens/s at the median step, gains paired by round:

# %%
from dflash_fi.figures.cost_engines import path_modes
from dflash_fi.figures.gains import gain_table, gain_verdict

if costs and costs.gains:
    show(gain_table(costs))
    verdict(gain_verdict(costs, path_modes(engines or [], FINAL_STEP)))  # the modes: what vLLM resolved
else:
    print("not recorded yet: the GPU pass measures it")

# %% [markdown]
# ### Check

# %%
from dflash_fi.figures.cost_engines import route_agrees, routes_checked

routes = routes_checked(costs)  # (all agree, the shapes where one does not); None before a GPU pass records them
if routes:
    agree, where_not = routes
    check("at every shape the final draft took the route its rule gives (notebook 07)", agree, where_not)
else:
    skip("the route at every shape against its rule", "the routes and the drafter's heads are not recorded yet")

# %% tags=["gpu"]
if session.gpu_cell() and costs:  # the rule read at this GPU's compute capability, against the routes recorded
    check(f"on this GPU (SM {session.gpu.sm}) the rule sends each shape where the benchmark's engines went",
          all(route_agrees(costs, s, session.gpu.capability) for s in costs.shapes))

# %% [markdown]
# ## What you saw, and what's next
#
# A draft costs a decoding step two things that depend on its backend, the host build and the attention kernel,
# measured here inside the engine against the FLASH_ATTN draft, with the A/A pair's noise beside them. The bottom line:

# %%
from dflash_fi.figures.cost_verdicts import bottom_line

verdict(bottom_line(costs))

# %% [markdown]
# The course ends here; the map is in notebook 00 and the README. Again on a GPU: `dflash-fi bench kernels --record`,
# `dflash-fi bench e2e --record`, `dflash-fi notebooks --only 08`. The appendix at the end, unfolded, says where each number comes from.

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
