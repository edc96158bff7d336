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
# # 00 · DFlash, and why vLLM 0.22.1 will not run its draft on FlashInfer
#
# Speculative decoding lets a small *draft* model propose tokens that the big *target* model checks in one forward.
# DFlash drafts a whole **block** at once: the last accepted token (the *anchor*) and 15 mask tokens, all 15 filled in
# one forward of the drafter, so every token of the block sees every other: DFlash's draft attention is **non-causal**.
# vLLM 0.22.1 refuses its FlashInfer backend for such a layer, and on an RTX 4090 with an FP8 KV cache then has no
# backend for the draft at all. This tutorial rebuilds the fix (vLLM PR #43081) in small verified steps, then goes
# where upstream went next.

# %% tags=["nbval-ignore-output"]
import dflash_fi.records.summary as summary
from dflash_fi.notebook import check, setup, show, verdict, wrapped_lines

session = setup("00_dflash_and_the_problem", reads=(summary.Section.WALKTHROUGH,))  # its reference, cited below

# %% [markdown]
# ## The model pair, and non-causal block attention
#
# A tiny real pair in HF format, trained here on CPython's standard library: a byte-level Qwen3 target and a 2-layer
# DFlash drafter. Below, the keys each of the 16 block queries (rows) sees: DFlash was trained with the left mask; a
# backend that ignores the non-causal flag computes the right one.

# %% tags=["nbval-ignore-output"]
import json
import torch
from matplotlib import pyplot as plt

from dflash_fi.figures import block_masks
from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_TARGET
from dflash_fi.reference.drafter import CAUSAL, NON_CAUSAL, block_attention_mask
from dflash_fi.reference.weights import load_pair, param_count

drafter_config = json.loads((DEFAULT_DRAFTER / "config.json").read_text())
target, drafter = load_pair(DEFAULT_TARGET, DEFAULT_DRAFTER)
print(f"target {param_count(target):,} parameters, drafter {param_count(drafter):,}; dflash_config "
      f"{drafter_config['dflash_config']}, block_size {drafter_config['block_size']}")
block_masks().set_size_inches(10, 3.1)
plt.show()  # the picture, then what it says
masks = {mode: block_attention_mask(torch.tensor([[8]]), 8, mode)[0] for mode in (NON_CAUSAL, CAUSAL)}
block_keys = {mode: m[:, 8:].sum(1).tolist() for mode, m in masks.items()}
verdict(f"with non-causal attention every block query sees all {block_keys[NON_CAUSAL][0]} block "
        f"tokens; with causal attention the anchor sees {block_keys[CAUSAL][0]} (itself) and mask 1 sees "
        f"{block_keys[CAUSAL][1]}: the drafts that matter most are made nearly blind.")

# %% [markdown]
# ## Words used from here on
#
# Two carry the course: **tau** (next section) and the **metadata builder**, whose `build()` turns each batch into
# what the backend's kernels need. The rest, folded:

# %%
from IPython.display import display

from dflash_fi.figures.listings import folded_markdown
from dflash_fi.lab.glossary import glossary, glossary_table, words_of
from dflash_fi.steps import PR_43081_STEPS as PR

terms = glossary()
display(folded_markdown(f"The glossary: {len(terms)} words (open it)", glossary_table(terms)))
pr = words_of(PR, terms)  # the words whose patterns occur in the sources of the notebooks that teach the PR
verdict(f"notebooks {pr.notebooks[0][:2]}-{pr.notebooks[-1][:2]} (the PR) use {len(pr.used)} of them beyond the "
        f"{len(pr.basic)} basic ones: " + "; ".join(t.term for t in pr.used) + ".")

# %% [markdown]
# ## How success is counted: tau
#
# The target verifies the anchor and 15 drafts in one forward, accepts the longest run equal to its own greedy choice,
# and adds one token: tau is the tokens per target forward; the output must equal plain greedy output. The reference
# decoder does this in plain PyTorch (fp32): what vLLM must show when a backend is right, and when it is not.

# %% tags=["nbval-ignore-output"]
from dflash_fi.models import load_prompts
from dflash_fi.notebook import LIVE_NEW_TOKENS, LIVE_PROMPTS
from dflash_fi.reference.evaluate import evaluate_pair

