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
# # 8 · What it costs: the final FlashInfer draft, end to end
#
# Notebooks 1-4 made DFlash's draft run on FlashInfer (PR #43081); notebook 6 kept vLLM's CUDA graphs for it, and
# notebook 7 cut what its metadata build costs the host and gave the final step a rule that sends each shape to the
# faster of two FlashInfer kernels. This notebook asks what all that costs where it is decided: inside a running engine,
# per decoding step, against the draft vLLM's selector picks on Hopper, the **FLASH_ATTN draft** (the drafter's
# attention on vLLM's FlashAttention). Then what the PR makes possible on the GPU it was written for.
#
# The words this notebook uses:
#
# - **decoding step**: the target verifies one block and the drafter drafts the next, in one forward of its layers.
# - **the draft's own cost**: the two parts of a step that change with the draft's backend: the **host build** (the
#   `build()` calls that make the draft's attention metadata, notebook 2) and the **draft attention** (the draft layers'
#   attention kernels on the GPU, timed with CUDA events).
# - **the final FlashInfer draft**: step 9's. Its **route** is the kernel it runs at a shape: FlashInfer's XQA kernel
#   (no `plan()`), or step 8's fa2 kernel with its plan kept (notebook 7's rule picks).
# - **median of paired rounds, 95% interval**: the engines take turns; each round gives one difference (final draft
#   minus FLASH_ATTN draft); the estimate is the median over the rounds and the interval a bootstrap over them. Every
#   comparison here is made this one way.
# - **A/A pair**: the same comparison between two FLASH_ATTN draft engines: what noise alone gives.
# - **share of copy bandwidth**: how fast a kernel reads the KV cache, over the rate the GPU copies memory: a kernel that
#   must read every byte once cannot pass 100%.

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
# is not the target's, the model runner also builds one more group each step, for the draft's layers (notebook 7). The
# benchmark times the builds with the host's clock and the draft layers' attention with CUDA events, inside running
# engines that differ only in the draft's backend: the target's work is the same in both, so what differs is the
# draft's.

# %% [markdown]
# ## The draft's cost, in one picture
#
# Left, per pair of models and batch: how much more host build and draft attention a decoding step of the final draft
# takes than one of the FLASH_ATTN draft (above 0: the final draft costs more), each a median with its 95% interval;
# behind each, in grey, the A/A pair's interval. Under each shape, the route the final draft took there. Right, the
# RTX 4090 path, below.

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
# most the FLASH_ATTN draft's, and its attention on the fastest FlashInfer kernel at that shape. When both hold,
# whatever it still loses to the FLASH_ATTN draft is the kernel's, and the kernels' shares of copy bandwidth say how far
# each is from the limit. The kernel times are the kernel benchmark's, one attention call at the drafter's heads and the
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
# vLLM 0.22.1 refuses DFlash on that path (notebook 1), the PR runs it (notebook 4). The benchmark runs the path on the
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
    check("at every shape the final draft took the route its rule gives (notebook 7)", all(agrees.values()),
          ", ".join(name for name, ok in agrees.items() if not ok))
else:
    skip("the route at every shape against its rule", "the routes and the drafter's heads are not recorded yet")

# %% [markdown]
# ## Where the notebook's numbers come from
#
# | number | written by | how it is measured |
# |---|---|---|
# | host build, ms per decoding step | `dflash-fi bench e2e --record` | host time of every attention metadata build in a step; the target's builds are the same in both engines, so the difference is the draft's |
# | draft attention, ms per decoding step | `dflash-fi bench e2e --record` | CUDA events around each draft layer's attention, summed over the drafter's layers; median over a turn |
# | final - FLASH_ATTN draft [95%], A/A pair | `dflash-fi bench e2e --record` | engines in turns; the median over paired rounds of the difference (ratio for tokens/s), a 95% bootstrap interval over the rounds |
# | route | `dflash-fi bench e2e --record` | the kernel the final draft's builds made at that shape, in the engine |
# | kernels per call, share of copy bandwidth | `dflash-fi bench kernels --record` | one attention call at the drafter's heads and the batch, over CUDA-graph replays; KV bytes read per second over the GPU's copy rate |
# | RTX 4090 path, tokens/s | `dflash-fi bench e2e --record` | tokens per step over the median step time, vLLM's FlashAttention 2 forced and an FP8 cache, embedded pair |
#
# Everything above was recorded by one engine benchmark:

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures.costs import recorded_on

if costs:
    print(recorded_on(costs))
else:
    print("not recorded yet: the final GPU pass records it")

# %% [markdown]
# ## What you saw
#
# A decoding step's draft costs two things that depend on its backend, the host's metadata builds and the attention
# kernel, and the benchmark measures both inside the engine, paired against the FLASH_ATTN draft with noise shown
# beside them. The bottom line says which of the two the final FlashInfer draft still pays for, and what the PR's
# FlashInfer draft gives on the RTX 4090 path. The course ends here; the map is in notebook 0 and the README. Again on
# a GPU: `dflash-fi bench kernels --record`, `dflash-fi bench e2e --record`, `dflash-fi notebooks --only 08`.
