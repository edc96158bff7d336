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
# Speculative decoding lets a small *draft* model propose tokens that the big *target* model then checks in
# one forward pass. DFlash drafts a whole **block** at once: the last accepted token (the *anchor*) followed
# by 15 mask tokens, and one forward of the drafter fills in all 15. For that to work, every token of the
# block must see every other token of the block: DFlash's draft attention is **non-causal**.
#
# This tutorial rebuilds, one verified step at a time, the vLLM change that lets that draft run on the
# FlashInfer attention backend (vLLM pull request, PR #43081), then goes on where upstream went next. This first
# notebook sets the scene: the model pair we use, what "non-causal block attention" means, the words the
# notebooks use, how success is measured, why the problem matters most on an RTX 4090, and which numbers you
# will meet in the notebooks after it.

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, show, verdict

session = setup("00_dflash_and_the_problem")

# %% [markdown]
# ## The model pair
#
# A real DFlash pair (say Qwen3-4B and its 0.5B drafter) needs a hub download and a large GPU. This package
# ships a tiny pair instead, trained here on CPython's standard library: a byte-level Qwen3 target and a
# 2-layer DFlash drafter. They are real models in HF format, so the same files load in the pure-PyTorch
# reference, in transformers and in vLLM. The drafter's `dflash_config` says which target layers feed it
# (its *context*) and which token id is the mask; `block_size` is the block it drafts.

# %%
import json

from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_TARGET
from dflash_fi.reference.weights import load_pair, param_count

drafter_config = json.loads((DEFAULT_DRAFTER / "config.json").read_text())
target, drafter = load_pair(DEFAULT_TARGET, DEFAULT_DRAFTER)
print(f"target:  {param_count(target):,} parameters, {target.d.num_hidden_layers} layers, "
      f"{target.d.num_attention_heads}/{target.d.num_key_value_heads} heads of {target.d.head_dim}")
print(f"drafter: {param_count(drafter):,} parameters (+ the target's embedding and lm_head), "
      f"{drafter.d.num_hidden_layers} layers")
print("dflash_config:", drafter_config["dflash_config"], " block_size:", drafter_config["block_size"])

# %% [markdown]
# ## Non-causal block attention, as a picture
#
# Each of the 16 block queries (rows) may look at the context tokens strictly before the anchor, and at the
# block. DFlash was trained with the left mask: every block token sees the whole block. A backend that
# ignores the non-causal flag computes the right one: block token *k* sees only block tokens 0..*k*.

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures import block_masks

block_masks();

# %%
from dflash_fi.reference.drafter import CAUSAL, NON_CAUSAL, block_attention_mask
import torch

masks = {mode: block_attention_mask(torch.tensor([[8]]), 8, mode)[0] for mode in (NON_CAUSAL, CAUSAL)}
block_keys = {mode: m[:, 8:].sum(1).tolist() for mode, m in masks.items()}
verdict(f"with non-causal attention every block query sees all {block_keys[NON_CAUSAL][0]} block "
      f"tokens; with causal attention the anchor sees {block_keys[CAUSAL][0]} (itself) and mask 1 sees "
      f"{block_keys[CAUSAL][1]}: the drafts that matter most are made nearly blind.")

# %% [markdown]
# ## Words used from here on
#
# The notebooks use these words and no other jargon; come back here when one is unclear. Where vLLM defines a
# word in its own code, the row is generated from vLLM 0.22.1's source.

# %%
from dflash_fi.lab.glossary import glossary, glossary_table

show(glossary_table())
terms = glossary()
verdict(f"{len(terms)} words. The rows on " + " and ".join(f"`{t.source.rsplit('.', 1)[1]}`" for t in terms if t.source)
        + " are read from vLLM's own enums, so they say what this vLLM means by them; the next section shows tau "
        "at work.")

# %% [markdown]
# ## How success is counted: the acceptance length tau
#
# Each step the target verifies the anchor and the 15 drafts in one forward, accepts the longest run of
# drafts equal to its own greedy choice, and adds one token of its own (the *bonus*). vLLM counts
# `num_drafts` (verification steps) and `num_accepted_tokens`, and reports the mean acceptance length
# `tau = 1 + accepted / drafts`: the tokens each target forward yields. Greedy speculative output must be
# *identical* to plain greedy output; only the speed differs.
#
# The reference decoder does exactly this in plain PyTorch (fp32), with each kind of block attention. Its
# two numbers are what vLLM must show: tau with non-causal attention when a backend is right, tau with causal
# attention when it silently is not.

# %% tags=["nbval-ignore-output"]
from dflash_fi.models import load_prompts
from dflash_fi.reference.evaluate import evaluate_pair

