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
# # 3 · A separate non-causal prefill wrapper
#
# FlashInfer fixes causality when a wrapper is **planned**: `BatchPrefillWithPagedKVCacheWrapper.plan(...,
# causal=...)` prepares the kernel for every `run()` until the next plan. The causal wrapper is shared by all
# causal layers, so the draft gets its own, created on first use and planned with `causal=False`; `forward`
# checks that the wrapper it runs was planned with the batch's causality. DCP and an NVFP4 KV cache have no
# non-causal path and say so.

# %%
from dflash_fi.steps import hunk_diff

print(hunk_diff(3))

# %%
from dflash_fi.routing import STANDARD_BATCHES, RoutingLab

with RoutingLab(3) as lab:
    draft = lab.route(STANDARD_BATCHES[0])
    target = lab.route(STANDARD_BATCHES[3])
print("draft: ", {k: draft[k] for k in ("prefill", "plan_causal", "metadata_causal", "dflash_check")})
print("target:", {k: target[k] for k in ("prefill", "plan_causal", "metadata_causal")})

# %% [markdown]
# The unsupported configurations fail fast, with a message that says which and what to do:

# %%
errors = {}
with RoutingLab(3, dcp=True) as lab:
    errors["DCP"] = lab.route(STANDARD_BATCHES[0])["error"]
with RoutingLab(3, (10, 0)) as lab:
    builder = lab.builders["draft"][0]
    builder.is_kvcache_nvfp4 = True  # an NVFP4 impl needs CUDA buffers; the builder's flag is what matters here
    try:
        builder._get_prefill_wrapper(causal=False)
    except NotImplementedError as exc:
        errors["NVFP4"] = f"NotImplementedError: {exc}"
for name, message in errors.items():
    print(f"{name}: {message}")

# %% [markdown]
# On the GPU, step 3 is the first correct step: its acceptance length equals the FLASH_ATTN draft's and the
# reference decoder's non-causal prediction, and greedy speculative output equals plain greedy output.

# %%
from dflash_fi.notebook import outcome, recorded_walkthrough
from dflash_fi.walkthrough import check_records

records, provenance = recorded_walkthrough()
print(provenance)
for label in ("FLASH_ATTN draft (reference)", "step 2 FLASHINFER draft", "step 3 FLASHINFER draft"):
    print(f"{label}: {outcome(records[label])}")
step3_checks = [c for c in check_records(records, records["step 3 FLASHINFER draft"]["spec"]["extra"]["reference"])
                if c.name.startswith("step 3")]
for check in step3_checks:
    print(check.line())

# %% tags=["gpu"]
from dflash_fi.notebook import live_run

print(outcome(live_run(step=3)))
print(outcome(live_run(step=3, kv_cache_dtype="fp8")))

# %% [markdown]
# ### Check

# %%
assert draft["prefill"] == "FlashInfer prefill (separate non-causal wrapper)" and draft["plan_causal"] is False
assert target["prefill"] == "FlashInfer prefill (shared causal wrapper)" and target["plan_causal"] is True
assert "decode context parallelism" in errors["DCP"] and "NVFP4" in errors["NVFP4"]
assert all(c.passed for c in step3_checks), [c.line() for c in step3_checks]
