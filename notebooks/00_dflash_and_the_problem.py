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
# # 0 · DFlash, and why vLLM 0.22.1 will not run its draft on FlashInfer
#
# Speculative decoding lets a small *draft* model propose tokens that the big *target* model checks in one forward.
# DFlash drafts a whole **block** at once: the last accepted token (the *anchor*) and 15 mask tokens, all 15 filled in
# one forward of the drafter, so every token of the block sees every other: DFlash's draft attention is **non-causal**.
# vLLM 0.22.1 refuses its FlashInfer backend for such a layer, and on an RTX 4090 with an FP8 KV cache then has no
# backend for the draft at all. This tutorial rebuilds the fix (vLLM PR #43081) in small verified steps, then goes
# where upstream went next. Here: the model pair, the words, the problem, and the map of the steps.

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, show, verdict

session = setup("00_dflash_and_the_problem")

# %% [markdown]
# ## The model pair, and non-causal block attention
#
# A tiny real pair in HF format, trained here on CPython's standard library: a byte-level Qwen3 target and a 2-layer
# DFlash drafter. Below, the keys each of the 16 block queries (rows) sees: DFlash was trained with the left mask; a
# backend that ignores the non-causal flag computes the right one.

# %% tags=["nbval-ignore-output"]
import json
import torch
from dflash_fi.figures import block_masks
from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_TARGET
from dflash_fi.reference.drafter import CAUSAL, NON_CAUSAL, block_attention_mask
from dflash_fi.reference.weights import load_pair, param_count

drafter_config = json.loads((DEFAULT_DRAFTER / "config.json").read_text())
target, drafter = load_pair(DEFAULT_TARGET, DEFAULT_DRAFTER)
print(f"target {param_count(target):,} parameters, drafter {param_count(drafter):,}; dflash_config "
      f"{drafter_config['dflash_config']}, block_size {drafter_config['block_size']}")
block_masks().set_size_inches(10, 3.1)
masks = {mode: block_attention_mask(torch.tensor([[8]]), 8, mode)[0] for mode in (NON_CAUSAL, CAUSAL)}
block_keys = {mode: m[:, 8:].sum(1).tolist() for mode, m in masks.items()}
verdict(f"with non-causal attention every block query sees all {block_keys[NON_CAUSAL][0]} block "
        f"tokens; with causal attention the anchor sees {block_keys[CAUSAL][0]} (itself) and mask 1 sees "
        f"{block_keys[CAUSAL][1]}: the drafts that matter most are made nearly blind.")

# %% [markdown]
# ## Words used from here on
#
# One glossary for the whole course, folded: open it when a word is unclear (rows on vLLM's enums come from its source).

# %%
from IPython.display import display

from dflash_fi.figures.listings import folded_markdown
from dflash_fi.lab.glossary import glossary, glossary_table

terms = glossary()
display(folded_markdown(f"The glossary: {len(terms)} words (open it)", glossary_table(terms)))
verdict(f"{len(terms)} words, tau and the metadata builder among them; the rows on " + " and ".join(
    f"`{t.source.rsplit('.', 1)[1]}`" for t in terms if t.source) + " are read from vLLM's own enums.")

# %% [markdown]
# ## How success is counted: tau
#
# The target verifies the anchor and 15 drafts in one forward, accepts the longest run equal to its own greedy choice,
# and adds one token: tau is the tokens per target forward; the output must equal plain greedy output. The reference
# decoder does this in plain PyTorch (fp32): what vLLM must show when a backend is right, and when it is not.

# %% tags=["nbval-ignore-output"]
from dflash_fi.models import load_prompts
from dflash_fi.reference.evaluate import evaluate_pair

reference = evaluate_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=6), 64)
print(f"{reference['n_prompts']} held-out prompts x {reference['n_new_tokens']} tokens, fp32 on the CPU: "
      f"tau non-causal {reference['tau_noncausal']:.3f}, causal {reference['tau_causal']:.3f}, "
      f"speculative output == greedy output on {reference['lossless_fraction']:.0%} of prompts")
