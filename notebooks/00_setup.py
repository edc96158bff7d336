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
# # 0 · The stack, the embedded models and the oracle
#
# Every later notebook changes one thing in vLLM 0.22.1's FlashInfer backend and checks what that did.
# This one shows what we start from: the pinned stack, the tiny model pair that ships with the package,
# and the pure-PyTorch reference decoder that predicts what vLLM must show.

# %%
from dflash_fi.stack import doctor, stack_report

exit_code = doctor()
report = stack_report()

# %% [markdown]
# The embedded pair: a byte-level Qwen3 target (4 layers, head_dim 128) and a 2-layer DFlash drafter that
# drafts a block of 16 tokens (the anchor, then 15 mask tokens) from the target's hidden states of
# `target_layer_ids`. Weights are in HF format; the same files load in the reference, in transformers and in vLLM.

# %%
import json

from dflash_fi.evaluate import DEFAULT_DRAFTER, DEFAULT_TARGET
from dflash_fi.reference.model import load_pair, param_count

drafter_config = json.loads((DEFAULT_DRAFTER / "config.json").read_text())
target, drafter = load_pair(DEFAULT_TARGET, DEFAULT_DRAFTER)
print(f"target {param_count(target):,} parameters, drafter {param_count(drafter):,} (+ the target's embedding and lm_head)")
print("dflash_config:", drafter_config["dflash_config"])

# %% [markdown]
# The reference decoder runs greedy DFlash speculative decoding twice: with **non-causal** block attention
# (what DFlash is trained for) and with **causal** block attention (what a backend computes when it ignores
# the non-causal flag). The acceptance length tau counts the bonus token, as vLLM does: `1 + accepted / drafts`.

# %%
from dflash_fi.evaluate import evaluate_pair, load_prompts

reference = evaluate_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=4), 48)
print(f"tau non-causal {reference['tau_noncausal']:.3f}, tau causal {reference['tau_causal']:.3f}, "
      f"speculative == greedy on {reference['lossless_fraction']:.0%} of {reference['n_prompts']} prompts")

# %% tags=["gpu"]
from dflash_fi.stack import require_gpu

print(require_gpu("this cell"))

# %% [markdown]
# ### Check

# %%
assert exit_code == 0 and report.vllm == "0.22.1" and report.flashinfer == "0.6.11.post2"
assert drafter_config["dflash_config"]["mask_token_id"] == 257
assert reference["tau_noncausal"] > reference["tau_causal"] > 1.0