reference = evaluate_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=6), 64)
print(f"{reference['n_prompts']} held-out prompts x {reference['n_new_tokens']} tokens, fp32 on the CPU:")
print(f"  tau with non-causal block attention: {reference['tau_noncausal']:.3f}")
print(f"  tau with causal block attention:     {reference['tau_causal']:.3f}")
print(f"  speculative output == greedy output on {reference['lossless_fraction']:.0%} of prompts")
verdict(f"a backend that silently plans the draft causal costs "
      f"{reference['tau_noncausal'] - reference['tau_causal']:.2f} tokens per target forward "
      f"({1 - reference['tau_causal'] / reference['tau_noncausal']:.0%} fewer tokens per target forward), "
      "and changes no output: only tau can tell.")

# %% [markdown]
# ## The problem: an RTX 4090 with an FP8 KV cache
#
# vLLM picks each layer's attention backend from a priority list per GPU, skipping every backend that has
# a reason to refuse (notebook 1 shows how). For the DFlash draft on an RTX 4090 (SM 8.9) with an FP8 KV
# cache, stock vLLM 0.22.1 finds no backend at all. Here are the reasons, straight from vLLM's own
# `validate_configuration`, on vLLM's real `CudaPlatform` pretending to be a 4090:

# %%
from dflash_fi.lab.selector import backend_verdicts
from dflash_fi.vocabulary import RTX_4090

stock_4090_fp8 = backend_verdicts(0, RTX_4090, "fp8", "draft")
for v in stock_4090_fp8:
    print(f"  priority {v['priority']}: {v['backend']:<15} " + ("refused: " + "; ".join(v["reasons"]) if v["reasons"]
                                                                 else "accepted"))
refused = [v["backend"] for v in stock_4090_fp8 if v["reasons"]]
reasons = sorted({reason for v in stock_4090_fp8 for reason in v["reasons"]})
verdict(f"all {len(refused)} backends of the list refuse, each for one of {len(reasons)} reasons: "
        + " or ".join(f"'{r}'" for r in reasons) + ". The draft has no backend.")

# %% [markdown]
# vLLM's FlashAttention 2 (all an RTX 4090 has) stores no FP8 KV; Triton and FlashInfer refuse non-causal
# attention. FlashInfer's kernels can compute non-causal attention perfectly well: what is missing is the
# plumbing in vLLM's FlashInfer backend. That plumbing is PR #43081, and this tutorial rebuilds it. On the GPU
# machine the same case runs for real: vLLM's FlashAttention forced to version 2 with an FP8 cache (notebooks 1
# and 4).
#
# ## The map: each step, its hunks, its notebook, its tests
#
# Each step is a handful of *hunks*: text replacements in vLLM 0.22.1's own `flashinfer.py`, each with the reason
# it is there. The notebooks show them one at a time; `pytest -m stepN` runs step N's tests.

# %%
from dflash_fi.notebook import lesson_map
from dflash_fi.steps import PR_43081_STEPS, STEPS

show(lesson_map())
verdict(f"steps {PR_43081_STEPS[0]}-{PR_43081_STEPS[-1]} are PR #43081; steps "
      f"{PR_43081_STEPS[-1] + 1}-{STEPS[-1]} go where upstream went next and past it. Each row's hunks are the whole "
      "change of that step, applied to vLLM 0.22.1's own flashinfer.py.")

# %% [markdown]
# ## Numbers you will see
#
# The notebooks show the same configurations more than once, on different sets of prompts and on different
# engines; the numbers then differ, by amounts that are themselves measured. Here, once, is where each comes
# from, so that later notebooks can refer to it. Notebooks 1-5 run small engines live: each starts them in its
# first cell, in the background (starting one takes most of a minute, which the CPU cells use), and its section
# "On the GPU" shows their calls and waits for them. Without a GPU, those sections use the committed records.

# %%
from dflash_fi.bench.e2e import BATCH1_PROMPTS, NEW_TOKENS, SHAPE_BATCH1_PROMPTS, SHAPE_NEW_TOKENS
import dflash_fi.summary as S
from dflash_fi.engine.workloads import MIXED_MAX_NUM_SEQS, MIXED_MAX_TOKENS, MIXED_PROMPT_BYTES, MIXED_REQUESTS
from dflash_fi.evidence.live import LIVE_NEW_TOKENS, LIVE_PROMPTS

show("| where | prompts x new tokens | what runs |\n|---|---|---|\n"
     f"| this notebook's reference decoder | 6 x 64 | pure PyTorch, fp32 (CPU, and the GPU cell below) |\n"
     f"| live cells of notebooks 1-6 | {LIVE_PROMPTS} x {LIVE_NEW_TOKENS} | small vLLM engines on the GPU, and the "
     "reference decoder on the same prompts |\n"
     "| the walkthrough (`dflash-fi walkthrough`; the check cells without a GPU) | 32 x 128, and the mixed workload "
     "| every step's engine, in the evidence summary |\n"
     f"| the engine benchmark | batch 1: one prompt alone, the first {BATCH1_PROMPTS} by turns, then 8 and 32 "
     f"together, x {NEW_TOKENS} | engines in turns (notebook 8); the Qwen3-4B shape: {SHAPE_BATCH1_PROMPTS} prompt at "
     f"batch 1, x {SHAPE_NEW_TOKENS} |")
