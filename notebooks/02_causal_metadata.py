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
# # 2 · The metadata builder: a `causal` field, and all-prefill batches
#
# Once a backend is chosen, every forward pass starts with its **metadata builder**. vLLM's model runner (for
# the target) and DFlash's proposer (for the draft) describe the batch in a `CommonAttentionMetadata`:
# where each request's queries start, how long each sequence is, the page table, and `causal`. The backend's
# builder turns that into its own metadata, deciding which kernels run which requests.
#
# FlashInfer's builder first splits the batch into decodes and prefills (`split_decodes_and_prefills`):
# requests with at most `reorder_batch_threshold` query tokens are decodes, served by decode kernels (or
# TRTLLM); the rest are prefills. The runner orders every batch decodes first, so the split is one boundary.

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import setup, show
from dflash_fi.evidence.plan import FLASH_ATTN, step_label

session = setup("02_causal_metadata")

# %%
import inspect

from vllm.v1.attention.backends.utils import split_decodes_and_prefills

source = inspect.getsource(split_decodes_and_prefills)
print(source[source.index("    max_query_len"):])

# %% [markdown]
# DFlash builds its draft metadata with `causal=False` (`DFlashProposer.set_inputs_first_pass`) and then
# checks that every draft layer's metadata says `causal is False`. Step 2 carries the flag into
# `FlashInferMetadata`, and sends a non-causal batch entirely to prefill: a decode kernel (or TRTLLM's
# spec-as-decode path) cannot let a query token see the query tokens after it.

# %%
from dflash_fi.steps import hunk_diff

print(hunk_diff(2))

# %% [markdown]
# ## What each batch becomes
#
# The real `FlashInferMetadataBuilder.build()` of steps 1 and 2, on six standard batches (the DFlash ones
# are what the proposer builds: one block of 16 queries per request). FlashInfer's wrapper objects are the
# only doubles (they would JIT-compile CUDA kernels); each records its `plan()` call. On an H100/H200 the
# 16-token draft requests were already prefills (the threshold is 1):

# %%
from dflash_fi.lab.routing import routing_table
from dflash_fi.vocabulary import BLACKWELL

show(routing_table(steps=(1, 2)))

# %% [markdown]
# Where TRTLLM attention is available (Blackwell, SM 10.x), vLLM raises the threshold to `1 + 2 x 15` for
# speculative decoding, so stock sends the DFlash draft to **TRTLLM decode**. Step 2 makes it a prefill:

# %%
show(routing_table(steps=(1, 2), capability=BLACKWELL, trtllm=True))

# %% [markdown]
# DFlash's check passes now, but look at the draft's `plan causal=True`: the prefill wrapper is still planned
# causal (and on Blackwell the prefill is TRTLLM's, causal too). This half-finished state **runs, and is
# silently wrong**: every block token sees only the block tokens before it. The reference decoder says what
# that costs, and vLLM on the GPU must agree.

# %% tags=["gpu"]
live = session.run_live([FLASH_ATTN, step_label(2)])

# %% tags=["nbval-ignore-output"]
records, reference, source = session.evidence([FLASH_ATTN, step_label(2)])
print(source)
print(f"reference decoder on the same prompts: tau non-causal {reference['tau_noncausal']:.3f}, "
      f"causal {reference['tau_causal']:.3f}")
checks = session.check(records, reference, ("step 2",))

# %% [markdown]
# Acceptance per draft position: with causal block attention the drafts fall behind from the first position
# on, because the anchor's own draft can no longer look at the positions it must fill.

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures import acceptance_by_position

acceptance_by_position(records, [FLASH_ATTN, step_label(2)]);

# %% [markdown]
# ### Check

# %%
from dflash_fi.lab.routing import routing_report

stock_blackwell, step2_blackwell = (routing_report(s, trtllm=True)["batches"][0] for s in (1, 2))
step2 = routing_report(2)["batches"][0]
assert stock_blackwell["decode"] == "TRTLLM decode" and step2_blackwell["num_decodes"] == 0
assert step2["metadata_causal"] is False and step2["dflash_check"] == "pass"
assert step2["plan_causal"] is True  # the silent bug
assert len(checks) == 2 and all(c.passed for c in checks), [c.line() for c in checks]