verdict(f"a backend that silently plans the draft causal costs "
        f"{reference['tau_noncausal'] - reference['tau_causal']:.2f} tokens per target forward "
        f"({1 - reference['tau_causal'] / reference['tau_noncausal']:.0%} fewer), and changes no output: only tau "
        "can tell.")

# %% [markdown]
# ## The problem: an RTX 4090 with an FP8 KV cache
#
# On an RTX 4090 (SM 8.9) with an FP8 KV cache, stock vLLM 0.22.1's selector finds the DFlash draft no backend: the
# reasons, from vLLM's own `validate_configuration`, on vLLM's real `CudaPlatform` pretending to be a 4090:

# %%
from dflash_fi.lab.selector import backend_verdicts
from dflash_fi.vocabulary import RTX_4090

stock_4090_fp8 = backend_verdicts(0, RTX_4090, "fp8", "draft")
for v in stock_4090_fp8:
    print(f"{v['priority']}. {v['backend']:<15} " + ("refused: " + "; ".join(v["reasons"]) if v["reasons"] else "accepted"))
refused = [v["backend"] for v in stock_4090_fp8 if v["reasons"]]
reasons = sorted({reason for v in stock_4090_fp8 for reason in v["reasons"]})
verdict(f"all {len(refused)} backends of the list refuse, each for one of {len(reasons)} reasons: "
        + " or ".join(f"'{r}'" for r in reasons) + ". vLLM's FlashAttention 2 (all a 4090 has) stores no FP8 KV; "
        "the others refuse non-causal attention. The draft has no backend.")

# %% [markdown]
# ## The map
#
# FlashInfer's kernels compute non-causal attention well; what is missing is plumbing in vLLM's FlashInfer backend.
# One row a step (its module's title); `pytest -m stepN` runs its tests, its notebook shows its hunks one at a time.

# %%
import re

from dflash_fi.notebook import NOTEBOOK_OF_STEP
from dflash_fi.stack import REPO_ROOT
from dflash_fi.steps import PR_43081_STEPS as PR, STEPS, step_module, step_title

hunks = {s: len(step_module(s).HUNKS) - len(step_module(s - 1).HUNKS if s else ()) for s in STEPS}
title = {s: step_title(s).split(" - ", 1)[1].split(":")[0].rstrip(".") for s in STEPS}
show("| step | what it changes | hunks | notebook |\n|---|---|---|---|\n" + "\n".join(
    f"| {s} | {title[s]}{' (PR #43081)' * (s in PR)} | {hunks[s]} | {NOTEBOOK_OF_STEP[s][:2]} |"
    for s in STEPS))
notebooks = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
live = [p.stem[:2] for p in notebooks if re.search(r"setup\([^)]*live=", p.read_text())]
verdict(f"PR #43081 is {sum(hunks[s] for s in PR)} hunks in steps {PR[0]}-{PR[-1]}; steps {PR[-1] + 1}-{STEPS[-1]} "
        f"go where upstream went next and past it. Notebooks {', '.join(live)} run small vLLM engines live on a GPU "
        f"(without one they show the committed evidence); {notebooks[-2].stem[:2]} measures what the final draft "
        f"costs, {notebooks[-1].stem[:2]} reads today's vLLM.")

# %% tags=["gpu", "nbval-ignore-output"]
if session.gpu_cell():  # the reference decoder on the GPU (fp32, CUDA): independent of vLLM, on vLLM's machine
    gpu_reference = evaluate_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=6), 64, device="cuda")
    gap = abs(gpu_reference["tau_noncausal"] - reference["tau_noncausal"]) / reference["tau_noncausal"]
    print(f"on {session.gpu.name}: tau non-causal {gpu_reference['tau_noncausal']:.3f}, "
          f"causal {gpu_reference['tau_causal']:.3f}, lossless {gpu_reference['lossless_fraction']:.0%}")
    check("the reference decoder on the GPU predicts the CPU's tau within 5%", gap <= 0.05, f"{gap:.2%} apart")

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import wrapped_lines

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