verdict(f"live cells use {LIVE_PROMPTS} prompts because starting an engine costs more than decoding. The mixed "
        f"workload (the walkthrough's, in README) is {MIXED_REQUESTS} requests: prompts of {min(MIXED_PROMPT_BYTES)}-"
        f"{max(MIXED_PROMPT_BYTES)} bytes, max_tokens {min(MIXED_MAX_TOKENS)}-{max(MIXED_MAX_TOKENS)}, max_num_seqs "
        f"{MIXED_MAX_NUM_SEQS}.")

# %% [markdown]
# **tau differs between prompt sets** (held-out source files differ in how predictable they are), **and between
# engines of one configuration**: a bf16 near-tie in the draft flips with the engine's memory settings. The text
# stays the same, so what moves is the number of verification steps it took; the checks allow for it (within 1% on
# the same text).

# %% [markdown]
# **Outputs can part from plain decoding, and be right.** Verification runs the target's prefill kernels on
# 16-token blocks, plain decoding its decode kernels; two backends (or an eager and a graph-captured engine) sum
# in different orders. Where the target's two best candidates are nearly tied, the choice can flip, and the
# outputs part from there on. A broken kernel parts them anywhere. So an identity check looks at the first
# position where an output parts from its baseline and asks the baseline's top-2 gap there (the glossary's words)
# to be within a *near-tie margin*, measured from the walkthrough's own pairs of correct engines. Engines record the gap wherever it is under 1 nat; a parting where none is recorded is at a confident
# token.

# %%
margin = S.read().walkthrough()[2]
verdict(f"the walkthrough's correct pairs parted {margin['partings']} times, at top-2 gaps up to "
        f"{margin['largest_gap']:.3f} nats ({margin['partings_at_confident_tokens']} at a confident token): the near-tie "
        f"margin is {margin['margin']:.3f} nats ({margin['rule']}). A parting at a larger gap fails a check, whatever "
        "share of outputs is identical.")

# %% [markdown]
# **One prompt is not like the others.** The first held-out prompt sits in the boilerplate of a codec module
# (`encode=Codec().encode, decode=Codec().decode, ...`), whose continuation the drafter predicts almost perfectly;
# alone, it gives a tau no other prompt comes near. That is why the benchmark's batch 1 takes the median of
# several prompts decoded alone rather than the first prompt:

# %% tags=["nbval-ignore-output"]
first, others = (evaluate_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=4)[i:j], 64)
                 for i, j in ((0, 1), (1, 4)))
print(f"prompt 0 ({load_prompts(n=1)[0].strip()[:40]!r}...): tau {first['tau_noncausal']:.2f}; prompts 1-3: "
      f"{others['tau_noncausal']:.2f}")
verdict(f"one prompt alone gives {first['tau_noncausal'] / others['tau_noncausal']:.1f}x the tau of "
      "the next three: a batch-1 number from it alone would describe the prompt, not the engine.")

# %% [markdown]
# On a GPU, the reference decoder runs there too (fp32, CUDA): the same prediction, computed independently of
# vLLM on the machine that will run vLLM.

# %% tags=["gpu", "nbval-ignore-output"]
if session.gpu_cell():
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
    check("the drafter drafts blocks of 16 with mask token 257",
          drafter_config["block_size"] == 16 and drafter_config["dflash_config"]["mask_token_id"] == 257)
    check("the reference decoder: non-causal tau above causal tau, both above 1, output lossless",
          reference["tau_noncausal"] > reference["tau_causal"] > 1.0 and reference["lossless_fraction"] >= 0.95,
          f"{reference['tau_noncausal']:.3f} > {reference['tau_causal']:.3f}, lossless {reference['lossless_fraction']:.0%}")
    check("stock vLLM 0.22.1 has no backend for the draft on an RTX 4090 with FP8",
          all(v["reasons"] for v in stock_4090_fp8) and {"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"} <= set(refused),
          ", ".join(refused) + " refuse")
    check("the codec-table prompt stands out", first["tau_noncausal"] > 1.5 * others["tau_noncausal"])

# %% [markdown]
# ## What you saw, and what's next
#
# - DFlash's drafter needs every block token to see the whole block; a causal plan costs tau, not correctness.
# - tau is the measure: the reference decoder predicts it for both kinds of attention, and vLLM must match.
# - On an RTX 4090 with FP8, stock vLLM has no backend for the draft at all.
# - Numbers move between prompt sets and engines by measured amounts (a verification step or two between engines
#   of one configuration); outputs may part only at near-ties.
#
# Next, notebook 1: how vLLM's selector decides, and the first one-method step that gets past it.
