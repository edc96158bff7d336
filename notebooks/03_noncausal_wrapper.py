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
# # 03 · FlashInfer's `plan()` and `run()`: a separate non-causal wrapper
#
# FlashInfer splits attention in two calls (the fourth and fifth boxes of notebook 1's picture).
# `BatchPrefillWithPagedKVCacheWrapper.plan(...)` takes the batch's shape (`qo_indptr`, `paged_kv_indptr`, heads,
# page size, **`causal`**), picks a kernel and computes a work schedule on the host; `run(q, kv_cache)` launches it,
# once per layer. After step 2 the draft's metadata says `causal=False`, but its batches are still planned causal.

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import runs as P
from dflash_fi.notebook import setup
from dflash_fi.notebook import check, show, show_engine_calls, verdict, wrapped_lines

live_runs = [P.NO_SPEC, P.FLASH_ATTN, P.step_run(2), P.step_run(3)]  # start now (section "On the GPU")
session = setup("03_noncausal_wrapper", live=live_runs)

# %% [markdown]
# ## What fixes a wrapper's causality, in FlashInfer's own code
#
# `plan()` takes `causal` and keeps it on the wrapper; `run()` reads only what the last `plan()` kept, to pick the
# kernel's mask. And vLLM's builder makes one prefill wrapper, on first use, for every prefill batch it builds:

# %%
from flashinfer.prefill import BatchPrefillWithPagedKVCacheWrapper
from vllm.v1.attention.backends.flashinfer import FlashInferMetadataBuilder

from dflash_fi.notebook import show_source

show_source(BatchPrefillWithPagedKVCacheWrapper.plan, [(r"^\s+causal: bool = False,", r"causal: bool"),
                                                       (r"self\._causal = causal", r"self\._causal = causal")])
show_source(BatchPrefillWithPagedKVCacheWrapper.run, [(r"if self\._causal:", r"MaskMode\.NON_CAUSAL")])
show_source(FlashInferMetadataBuilder._get_prefill_wrapper, [(r"if self\._prefill_wrapper is None", r"None:"),
                                                             (r"_prefill_wrapper = BatchPrefillWithPagedKV", r"Wrapper\("),
                                                             (r"return self\._prefill_wrapper", r"return")])

# %% [markdown]
# Target batches never reach the draft's wrapper: the draft's layers get an `AttentionGroup` and metadata builder of
# their own (vLLM's `SpecDecodeBaseProposer`), fed only `causal=False` metadata (`DFlashProposer`). But a
# builder's `_get_prefill_wrapper()` gives its one wrapper to every prefill batch, planned as its last `plan()` said.

# %% [markdown]
# ## Step 3, hunk by hunk
#
# Step 3 keys the wrapper by causality, so a causal and a non-causal plan never share one. Hunk 1: the builder owns
# a second wrapper, for non-causal batches only; hunk 2: `_get_prefill_wrapper(causal=False)` creates it on first use
# (`backend="auto"` leaves the kernel to FlashInfer; step 5 revisits that). Hunk 2's error messages: the Appendix.

# %%
from dflash_fi.notebook import show_hunks

show_hunks(3, only=[1, 2], max_lines={2: slice(-14, None)}, context=1)  # of hunk 2, its decision: its last lines

# %% [markdown]
# - hunk 3: `build()` refuses first what has no non-causal path (DCP, an NVFP4 cache: below; #43081 refuses NVFP4
#   later: the appendix);
# - hunks 4 and 5: `build()` asks for the wrapper of the batch's causality and tells `plan()` it (stock: `causal=True`);
# - hunk 6: `forward` compares the wrapper's planned causality with the metadata's (stock asserted causal), so a
#   wrong plan fails loudly at `run()` time.

# %%
show_hunks(3, only=[3, 4, 5, 6], max_lines=None, context=1, joined=True)

# %% [markdown]
# Then the routing: the draft's rows change, the target's keep the shared causal wrapper.

# %%
from dflash_fi.lab.batches import DRAFT, PREFILL
from dflash_fi.lab.routes import Prefill, path_label
from dflash_fi.lab.routing import routing_report, routing_rows
from dflash_fi.notebook import changed_rows

show(changed_rows(*routing_rows(steps=(2, 3))))  # the rows that change: bold, and what changes in them
routes = {r.batch: r for r in routing_report(3).routes}
draft, target = routes[DRAFT], routes[PREFILL]
verdict(f"only the draft rows change, to '{path_label(draft.prefill)}' planned causal={draft.plan_causal}; "
      f"the target's prompts stay on '{path_label(target.prefill)}', planned causal={target.plan_causal}.")

# %% [markdown]
# ## What has no non-causal path says so, before it touches anything
#
# DCP splits attention into a context part and a new-token part that assumes causal new tokens; an NVFP4 KV cache
# is served by TRTLLM kernels only. Neither has a non-causal FlashInfer path, so step 3 refuses such a batch first
# thing in `build()`, leaving the caller's metadata and the builder's buffers as they were:

# %%
from dflash_fi.exercises.builds import refusals