# On a GPU: the prompt set notebooks 1-4's live engines decode, so their reference tau is this one. On the CPU: fewer.
HARDWARE = {"cpu": "CPU", "cuda": "GPU"}
prompts, new_tokens, device = (LIVE_PROMPTS, LIVE_NEW_TOKENS, "cuda") if session.on_gpu else (6, 64, "cpu")
reference = evaluate_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=prompts), new_tokens, device=device)
prompt_set = f"{reference['n_prompts']} held-out prompts x {reference['n_new_tokens']} tokens"
later = summary.read().walkthrough().reference  # the evidence pass's reference: what notebooks 1-4 cite
with wrapped_lines():
    print(f"{prompt_set}, fp32 on the {HARDWARE[device]}: tau non-causal {reference['tau_noncausal']:.3f}, causal "
          f"{reference['tau_causal']:.3f}; speculative output == greedy output on {reference['lossless_fraction']:.0%} "
          "of prompts")
    print(f"the walkthrough's set, which notebooks 1-4 cite from the evidence: {later['n_prompts']} prompts x "
          f"{later['n_new_tokens']} tokens, tau non-causal {later['tau_noncausal']:.3f}, causal "
          f"{later['tau_causal']:.3f}; their live engines decode {LIVE_PROMPTS} prompts x {LIVE_NEW_TOKENS} tokens")
verdict(f"on {prompt_set}, a backend that silently plans the draft causal costs "
        f"{reference['tau_noncausal'] - reference['tau_causal']:.2f} tokens per target forward "
        f"({1 - reference['tau_causal'] / reference['tau_noncausal']:.0%} fewer), and changes no output: only tau "
        "can tell. Another prompt set gives another tau: each notebook names its set.")

# %% [markdown]
# ## The problem: an RTX 4090 with an FP8 KV cache
#
# On an RTX 4090 (SM 8.9) with an FP8 KV cache, stock vLLM 0.22.1's selector finds the DFlash draft no backend: the
# reasons, from vLLM's own `validate_configuration`, on vLLM's real `CudaPlatform` pretending to be a 4090 (notebook 1
# shows the line that refuses FLASHINFER: `if use_non_causal and not cls.supports_non_causal()`):

# %%
from dflash_fi.figures.attention import refusal_verdict
from dflash_fi.lab.selector import backend_verdicts
from dflash_fi.vocabulary import RTX_4090

stock_4090_fp8 = backend_verdicts(0, RTX_4090, "fp8", "draft")  # the GPU's priority list, in order
verdict(refusal_verdict(stock_4090_fp8))

# %% [markdown]
# ## The map
#
# What is missing is plumbing in vLLM's FlashInfer backend (its kernels do non-causal attention), a few hunks a step:

# %%
from dflash_fi.figures.path import course_map
from dflash_fi.notebook import NOTEBOOK_OF_STEP
from dflash_fi.steps import STEPS
from dflash_fi.upstream import MERGED, TODAY

course = course_map()  # each notebook's heading, and the steps it writes (dflash_fi.steps.course), hunks counted
show(course.table)
verdict(f"PR #43081 is {sum(course.hunks[s] for s in PR)} hunks, steps {PR[0]}-{PR[-1]}, in notebooks "
        f"{NOTEBOOK_OF_STEP[PR[0]][:2]}-{NOTEBOOK_OF_STEP[PR[-1]][:2]}; the next says where it went (merged in vLLM "
        f"{MERGED}; {TODAY} today); {' and '.join(course.after)} write steps {PR[-1] + 1}-{STEPS[-1]}, beyond it; "
        f"the last measures what the final draft costs. Notebooks {', '.join(course.live)} run small vLLM engines "
        "live on a GPU (without one they show the committed evidence).")

# %% [markdown]
# ### Check

# %% tags=["gpu", "nbval-ignore-output"]
if session.gpu_cell():  # the reference decoder is plain PyTorch: CPU and GPU agree on one small set
    small = {where: evaluate_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=6), 64, device=where)
             for where in ("cpu", "cuda")}
    gap = abs(small["cuda"]["tau_noncausal"] - small["cpu"]["tau_noncausal"]) / small["cpu"]["tau_noncausal"]
    print("6 prompts x 64 tokens: tau non-causal " + ", ".join(f"{r['tau_noncausal']:.3f} on the {HARDWARE[where]}"
                                                              for where, r in small.items()))
    check("the reference decoder on the GPU gives the CPU's tau within 5%", gap <= 0.05, f"{gap:.2%} apart")

# %% tags=["nbval-ignore-output"]
refused = [v["backend"] for v in stock_4090_fp8 if v["reasons"]]
with wrapped_lines():
    check("the reference decoder: non-causal tau above causal tau, both above 1, output lossless",
          reference["tau_noncausal"] > reference["tau_causal"] > 1.0 and reference["lossless_fraction"] >= 0.95,
          f"{reference['tau_noncausal']:.3f} > {reference['tau_causal']:.3f}, lossless {reference['lossless_fraction']:.0%}")
    check("stock vLLM 0.22.1 has no backend for the draft on an RTX 4090 with FP8",
          all(v["reasons"] for v in stock_4090_fp8) and {"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"} <= set(refused),
          ", ".join(refused) + " refuse")

# %% [markdown]
# ## What you saw, and what's next
#
# DFlash's draft needs non-causal block attention; a causal plan costs tau, not correctness. On an RTX 4090 with FP8,
# stock vLLM has no backend for the draft at all. Next, notebook 1: how vLLM's selector decides, and step 1.
