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
# # 1 · The capability flag: `supports_non_causal()`
#
# vLLM picks an attention backend per layer in `vllm.v1.attention.selector.get_attn_backend`, which asks the
# platform (`CudaPlatform.get_attn_backend_cls`) to validate the requested backend, or to try its priority
# list. Validation is `AttentionBackend.validate_configuration`, and one of its questions is
# `supports_non_causal()`, asked only when the layer's attention config says `use_non_causal=True`.
# DFlash's proposer sets exactly that for its draft model:

# %%
import inspect

from vllm.v1.spec_decode.dflash import DFlashProposer

print(inspect.getsource(DFlashProposer._create_draft_vllm_config))

# %% [markdown]
# Step 1 of the change is one method. Here is the hunk, as a diff of vLLM 0.22.1's `flashinfer.py`:

# %%
from dflash_fi.steps import hunk_diff

print(hunk_diff(1))

# %% [markdown]
# What the selector does with the draft before and after, on an RTX 4090 (SM 8.9) and an H100 (SM 9.0),
# for a bf16 and an FP8 KV cache. Stock: FlashInfer is refused, and on SM 8.9 with FP8 no backend is left
# (FlashAttention 2 has no FP8 KV, Triton and FlashInfer refuse non-causal, FlexAttention has no FP8).

# %%
from dflash_fi.selector_matrix import render_matrix, selector_matrix

rows = [r for r in selector_matrix(steps=(0, 1), capabilities=((8, 9), (9, 0))) if r["role"] == "draft"]
print(render_matrix(rows))

# %% [markdown]
# The selector is happy, but nothing below it knows about non-causal attention yet. The real
# `FlashInferMetadataBuilder.build()` of step 1 still builds metadata without a `causal` field, and DFlash's
# own guard (`build_per_group_and_layer_attn_metadata`) refuses it:

# %%
from dflash_fi.routing import STANDARD_BATCHES, RoutingLab

with RoutingLab(1) as lab:
    draft_row = lab.route(STANDARD_BATCHES[0])
print({k: draft_row[k] for k in ("selection", "prefill", "plan_causal", "metadata_causal", "dflash_check")})

# %% [markdown]
# On the GPU (recorded by the walkthrough, committed under `runs/`): stock is rejected at selection, step 1
# fails at the first draft step with exactly that assertion.

# %%
from dflash_fi.notebook import outcome, recorded_walkthrough

records, provenance = recorded_walkthrough()
print(provenance)
for label in ("step 0 FLASHINFER draft", "step 1 FLASHINFER draft"):
    print(f"{label}: {outcome(records[label])}")

# %% tags=["gpu"]
from dflash_fi.notebook import live_run

live = live_run(step=1)
print(outcome(live))

# %% [markdown]
# ### Check

# %%
step0 = {(r["capability"], r["kv_cache_dtype"]): r for r in rows if r["step"] == 0}
step1 = {(r["capability"], r["kv_cache_dtype"]): r for r in rows if r["step"] == 1}
assert all("non-causal attention not supported" in r["flashinfer"] for r in step0.values())
assert step0["8.9", "fp8_e4m3"]["auto_backend"] is None  # the RTX 4090 + FP8 case: nothing left
assert all(r["flashinfer"] == "accepted" for r in step1.values())
assert step1["8.9", "fp8_e4m3"]["auto_backend"] == "FLASHINFER"
assert draft_row["dflash_check"].startswith("fail") and draft_row["metadata_causal"] == "absent"
assert records["step 0 FLASHINFER draft"]["error"]["phase"] == "selection"
assert records["step 1 FLASHINFER draft"]["error"]["phase"] == "first draft step"
