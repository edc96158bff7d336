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
# # 1 · How vLLM picks an attention backend, and the capability flag
#
# Every attention layer asks for its backend once, when the model is built:
#
# 1. `vllm.v1.attention.selector.get_attn_backend` packs what the layer needs into an
#    `AttentionSelectorConfig` (head size, dtype, KV-cache dtype, ... and `use_non_causal`);
# 2. the platform (`CudaPlatform.get_attn_backend_cls`) checks the backend the user asked for, if any, and
#    fails with that backend's reasons if it refuses;
# 3. otherwise it walks its priority list for the GPU's compute capability and takes the first backend
#    whose `validate_configuration` returns no reason.
#
# The walk is short enough to read in full:

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import setup, show
from dflash_fi.evidence.plan import FLASH_ATTN, step_label

session = setup("01_choosing_a_backend")

# %%
import inspect

from dflash_fi.lab.pretend_gpu import cuda_platform_class

print(inspect.getsource(cuda_platform_class().get_valid_backends))

# %% [markdown]
# One of `validate_configuration`'s questions is `supports_non_causal()`, asked only when the layer needs
# non-causal attention. DFlash's proposer derives its draft model's config from the target's and sets
# exactly that:

# %%
from vllm.v1.spec_decode.dflash import DFlashProposer

print(inspect.getsource(DFlashProposer._create_draft_vllm_config))

# %% [markdown]
# ## Every backend's verdict on the DFlash draft
#
# vLLM's real `CudaPlatform`, pretending to be an RTX 4090 (SM 8.9), an H100/H200 (SM 9.0) and a B200
# (SM 10.0), for a bf16 and an FP8 KV cache, before (step 0) and after (step 1) the capability flag. Each
# cell is `validate_configuration`'s answer for the draft's layers: **ok**, or its reasons. A backend the
# platform does not list for that GPU shows `-`.

# %%
from dflash_fi.lab.selector import verdict_table
from dflash_fi.vocabulary import BLACKWELL, HOPPER, RTX_4090

show(verdict_table(steps=(0, 1), capabilities=(RTX_4090, HOPPER, BLACKWELL)))

# %% [markdown]
# The same answers as a picture: what happens when FLASHINFER is requested for the draft, and what vLLM
# picks when nothing is requested. At step 0 the 4090 + FP8 cell has no backend at all.

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures import selector_grid
from dflash_fi.lab.selector import selector_matrix

matrix = [r for r in selector_matrix(steps=(0, 1), capabilities=(RTX_4090, HOPPER, BLACKWELL)) if r["role"] == "draft"]
selector_grid(matrix);

# %% [markdown]
# ## Step 1: one method
#
# The hunk, as a diff of vLLM 0.22.1's own `flashinfer.py` (read from the installed wheel; this repository
# holds only the hunks):

# %%
from dflash_fi.steps import hunk_diff

print(hunk_diff(1))

# %% [markdown]
# The selector is now happy, but nothing below it knows about non-causal attention. The real
# `FlashInferMetadataBuilder.build()` of step 1 builds the draft's metadata without any notion of causality,
# and DFlash's own guard (`build_per_group_and_layer_attn_metadata`, which requires `causal is False` on
# every draft layer) refuses it:

# %%
from dflash_fi.lab.batches import STANDARD_BATCHES
from dflash_fi.lab.routing import RoutingLab

with RoutingLab(1) as lab:
    draft_row = lab.route(STANDARD_BATCHES[0])
for key in ("selection", "prefill", "plan_causal", "metadata_causal", "dflash_check"):
    print(f"{key:>16}: {draft_row[key]}")

# %% [markdown]
# ## On the GPU
#
# Three engines on the embedded pair: DFlash with the FLASH_ATTN draft (the reference), with the stock
# FLASHINFER draft (step 0), and with step 1's. Each runs in its own process; vLLM's log lines go to a log
# file per engine.

# %% tags=["gpu"]
live = session.run_live([FLASH_ATTN, step_label(0), step_label(1)])

# %% [markdown]
# The walkthrough's checks for steps 0 and 1, on those live runs (or, on a machine without a GPU, on the
# walkthrough committed under `runs/`):

# %% tags=["nbval-ignore-output"]
records, reference, source = session.evidence([FLASH_ATTN, step_label(0), step_label(1)])
print(source)
checks = session.check(records, reference, ("step 0", "step 1"))

# %% [markdown]
# ### Check

# %%
step0 = {(r["capability"], r["kv_cache_dtype"]): r for r in matrix if r["step"] == 0}
step1 = {(r["capability"], r["kv_cache_dtype"]): r for r in matrix if r["step"] == 1}
assert all("non-causal attention not supported" in r["flashinfer"] for r in step0.values())
assert step0["8.9", "fp8"]["auto_backend"] is None  # the RTX 4090 + FP8 case: nothing left
assert all(r["flashinfer"] == "accepted" for r in step1.values())
assert step1["8.9", "fp8"]["auto_backend"] == "FLASHINFER"
assert draft_row["dflash_check"].startswith("fail") and draft_row["metadata_causal"] == "absent"
assert len(checks) == 3 and all(c.passed for c in checks), [c.line() for c in checks]
