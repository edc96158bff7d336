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
# # 3 · FlashInfer's `plan()` and `run()`: a separate non-causal wrapper
#
# FlashInfer splits attention in two calls (the fourth and fifth boxes of notebook 1's picture).
# `BatchPrefillWithPagedKVCacheWrapper.plan(...)` takes the batch's shape (`qo_indptr`, `paged_kv_indptr`, heads,
# page size, **`causal`**), picks a kernel and computes a work schedule on the CPU; `run(q, kv_cache)` launches it,
# once per layer, and cannot change the causality `plan()` fixed. vLLM's FlashInfer builder keeps **one** prefill
# wrapper, shared by every causal layer group and planned `causal=True`. So the draft gets a wrapper of its own,
# planned `causal=False`, never handed to a causal batch.

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, show, verdict

# The engines of the section "On the GPU" start now, in the background: each takes most of a minute to start.
live_runs = [P.NO_SPEC, P.FLASH_ATTN, P.step_run(2), P.step_run(3)]
session = setup("03_noncausal_wrapper", live=live_runs)

# %% [markdown]
# ## Step 3, hunk by hunk
#
# Somewhere to keep the second wrapper (hunk 1), never handed to a causal batch, so nothing a causal layer group
# plans can change the draft's causality. Asked with `causal=False`, `_get_prefill_wrapper()` creates it on first
# use (hunk 2; `backend="auto"` leaves the kernel to FlashInfer, step 5 revisits that), after a check for what has
# no non-causal path at all, which `build()` makes before anything else (hunk 3, below):

# %%
from dflash_fi.notebook import show_hunks

show_hunks(3, only=[1, 2, 3], max_lines=None, joined=True)

# %% [markdown]
# The fix itself: the prefill branch of `build()` asks for the wrapper of the batch's causality, and `plan()` is
# told it, where stock vLLM says `causal=True` whatever the batch (hunks 4 and 5). Stock `forward` asserted that
# every prefill wrapper was planned causal; it now compares the wrapper's planned causality with the metadata's,
# so a wrapper planned the wrong way fails loudly at `run()` time (hunk 6).

# %%
show_hunks(3, only=[4, 5, 6], max_lines=None, joined=True)

# %% [markdown]
# Then the routing: the draft's rows change, the target's keep the shared causal wrapper.

# %%
from dflash_fi.lab.batches import DRAFT, PREFILL
from dflash_fi.lab.routes import Prefill, label
from dflash_fi.lab.routing import routing_report, routing_table
from dflash_fi.notebook import changed_rows

show(changed_rows(routing_table(steps=(2, 3))))  # the rows that change: bold, and what changes in them
routes = {r.batch: r for r in routing_report(3).routes}
draft, target = routes[DRAFT], routes[PREFILL]
verdict(f"only the draft rows change, to '{label(draft.prefill)}' planned causal={draft.plan_causal}; "
      f"the target's prompts stay on '{label(target.prefill)}', planned causal={target.plan_causal}.")

# %% [markdown]
# ## What has no non-causal path says so, before it touches anything
#
# DCP splits attention into a context part and a new-token part that assumes causal new tokens; an NVFP4 KV cache
# is served by TRTLLM kernels only. Neither has a non-causal FlashInfer path, so step 3 refuses such a batch first
# thing in `build()`, leaving the caller's metadata and the builder's buffers as they were:

# %%
from vllm.config import set_current_vllm_config

from dflash_fi.lab.batches import STANDARD_BATCHES, common_metadata
from dflash_fi.lab.routing import RoutingLab
from dflash_fi.vocabulary import BLACKWELL

errors, untouched = {}, {}
for name, lab_args in (("DCP", dict(dcp=True)), ("NVFP4", dict(capability=BLACKWELL))):
    with RoutingLab(3, **lab_args) as lab:
        builder, _, config = lab.builders["draft"]
        if name == "NVFP4":
            builder.is_kvcache_nvfp4 = True  # an NVFP4 impl needs CUDA buffers; the builder's flag is what matters
        cad = common_metadata(STANDARD_BATCHES[0])
        seq_lens, page_table = cad.seq_lens.clone(), builder.paged_kv_indptr.cpu.clone()
        with set_current_vllm_config(config):
            try:
                builder.build(0, cad)
            except NotImplementedError as exc:
                errors[name] = str(exc)
        untouched[name] = (bool((cad.seq_lens == seq_lens).all()) and builder._noncausal_prefill_wrapper is None
                           and bool((builder.paged_kv_indptr.cpu == page_table).all()))
for name, message in errors.items():
    print(f"{name}: NotImplementedError: {message}")
print("caller's metadata, the builder's page-table buffers and its wrappers untouched:", untouched)

# %% [markdown]
# ## On the GPU: the first correct step
#
# No speculation, the FLASH_ATTN draft, and steps 2 and 3, started in the first cell:

# %%
from dflash_fi.evidence.live import show_engine_calls

show_engine_calls(live_runs)

# %% tags=["gpu"]
live = session.run_live(live_runs)

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import wrapped_lines

