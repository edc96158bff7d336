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
# # 5 · What upstream did next: CUDA-graph claims, #48167, and the draft's kernel
#
# PR #43081 made the FlashInfer draft correct. What came after is about speed, and starts with **CUDA graphs**:
# vLLM records a model's kernels once and replays them, which removes the launch overhead that dominates small
# batches. It resolves one graph mode for the whole engine from the weakest attention backend in it, *draft
# layers included*, by asking each backend's builder what it can replay (`get_cudagraph_support`).
#
# This notebook reads those claims for each step, takes upstream's fix of the claim (vLLM PR #48167, step 5)
# together with a faster kernel for the draft, and says where upstream stands now. Notebook 6 goes past it:
# what the FlashInfer draft costs, and steps 6 and 7, which upstream has not taken.

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, show, verdict

# The engines of the section "On the GPU" start now, in the background: each takes most of a minute to start.
live_runs = [P.NO_SPEC_GRAPHS, P.FLASH_ATTN_GRAPHS, P.STEP4_GRAPHS, P.step_run(4), P.step_run(5)]
session = setup("05_what_upstream_did_next", live=live_runs)

# %% [markdown]
# ## The names: what a builder claims, what an engine runs
#
# Notebook 0's glossary has both enums, generated from vLLM; here they are side by side, in the terms this
# notebook needs. A metadata builder answers `get_cudagraph_support()` (the second box of notebook 1's picture)
# with an `AttentionCGSupport`: which batches a *full* CUDA graph of its attention may hold. The engine's
# `CUDAGraphMode` says, for uniform decode batches and for all other batches, whether a step replays a full graph, a
# piecewise one, or runs eagerly:

# %%
from vllm.config.compilation import CUDAGraphMode
from vllm.v1.attention.backend import AttentionCGSupport

FULL_GRAPH_HOLDS = {  # an AttentionCGSupport claim: the batches a full graph of this backend may hold
    "ALWAYS": "any batch, prefills and decodes mixed",
    "UNIFORM_BATCH": "batches whose requests all have the same query length, such as a verify step (1 + 15 each)",
    "UNIFORM_SINGLE_TOKEN_DECODE": "plain decode batches only (one query token per request)",
    "NEVER": "no batch: attention always runs eagerly",
}
RUNTIME = {"NONE": "eager", "PIECEWISE": "piecewise graph", "FULL": "full graph"}

show("| `AttentionCGSupport` | a full graph may hold |\n|---|---|\n" + "\n".join(
    f"| `{claim.name}` | {FULL_GRAPH_HOLDS[claim.name]} |" for claim in AttentionCGSupport))
show("| `CUDAGraphMode` | uniform decode batches | other batches |\n|---|---|---|\n" + "\n".join(
    f"| `{mode.name}` | {RUNTIME[mode.decode_mode().name]} | {RUNTIME[mode.mixed_mode().name]} |"
    for mode in CUDAGraphMode))
verdict(f"vLLM's default mode, {CUDAGraphMode.FULL_AND_PIECEWISE.name}, replays full graphs of uniform decode "
        "batches, which with speculative decoding are verify steps of 16 tokens per request. A backend that can "
        f"hold only {AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE.name} batches in a full graph cannot hold "
        "those, so the engine falls back to piecewise graphs: the table below shows when.")

# %% [markdown]
# ## What each step claims about CUDA graphs, and what the engine resolves
#
# vLLM 0.22.1's model runner asks every attention backend's builder for `get_cudagraph_support(...)`, with the
# engine's (the target's) config, takes the weakest, and hands it to
# `CompilationConfig.resolve_cudagraph_mode_and_sizes`. Both run here, on the CPU under pretended GPUs, for an
# engine with a FLASH_ATTN target and a FLASHINFER draft. The column "draft config" is what FlashInfer would
# answer if asked with DFlash's draft config (`use_non_causal=True`), as later vLLM drafters ask:

# %%
from dflash_fi.lab.graphs import cudagraph_claims, format_claims
from dflash_fi.steps import FINAL_STEP
from dflash_fi.vocabulary import BLACKWELL, HOPPER

claims = [cudagraph_claims(step, capability, trtllm) for step in (4, 5, 6, FINAL_STEP)
          for capability, trtllm in ((HOPPER, False), (BLACKWELL, True))]
show(format_claims(claims))
by_step = {(c["step"], c["capability"]): c for c in claims}
verdict(f"on SM 9.0 step 4 and step 5 claim {by_step[4, '9.0']['flashinfer_claim']}, and the engine "
      f"resolves {by_step[4, '9.0']['resolved_mode']}: a FlashInfer draft costs the whole engine its full graphs. On "
      f"SM 10.0 step 4 claims {by_step[4, '10.0']['flashinfer_claim_draft_config']} even for the draft's config, "
      f"which step 5 corrects to {by_step[5, '10.0']['flashinfer_claim_draft_config']}. Steps 6 and {FINAL_STEP} "
      f"resolve {by_step[6, '9.0']['resolved_mode']} (notebook 6).")
for c in claims:
    for warning in c["vllm_warnings"]:
        print(f"step {c['step']}, SM {c['capability']}: vLLM says: {warning.message}")

