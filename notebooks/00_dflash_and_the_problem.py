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
# FlashInfer attention backend (PR #43081), then goes on where upstream went next. This first notebook
# sets the scene: the model pair we use, what "non-causal block attention" means, how success is measured,
# and why the problem matters most on an RTX 4090.

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import setup, show

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
# ignores the non-causal flag computes the right one: block token *k* sees only block tokens 0..*k*. The
# anchor (row 0) then sees none of the masks, and mask 1 (row 1) sees only the anchor: exactly the tokens
# whose drafts matter most.

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures import block_masks

block_masks();

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
print("  acceptance of draft positions 1-5 (non-causal):",
      " ".join(f"{p:.2f}" for p in reference["per_position_acceptance"]["noncausal"][:5]))

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
    print(f"  priority {v['priority']}: {v['backend']:<15} {'accepted' if not v['reasons'] else 'refused: ' + '; '.join(v['reasons'])}")

# %% [markdown]
# FlashAttention 2 (all an RTX 4090 has) stores no FP8 KV; Triton and FlashInfer refuse non-causal
# attention. FlashInfer's kernels can compute non-causal attention perfectly well: what is missing is the
# plumbing in vLLM's FlashInfer backend. That plumbing is PR #43081, and this tutorial rebuilds it:
#
# ## The map: each step, its hunks, its notebook, its tests

# %%
from dflash_fi.notebook import step_map

show(step_map())

# %% [markdown]
# On a GPU, the reference decoder runs there too (fp32, CUDA): the same prediction, computed independently of
# vLLM on the machine that will run vLLM.

# %% tags=["gpu"]
if session.gpu_cell():
    gpu_reference = evaluate_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=6), 64, device="cuda")
    print(f"on {session.gpu.name}: tau non-causal {gpu_reference['tau_noncausal']:.3f}, "
          f"causal {gpu_reference['tau_causal']:.3f}, lossless {gpu_reference['lossless_fraction']:.0%}")
    assert abs(gpu_reference["tau_noncausal"] - reference["tau_noncausal"]) / reference["tau_noncausal"] <= 0.05

# %% [markdown]
# ### Check

# %%
assert drafter_config["block_size"] == 16 and drafter_config["dflash_config"]["mask_token_id"] == 257
assert reference["tau_noncausal"] > reference["tau_causal"] > 1.0 and reference["lossless_fraction"] >= 0.95
assert all(v["reasons"] for v in stock_4090_fp8), "some backend accepts the stock 4090 + FP8 draft"
assert {v["backend"] for v in stock_4090_fp8} >= {"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"}