records, reference, source = session.evidence(live_runs)
with wrapped_lines():
    print(source)
    checks = session.check(records, reference)

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures import acceptance_by_position

acceptance_by_position(records, live_runs[1:], title="Step 3 plans the draft non-causal: acceptance per position",
                       reference=reference);
fa, s2, s3 = (records[run].generate().acceptance.per_position for run in live_runs[1:])
verdict(f"step 3 (triangles) lies on the FLASH_ATTN draft (circles), the largest difference "
        f"{max(abs(a - b) for a, b in zip(fa, s3)):.3f} over {len(s3)} positions, so one is drawn inside the other; "
        f"step 2 is well below ({s2[0]:.2f} against {s3[0]:.2f} at the first position).")

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
check("the draft gets the separate wrapper, planned non-causal",
      draft.prefill is Prefill.NON_CAUSAL and draft.plan_causal is False)
check("target prompts keep the shared causal wrapper",
      target.prefill is Prefill.SHARED_CAUSAL and target.plan_causal is True)
check("DCP and NVFP4 are refused before anything is touched",
      "decode context parallelism" in errors["DCP"] and "NVFP4" in errors["NVFP4"] and all(untouched.values()))
check(f"the walkthrough's {len(checks)} checks for step 3 pass", bool(checks) and all(c.passed for c in checks),
      "live" if session.live else "committed records")

# %% [markdown]
# ## What you saw, and what's next
#
# `plan()` fixes causality; a wrapper of the draft's own, planned non-causal, gives the draft the FLASH_ATTN draft's
# acceptance, and greedy output equal to plain decoding's wherever the target is not at a near-tie; what has no
# non-causal path is refused before it changes anything. (FlashInfer's kernel against the reference: the appendix.)
# Next, notebook 4: Blackwell's TRTLLM kernels, the last hunk of the PR, and the RTX 4090 case running.

# %% [markdown]
# ## Appendix

# %% [markdown]
# **Where this step differs from upstream, on purpose.** vLLM 0.24.0 (which contains PR #43081) refuses DCP in
# `build()` after the decode/prefill split and the TRTLLM decision, before it logs or plans, and refuses NVFP4
# only when `build()` asks for the non-causal wrapper: by then the builder has written its page-table buffers.
# Here both are refused at the top of `build()`: a refused batch changes nothing. Read from vLLM 0.24.0's wheel
# (`vllm/v1/attention/backends/flashinfer.py`, `build()` and `_get_prefill_wrapper()`), not run here.

# %% [markdown]
# **The kernel itself, against the reference.** On the GPU, FlashInfer's non-causal paged prefill on DFlash-shaped
# batches, with its fa2 kernel (all an RTX 4090 has) and with `auto` (PR #43081's choice), bf16 and fp8-e4m3 KV,
# against `dflash_fi.reference.paged_attention` in fp32 ("kernel run": what FlashInfer dispatched; the last column:
# how far the *causal* reference is).

# %% tags=["gpu", "nbval-ignore-output", "appendix"]
from dflash_fi.bench.accuracy import ERROR_BOUND, error_table, kernel_errors

if session.gpu_cell():
    errors_by_kernel = kernel_errors()
    show(error_table(errors_by_kernel))
    worst = max(r["max_abs_err"] for r in errors_by_kernel)
    nearest_causal = min(r["distance_to_causal"] for r in errors_by_kernel)
    auto_ran = {r["kv_dtype"]: r["ran"] for r in errors_by_kernel if r["backend"] == "auto"}
    verdict(f"every kernel is within {worst:.1e} of the non-causal reference and at least {nearest_causal:.1e} from "
            f"the causal one; the bound between them is {ERROR_BOUND}. Left to choose, FlashInfer ran "
            + ", ".join(f"{kernel} for {kv}" for kv, kernel in auto_ran.items())
            + f" KV on {session.gpu.name}: FlashInfer's fa3 kernel has no form for bf16 queries over an FP8 "
            "cache.")
    check("FlashInfer's non-causal prefill matches the non-causal reference, not the causal one",
          worst < ERROR_BOUND < nearest_causal, f"{len(errors_by_kernel)} kernels")

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(3)

# %% [markdown]
# ## Try it yourself
#
# Write step 3's hunks yourself, checked by the CPU lab (no GPU). In a terminal (JupyterLab's will do):
#
# ```
# dflash-fi exercise 3           # writes exercises/step3.py: each hunk's reason, where it lands, the stock text
# dflash-fi exercise 3 --check   # your hunks in place of step 3's, on top of the project's steps before it
# ```
#
# Edit each hunk's `"new"` text in that file. The check prints one line per check (steps 1-3, 12 in all) and then
# what still fails. Untouched, it says `step 3 still fails 4 of 12 checks: plan(causal=False); a wrapper of its own;
# DCP refused; NVFP4 refused`: the draft is still planned `causal=True` on the shared wrapper, a causal batch
# re-plans it, and DCP and an NVFP4 cache are not refused. Right, it says `step 3 passes: all 12 checks of steps 1-3
# hold with your hunks` and exits 0. A hunk whose `"old"` text matches twice or nowhere is refused, naming its line
# in your file. The answer is the appendix above.
