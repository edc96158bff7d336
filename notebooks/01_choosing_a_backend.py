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
from dflash_fi.evidence import plan as P
from dflash_fi.notebook import check, setup, show, show_diff, show_engines, verdict

# The engines of the section "On the GPU" start now, in the background: each takes most of a minute to start.
live_labels = [P.FLASH_ATTN, P.step_label(0), P.step_label(1), P.RTX4090_STOCK]
session = setup("01_choosing_a_backend", live=live_labels)

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
from dflash_fi.lab.selector import selector_matrix, verdict_table
from dflash_fi.vocabulary import BLACKWELL, HOPPER, RTX_4090

show(verdict_table(steps=(0, 1), capabilities=(RTX_4090, HOPPER, BLACKWELL)))
matrix = [r for r in selector_matrix(steps=(0, 1), capabilities=(RTX_4090, HOPPER, BLACKWELL)) if r["role"] == "draft"]
stranded = [f"SM {r['capability']} + {r['kv_cache_dtype']} KV" for r in matrix if r["step"] == 0 and r["auto_backend"] is None]
verdict(f"at step 0 FLASHINFER says 'non-causal attention not supported' in all "
      f"{sum(r['step'] == 0 for r in matrix)} columns, and {len(stranded)} leave the draft with no backend at all "
      f"({', '.join(stranded)}); at step 1 FLASHINFER is ok in every column.")

# %% [markdown]
# The same answers as a picture: what happens when FLASHINFER is asked for the draft, and what vLLM picks when
# nothing is asked for.

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures import selector_grid

selector_grid(matrix);

# %%
def column(row):
    return f"SM {row['capability']} + {row['kv_cache_dtype']} KV"


picks = {(r["step"], column(r)): r["auto_backend"] for r in matrix}
rescued = {cell: picks[1, cell] for cell in stranded}
changed = {cell: (picks[0, cell], picks[1, cell]) for step, cell in picks
           if step == 1 and cell not in stranded and picks[0, cell] != picks[1, cell]}
verdict("every cell turns green at step 1; where step 0 left the draft with nothing, vLLM now picks "
        + ", ".join(f"{b} ({cell})" for cell, b in rescued.items()) + ". The flag also changes a pick where a "
        "backend existed, wherever FLASHINFER stands before FLASH_ATTN in the GPU's priority list: "
        + (", ".join(f"{cell} from {a} to {b}" for cell, (a, b) in changed.items()) or "nowhere here")
        + ". Elsewhere the first choice stays what it was.")

# %% [markdown]
# ## Step 1: one method
#
# The hunk, as a diff of vLLM 0.22.1's own `flashinfer.py` (read from the installed wheel; this repository
# holds only the hunks):

# %%
from dflash_fi.steps import hunk_diff

show_diff(hunk_diff(1))

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
# Four engines on the embedded pair: DFlash with the FLASH_ATTN draft (the reference), with the stock
# FLASHINFER draft (step 0), with step 1's, and the RTX 4090 case: an FP8 KV cache with vLLM's FlashAttention
# forced to version 2 (all a 4090 has, which stores no FP8 KV), and the draft's backend left to the selector.
# Each runs in its own process (vLLM's log lines go to a log file per engine). The first cell started them in the
# background, since an engine takes most of a minute to start, and the cell after the calls below waits for them.
# This is how each is started, with the same arguments a script of yours would pass:

# %%
show_engines(live_labels)

# %% tags=["gpu"]
live = session.run_live(live_labels)

# %% [markdown]
# The walkthrough's checks for steps 0 and 1 and for the stock RTX 4090 case, on those live runs (or, on a
# machine without a GPU, on the walkthrough committed under `runs/`):

# %% tags=["nbval-ignore-output"]
records, reference, source = session.evidence(live_labels)
print(source)
checks = session.check(records, reference, ("step 0", "step 1", "RTX 4090 case, stock"))

# %% [markdown]
# What vLLM itself says when it starts the stock engine of the RTX 4090 case: its selector's whole message,
# every backend and its reasons.

# %% tags=["nbval-ignore-output"]
import textwrap

error = records[P.RTX4090_STOCK].get("error") or {}
print(textwrap.fill(f"{error.get('type')}: {error.get('message', '').strip()}", 110))
verdict("on an H200, with only its FlashAttention version forced to 2 and an FP8 cache, vLLM 0.22.1 "
      "refuses the draft exactly as it would on an RTX 4090. What still differs from a real 4090: the silicon is "
      "SM 9.0 (vLLM's capability checks see 9.0, not 8.9), FlashInfer picks its own kernels for SM 9.0, and there "
      "is far more memory.")

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
step0 = {(r["capability"], r["kv_cache_dtype"]): r for r in matrix if r["step"] == 0}
step1 = {(r["capability"], r["kv_cache_dtype"]): r for r in matrix if r["step"] == 1}
check("stock FLASHINFER refuses the draft everywhere, for non-causal attention",
      all("non-causal attention not supported" in r["flashinfer"] for r in step0.values()), f"{len(step0)} columns")
check("the RTX 4090 + FP8 draft has no backend at step 0 and FLASHINFER at step 1",
      step0["8.9", "fp8"]["auto_backend"] is None and step1["8.9", "fp8"]["auto_backend"] == "FLASHINFER")
check("step 1's FLASHINFER is accepted in every column", all(r["flashinfer"] == "accepted" for r in step1.values()))
check("step 1's metadata has no causal field and DFlash's guard refuses it",
      draft_row["dflash_check"].startswith("fail") and draft_row["metadata_causal"] == "absent")
check(f"the walkthrough's {len(checks)} checks for these runs pass", len(checks) == 4 and all(c.passed for c in checks),
      source.split(":")[0])

# %% [markdown]
# ## What you saw, and what's next
#
# - vLLM asks every backend `validate_configuration`; DFlash's draft config adds `use_non_causal=True`, and stock
#   FlashInfer says no. With an FP8 cache where FlashAttention is version 2 (an RTX 4090, or forced), nothing is left.
# - Step 1's one method gets past the selector, and straight into DFlash's own guard.
#
# Next, notebook 2: the metadata builder, the `causal` field, and a step that runs but is silently wrong.