# %% [markdown]
# ## Step 5, hunk by hunk: vLLM PR #48167, and the draft's kernel
#
# Without TRTLLM (SM 9.0), FlashInfer claims `UNIFORM_SINGLE_TOKEN_DECODE`: a uniform batch of 16-token
# requests runs on the prefill wrapper, which a captured graph cannot replay after a new `plan()`. With
# TRTLLM (Blackwell), step 4 claims `UNIFORM_BATCH`, even when asked with the draft's own config, though a
# non-causal batch never runs on TRTLLM. Upstream's fix makes the claim honest for non-causal attention:

# %%
from dflash_fi.notebook import show_hunks

show_hunks(5, only=[3])

# %% [markdown]
# The builder reads causality from the config it is asked with: DFlash's draft config says `use_non_causal=True`
# (notebook 1). In vLLM 0.22.1 the runner asks with the target's config and the drafter captures piecewise graphs
# only, so the wrong claim never bites here; it does in later vLLM, whose drafters honour their own backend's claim.
#
# The other two hunks choose the draft's kernel. PR #43081's non-causal wrapper lets FlashInfer choose (`auto`:
# FlashInfer's fa3 kernel on SM 9.0 for a bf16 cache, notebook 3). For 16-query blocks FlashInfer's fa2 kernel is
# the faster one there (notebook 8 measures it), and its fa3 kernel has no form for the bf16 queries vLLM keeps on
# an FP8 cache; on every other GPU `auto` picks fa2 anyway. So the draft's wrapper asks for fa2, by name:

# %%
show_hunks(5, only=[1, 2])

# %% [markdown]
# One constant, at the top of the module, so that the choice and its reason sit in one place; the wrapper's
# constructor is the only line that reads it. Nothing else of the draft's path changes.

# %% [markdown]
# ## Where upstream stands now
#
# Upstream's answer was to stop the FlashInfer draft from claiming graphs it cannot replay: in vLLM v0.26.0 and
# later, whose drafters honour their own backend's claim, #48167 makes a FlashInfer DFlash draft run its attention
# eagerly, outside the graphs. Upstream has not taken the other way out, prefill wrappers that a graph can replay;
# notebook 6 does (step 6), and notebooks 6 and 7 remove what the FlashInfer draft still costs on the host (steps 7
# and 8). This is upstream's history as its pull requests tell it, not run here (this tutorial pins vLLM 0.22.1).
#
# ## On the GPU: what the engine resolves, live
#
# Three engines with vLLM's default compilation and CUDA graphs (no speculation, the FLASH_ATTN draft, step 4's
# FlashInfer draft) and two without graphs (steps 4 and 5, to see that step 5's kernel changes no output), started in
# the first cell (notebook 0, "Numbers you will see"):

# %%
from dflash_fi.evidence.live import show_engine_calls

show_engine_calls(live_runs)

# %% tags=["gpu"]
live = session.run_live(live_runs)

# %% tags=["nbval-ignore-output"]
from dflash_fi.engine.identity import label
from dflash_fi.notebook import wrapped_lines

records, reference, source = session.evidence(live_runs)
with wrapped_lines():
    print(source)
    for run in live_runs[:3]:
        print(f"  {label(run):<40} resolved {records[run].cudagraph_mode}")
    checks = session.check(records, reference)
verdict(f"the FLASH_ATTN draft keeps {records[P.FLASH_ATTN_GRAPHS].cudagraph_mode}, step 4's "
      f"FlashInfer draft turns the same engine {records[P.STEP4_GRAPHS].cudagraph_mode}, as the table above "
      "predicted from vLLM's own resolution code.")

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
from dflash_fi.steps import backend_module

check("step 4 on SM 9.0 resolves PIECEWISE, step 6 FULL_AND_PIECEWISE",
      by_step[4, "9.0"]["resolved_mode"] == "PIECEWISE" and by_step[6, "9.0"]["resolved_mode"] == "FULL_AND_PIECEWISE")
check("step 4 claims UNIFORM_BATCH for the draft's config on Blackwell; step 5 (#48167) does not",
      by_step[4, "10.0"]["flashinfer_claim_draft_config"] == "UNIFORM_BATCH"
      and by_step[5, "10.0"]["flashinfer_claim_draft_config"] == "UNIFORM_SINGLE_TOKEN_DECODE")
check("the glossary names every AttentionCGSupport claim and CUDAGraphMode of vLLM 0.22.1",
      set(FULL_GRAPH_HOLDS) == {c.name for c in AttentionCGSupport}
      and {m.decode_mode().name for m in CUDAGraphMode} | {m.mixed_mode().name for m in CUDAGraphMode} <= set(RUNTIME))
check("step 5's draft kernel is FlashInfer's fa2", backend_module(5).NON_CAUSAL_PREFILL_BACKEND == "fa2")
check(f"the walkthrough's {len(checks)} checks for graph modes and step 5 pass",
      bool(checks) and all(c.passed for c in checks),
      "live" if session.live else "committed records")

# %% [markdown]
# ## What you saw, and what's next
#
# - vLLM resolves one graph mode for the whole engine; with step 4's FlashInfer draft an SM 9.0 engine loses its
#   full graphs.
# - vLLM PR #48167 (step 5) makes the claim honest on Blackwell; step 5 also gives the draft FlashInfer's faster
#   fa2 kernel.
# - Upstream since v0.26.0 runs a FlashInfer DFlash draft's attention eagerly.
#
# Next, notebook 6: keeping the full graphs with a FlashInfer draft (step 6), and step 7, which takes the host work
# that waits away; notebook 7 plans once (step 8); notebook 8 says what is left to pay.

# %% [markdown]
# ## Appendix

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(5)