refused = refusals(3)  # the lab's build() of a DFlash draft batch, with DCP, and with an NVFP4 cache (SM 10.0)
with wrapped_lines():
    for name, (message, untouched) in refused.items():
        print(f"{name}: NotImplementedError: {message}\n    caller's metadata, page table and wrappers untouched: "
              f"{untouched}")

# %% [markdown]
# ## On the GPU: the first correct step
#
# No speculation, the FLASH_ATTN draft, and steps 2 and 3, started in the first cell; a correct draft's output equals
# plain decoding's except at **near-ties** (the target's top two tokens so close that rounding can flip its pick):

# %%
show_engine_calls(live_runs)

# %% tags=["gpu"]
live = session.run_live(live_runs)

# %% tags=["nbval-ignore-output"]
records, reference, source = session.evidence(live_runs)
with wrapped_lines():
    print(source)
    checks = session.check(records, reference)

# %% tags=["nbval-ignore-output"]
from matplotlib import pyplot as plt
from dflash_fi.figures import acceptance_by_position
from dflash_fi.figures.acceptance import noncausal_fix_verdict

acceptance_by_position(records, live_runs[1:], title="Step 3 plans the draft non-causal: acceptance per position",
                       reference=reference)
plt.show()  # the picture, then what it says
verdict(noncausal_fix_verdict(records, live_runs[1:], reference))

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
check("the draft gets the separate wrapper, planned non-causal",
      draft.prefill is Prefill.NON_CAUSAL and draft.plan_causal is False)
check("target prompts keep the shared causal wrapper",
      target.prefill is Prefill.SHARED_CAUSAL and target.plan_causal is True)
check("DCP and NVFP4 are refused before anything is touched",
      "decode context parallelism" in (refused["DCP"][0] or "") and "NVFP4" in (refused["NVFP4"][0] or "")
      and all(untouched for _, untouched in refused.values()))
check(f"the walkthrough's {len(checks)} checks for step 3 pass", bool(checks) and all(c.passed for c in checks),
      session.judged())

# %% [markdown]
# ## What you saw, and what's next
#
# `plan()` fixes causality; the draft's own wrapper, planned non-causal, gives it the FLASH_ATTN draft's acceptance
# and plain decoding's output except at near-ties; what has no non-causal path is refused first (the kernel against
# the reference: the Appendix). Next, notebook 4: Blackwell's TRTLLM kernels and the RTX 4090 case.

# %% [markdown] tags=["appendix"]
# ## Appendix
#
# **Where this step differs from upstream, on purpose**, from the course's table of upstream claims
# (`dflash_fi.upstream`, each claim tested against the pinned releases' code):

# %% tags=["appendix"]
from dflash_fi.upstream import claim

wrapper_claim = claim("noncausal_wrapper")
print(f"step {wrapper_claim.step}, here: {wrapper_claim.ours}")
print(f"upstream ({', '.join(wrapper_claim.prs)}, {wrapper_claim.when()}): {wrapper_claim.theirs}: "
      f"{wrapper_claim.agreement.value}")
verdict("refused at the top of `build()`, a refused batch changes nothing; vLLM 0.24.0 refuses DCP there too, "
        "but an NVFP4 cache only in `_get_prefill_wrapper()`, after `build()` has written its page-table buffers.")

# %% [markdown] tags=["appendix"]
# **The kernel itself, against the reference.** FlashInfer's non-causal paged prefill on DFlash-shaped batches, with
# its fa2 kernel (all an RTX 4090 has) and with `auto` (PR #43081's choice), bf16 and fp8-e4m3 KV, against
# `dflash_fi.reference.paged_attention` in fp32 ("kernel run": what FlashInfer dispatched; the last column: how far
# the *causal* reference is):

# %% tags=["gpu", "nbval-ignore-output", "appendix"]
if session.gpu_cell():
    errors_by_kernel, bound, table = session.kernel_accuracy()
    show(table)
    worst = max(r["max_abs_err"] for r in errors_by_kernel)
    nearest_causal = min(r["distance_to_causal"] for r in errors_by_kernel)
    verdict(f"every kernel is within {worst:.1e} of the non-causal reference and at least {nearest_causal:.1e} from "
            f"the causal one; the bound between them is {bound}: a kernel planned causal would be caught.")
    check("FlashInfer's non-causal prefill matches the non-causal reference, not the causal one",
          worst < bound < nearest_causal, f"{len(errors_by_kernel)} kernels")

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(3)

# %% [markdown]
# ## Try it yourself
#
# Write step 3's hunks yourself (CPU lab, no GPU), in a terminal: `dflash-fi exercise 3` writes `exercises/step3.py`
# (each hunk's reason, where it lands, the stock text: edit each `"new"`); `dflash-fi exercise 3 --check` checks it.
# Untouched it says `step 3 still fails 4 of 12 checks: plan(causal=False); a wrapper of its own; DCP refused; NVFP4
# refused`; right, `step 3 passes: all 12 checks of steps 1-3 hold with your hunks`. Hint: refuse at the top of
# `build()`, not only in `_get_prefill_wrapper()`. The answer: "Step 3, hunk by hunk" above; the Appendix's diff.
