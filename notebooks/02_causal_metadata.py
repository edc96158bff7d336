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
# # 2 · A `causal` field on `FlashInferMetadata`, and all-prefill batches
#
# DFlash builds its draft metadata from a `CommonAttentionMetadata` with `causal=False` (see
# `DFlashProposer.set_inputs_first_pass`). The builder must carry that into the backend's metadata, and it
# must not send such a batch to decode kernels: a decode (or TRTLLM spec-as-decode) kernel cannot let a query
# token see the query tokens after it.

# %%
from dflash_fi.steps import hunk_diff

print(hunk_diff(2))

# %% [markdown]
# On an H100 the 16-token draft requests were already prefill (the builder's decode threshold is 1). Where
# TRTLLM attention is available (Blackwell, SM 10.x), vLLM raises the threshold to `1 + 2 x 15` for
# speculative decoding, and stock routes the draft to **TRTLLM decode**. Compare steps 1 and 2, with TRTLLM:

# %%
from dflash_fi.routing import STANDARD_BATCHES, RoutingLab

fields = ("reorder_batch_threshold", "num_decodes", "num_prefills", "decode", "prefill", "plan_causal",
          "metadata_causal", "dflash_check")
rows = {}
for step in (1, 2):
    for trtllm in (False, True):
        with RoutingLab(step, (10, 0) if trtllm else (9, 0), trtllm=trtllm) as lab:
            rows[step, trtllm] = lab.route(STANDARD_BATCHES[0])
        print(f"step {step}, TRTLLM {trtllm}:", {k: rows[step, trtllm][k] for k in fields})

# %% [markdown]
# DFlash's check now passes, but look at `plan_causal`: the prefill wrapper is still planned with
# `causal=True`. This half-finished state **runs and is silently wrong**. The reference decoder says how
# wrong: causal block attention accepts fewer drafts.

# %%
from dflash_fi.evaluate import DEFAULT_DRAFTER, DEFAULT_TARGET, evaluate_pair, load_prompts

reference = evaluate_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=8), 64)
print(f"reference: tau non-causal {reference['tau_noncausal']:.3f}, causal {reference['tau_causal']:.3f}")

# %% [markdown]
# And vLLM on the GPU agrees: step 2 runs with the causal-block acceptance length, below the FLASH_ATTN draft.

# %%
from dflash_fi.notebook import outcome, recorded_walkthrough

records, provenance = recorded_walkthrough()
print(provenance)
gpu_reference = records["step 2 FLASHINFER draft"]["spec"]["extra"]["reference"]
for label in ("FLASH_ATTN draft (reference)", "step 2 FLASHINFER draft"):
    print(f"{label}: {outcome(records[label])}")
print(f"reference decoder on the same prompts: non-causal {gpu_reference['tau_noncausal']:.3f}, "
      f"causal {gpu_reference['tau_causal']:.3f}")

# %% tags=["gpu"]
from dflash_fi.notebook import live_run

print(outcome(live_run(step=2)))

# %% [markdown]
# ### Check

# %%
assert rows[1, True]["decode"] == "TRTLLM decode" and rows[2, True]["num_decodes"] == 0
assert rows[2, False]["metadata_causal"] is False and rows[2, False]["dflash_check"] == "pass"
assert rows[2, False]["plan_causal"] is True  # the silent bug
assert reference["tau_causal"] < reference["tau_noncausal"]
step2, fa = records["step 2 FLASHINFER draft"], records["FLASH_ATTN draft (reference)"]
assert step2["ok"] and step2["tau"] < fa["tau"]
assert abs(step2["tau"] - gpu_reference["tau_causal"]) / gpu_reference["tau_causal"] <= 0.05
