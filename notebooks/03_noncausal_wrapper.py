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
# # 3 · FlashInfer's `plan()` and `run()`: a separate non-causal wrapper
#
# FlashInfer splits attention in two calls. `BatchPrefillWithPagedKVCacheWrapper.plan(...)` takes the
# batch's shape (query and page offsets, heads, page size, **`causal`**), picks and loads a kernel, and
# computes a work schedule on the CPU. `run(q, kv_cache)` then launches that kernel, as often as there are
# layers. The causality is fixed at plan time: `run()` cannot change it.
#
# vLLM's FlashInfer builder keeps **one** prefill wrapper, shared by every causal layer group of a step and
# planned `causal=True`. So the draft gets its own wrapper, created on first use, planned `causal=False`, and
# never handed to a causal batch; `forward` checks that the wrapper it runs was planned with the batch's
# causality.

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import setup, show
from dflash_fi.evidence.plan import FLASH_ATTN, NO_SPEC, step_label

session = setup("03_noncausal_wrapper")

# %%
from dflash_fi.steps import hunk_diff

print(hunk_diff(3))

# %% [markdown]
# The draft now has its own wrapper, planned non-causal; target batches keep the shared causal one:

# %%
from dflash_fi.lab.routing import routing_table

show(routing_table(steps=(2, 3)))

# %% [markdown]
# ## What has no non-causal path says so, before it touches anything
#
# Decode context parallelism (DCP) splits attention into a context part and a new-token part that assumes
# causal new tokens; an NVFP4 KV cache is served by TRTLLM-gen only. Both have no non-causal FlashInfer
# path, and `build()` refuses such a batch first thing, before it logs, plans or writes, so the caller's
# metadata is left as it was:

# %%
from vllm.config import set_current_vllm_config

from dflash_fi.lab.batches import STANDARD_BATCHES, common_metadata
from dflash_fi.lab.routing import RoutingLab
from dflash_fi.vocabulary import BLACKWELL

errors = {}
with RoutingLab(3, dcp=True) as lab:
    builder, _, config = lab.builders["draft"]
    cad = common_metadata(STANDARD_BATCHES[0])
    seq_lens_before = cad.seq_lens_cpu.clone()
    with set_current_vllm_config(config):
        try:
            builder.build(0, cad)
        except NotImplementedError as exc:
            errors["DCP"] = str(exc)
    untouched = bool((cad.seq_lens_cpu == seq_lens_before).all()) and builder._noncausal_prefill_wrapper is None
with RoutingLab(3, BLACKWELL) as lab:
    builder, _, config = lab.builders["draft"]
    builder.is_kvcache_nvfp4 = True  # an NVFP4 impl needs CUDA buffers; the builder's flag is what matters here
    with set_current_vllm_config(config):
        try:
            builder.build(0, common_metadata(STANDARD_BATCHES[0]))
        except NotImplementedError as exc:
            errors["NVFP4"] = str(exc)
for name, message in errors.items():
    print(f"{name}: NotImplementedError: {message}")
print("caller's metadata and builder state untouched:", untouched)

# %% [markdown]
# ## The kernel itself, against the reference
#
# On the GPU, FlashInfer's real non-causal paged prefill on DFlash-shaped batches (16 queries per request,
# pages of 16 scattered through the cache), with FA2 (all an RTX 4090 has) and with `auto` (FA3 on SM 9.0),
# bf16 and fp8-e4m3 KV, against `dflash_fi.reference.paged_attention` in fp32 on the same inputs. The last
# column is how far the *causal* reference is from the kernel's output: what step 2 got wrong.

# %% tags=["gpu"]
from dflash_fi.bench.accuracy import ERROR_BOUND, error_table, kernel_errors

if session.gpu_cell():
    errors_by_kernel = kernel_errors()
    show(error_table(errors_by_kernel))
    assert all(r["max_abs_err"] < ERROR_BOUND < r["distance_to_causal"] for r in errors_by_kernel)

# %% [markdown]
# ## On the GPU: the first correct step

# %% tags=["gpu"]
live = session.run_live([NO_SPEC, FLASH_ATTN, step_label(2), step_label(3)])

# %% tags=["nbval-ignore-output"]
records, reference, source = session.evidence([NO_SPEC, FLASH_ATTN, step_label(2), step_label(3)])
print(source)
checks = session.check(records, reference, ("step 3",))

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures import acceptance_by_position

acceptance_by_position(records, [FLASH_ATTN, step_label(2), step_label(3)]);

# %% [markdown]
# ### Check

# %%
from dflash_fi.lab.routing import routing_report

draft, target = (routing_report(3)["batches"][i] for i in (0, 3))
assert draft["prefill"] == "FlashInfer prefill (separate non-causal wrapper)" and draft["plan_causal"] is False
assert target["prefill"] == "FlashInfer prefill (shared causal wrapper)" and target["plan_causal"] is True
assert "decode context parallelism" in errors["DCP"] and "NVFP4" in errors["NVFP4"] and untouched
assert len(checks) == 3 and all(c.passed for c in checks), [c.line() for c in checks]
