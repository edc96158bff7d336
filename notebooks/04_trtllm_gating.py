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
# # 4 · TRTLLM gating: the last hunk of PR #43081, and the RTX 4090 case running
#
# On Blackwell (SM 10.x) vLLM prefers TRTLLM kernels inside the FlashInfer backend, for prefill and for decode.
# They are causal only. Step 3 planned the draft's wrapper non-causal, but on Blackwell the builder decides
# *before* it gets to the wrapper whether the batch runs on TRTLLM at all (in `build()`, the third box of notebook
# 1's picture), and that decision still ignores causality. Step 4 is the last hunks of PR #43081.

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, show, verdict

# The engines of the section "On the GPU" start now, in the background: each takes most of a minute to start.
live_runs = [P.step_run(3), P.step_run(4), P.NO_SPEC_FP8, P.FP8, P.RTX4090_NO_SPEC, P.RTX4090_STEP4]
session = setup("04_trtllm_gating", live=live_runs)

# %% [markdown]
# ## Step 4, hunk by hunk
#
# `build()` decides TRTLLM or not separately for the batch's prefills and its decodes. For prefill, a non-causal
# batch now never asks:

# %%
from dflash_fi.notebook import show_hunks

show_hunks(4, only=[1])

# %% [markdown]
# Step 2 already made a non-causal batch all prefill, so the decode decision matters only through
# `all_uses_trtllm`, which sends the whole batch down TRTLLM's path and skips FlashInfer's own wrappers. Both are
# now False for a non-causal batch, and the engine says once that the draft runs on FlashInfer's own kernels while
# the target may keep TRTLLM:

# %%
show_hunks(4, only=[2])

# %% [markdown]
# ## Forced TRTLLM, before and after
#
# No Blackwell here: `pretend_gpu((10, 0), trtllm=True)` makes vLLM's `CudaPlatform` report SM 10.0 and
# answer "yes" where vLLM asks whether TRTLLM attention can be used. The table is what each step's builder does
# with the draft's batches *past the selector*: stock vLLM never gets this far (it refuses FlashInfer for the
# draft at selection, notebook 1); the lab builds the draft's layers on stock FlashInfer anyway, to show where its
# builder would send them.

# %%
from dflash_fi.lab.routes import Prefill, label
from dflash_fi.lab.routing import routing_report, routing_table
from dflash_fi.vocabulary import BLACKWELL

show(routing_table(steps=(0, 3, 4), capability=BLACKWELL, trtllm=True))
stock, before, after = (routing_report(s, trtllm=True).routes[0] for s in (0, 3, 4))
warnings = routing_report(4, trtllm=True).step_warnings
verdict(f"stock would run the draft on {label(stock.decode)}, step 3 on {label(before.prefill)} (both causal); "
      f"step 4 keeps it on {label(after.prefill)}, planned causal={after.plan_causal}. "
      "The target rows are the same in every column.")
print("logged once by step 4:", [w.message for w in warnings])

# %% [markdown]
# The target's batches must be routed exactly as stock vLLM routes them, at every step: the change is for
# the draft alone. Compared over the standard batches here, and over 300 random batches by the property test
# in `tests/lab/test_routing.py`, whose statement is:

# %%
import ast
import inspect
from dataclasses import replace
from pathlib import Path

from IPython.display import display

import dflash_fi
from dflash_fi.figures.listings import code_block

tests = Path(inspect.getfile(dflash_fi)).resolve().parent.parent / "tests" / "lab" / "test_routing.py"
tree = ast.parse(tests.read_text())
prop = next(n for n in tree.body if isinstance(n, ast.FunctionDef)
            and n.name == "test_property_step4_non_causal_never_decode_trtllm_or_cascade")
display(code_block(ast.get_source_segment(tests.read_text(), prop), "tests/lab/test_routing.py"))


def target_routes(step):
    return [replace(r, metadata_causal=None) for r in routing_report(step, trtllm=True).routes if r.role == "target"]


same_as_stock = target_routes(4) == target_routes(0)
print("step 4 routes every standard target batch as stock does:", same_as_stock)

# %% [markdown]
# vLLM's attention-backend feature table has a "Non-Causal" column; generated from the live classes, the one
# row that differs between stock vLLM 0.22.1 and step 4:

# %%
from dflash_fi.lab.selector import non_causal_support

stock_support, step4_support = (non_causal_support(s) for s in (0, 4))
changed = {name: (stock_support[name], step4_support[name]) for name in stock_support
           if stock_support[name] != step4_support[name]}
show("| | Backend | Non-Causal |\n|---|---|---|\n" + "\n".join(
    f"| {which} | `{name}` | {'✅' if supported else '❌'} |"
    for name, pair in changed.items() for which, supported in zip(("stock", "step 4"), pair)))
verdict(f"{len(changed)} of {len(stock_support)} backends changes, {', '.join(changed)}, to supported.")

# %% [markdown]
# ## On the GPU, and the RTX 4090 case running
#
# An H100 or H200 has no TRTLLM attention, so step 4 changes no kernel there: its output must equal step 3's.
# With an FP8 KV cache, FP8 changes the target's own numbers: the check is that drafting stays non-causal (tau
# above the midpoint of the reference's two predictions), and that the output equals plain decoding's with the
# same FP8 cache, near-ties aside. The RTX 4090 case is vLLM's FlashAttention forced to version 2, an FP8 cache and
# the draft's backend left to the selector: notebook 1 showed stock vLLM failing to start; step 4 runs, target and
# draft on FlashInfer. The engines, started in the first cell (notebook 0, "Numbers you will see"):

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

# %% [markdown]
# What the RTX 4090 engine ran, in vLLM's own words: each layer's backend, the FlashAttention version vLLM's
# `get_flash_attn_version` answers under this engine's config, and vLLM's log lines naming it (if any layer ran
# FlashAttention):

# %% tags=["nbval-ignore-output"]
from dflash_fi.lab.selector import backend_verdicts
from dflash_fi.vocabulary import RTX_4090

from dflash_fi.engine.records import short_backend

rtx = records[P.RTX4090_STEP4]
ran = {"target": sorted({short_backend(b) for b in rtx.target_backends}),
       "draft": sorted({short_backend(b) for b in rtx.draft_backends})}
print("target layers:", [b.qualname for b in rtx.target_backends], "\ndraft layers: ",
      [b.qualname for b in rtx.draft_backends])
print("FlashAttention version vLLM answers:", rtx.flash_attn_version)
print("vLLM's log lines:", list(rtx.flash_attn_log_lines) or "none (no layer ran FlashAttention)")
flash_attn_fp8 = {v["backend"]: v["reasons"] for v in backend_verdicts(0, RTX_4090, "fp8", "target")}["FLASH_ATTN"]
verdict(f"vLLM's FlashAttention answers version {rtx.flash_attn_version}; on the CPU lab's pretended RTX 4090 "
        f"it refuses an FP8 cache ('{'; '.join(flash_attn_fp8) or 'no reason'}'), and here the target's layers run on "
        f"{', '.join(ran['target'])} and the draft's on {', '.join(ran['draft'])}. Still not a real 4090: the silicon is "
        f"{rtx.provenance.gpu} (SM {rtx.provenance.compute_capability}), and FlashInfer picks its kernels for that.")

# %% [markdown]
# Every eager run of the committed walkthrough, against the reference decoder's two predictions (the walkthrough
# reruns them all with `dflash-fi walkthrough`):

# %% tags=["nbval-ignore-output"]
import dflash_fi.summary as S
from dflash_fi.figures import tau_by_step
from dflash_fi.steps import STEPS

walkthrough, walkthrough_reference, _, _, made = S.read().walkthrough()
provenance = f"the evidence summary's walkthrough: {S.describe(made)}"
eager = [P.FLASH_ATTN, *(P.step_run(s) for s in STEPS), P.FP8, P.RTX4090_STEP4]
print(provenance)
tau_by_step(walkthrough, walkthrough_reference, [run for run in eager if run in walkthrough]);
bf16 = [walkthrough[P.step_run(s)].tau for s in STEPS if s >= 3 and P.step_run(s) in walkthrough]
fp8 = {run: walkthrough[run] for run in (P.FP8, P.RTX4090_STEP4) if run in walkthrough and walkthrough[run].tau}


def target_backend(record):
    return short_backend(record.target_backends[0])


verdict(f"steps 0 and 1 fail (no bar); step 2 sits at the causal prediction "
        f"({walkthrough[P.step_run(2)].tau:.2f} against {walkthrough_reference['tau_causal']:.2f}); steps 3 on at "
        f"the non-causal one ({min(bf16):.2f} to {max(bf16):.2f} against {walkthrough_reference['tau_noncausal']:.2f})."
        + (" The fp8 runs, " + " and ".join(f"{r.tau:.2f} with a {target_backend(r)} target" for r in fp8.values())
           + (", are lower" if max(r.tau for r in fp8.values()) < min(bf16) else ", differ") + ": an FP8 cache changes the target's own numbers, and two target backends on it decode different "
           "text from their first near-tie on (notebook 0), so each tau is measured on its own text. Both are far "
           "above the causal prediction." if fp8 else ""))

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
check("on Blackwell, step 3 still sends the draft to TRTLLM prefill; step 4 to its non-causal wrapper",
      before.prefill is Prefill.TRTLLM and after.prefill is Prefill.NON_CAUSAL and after.plan_causal is False)
check("step 4 warns once, and routes every target batch as stock does", len(warnings) == 1 and same_as_stock)
check("the feature table's Non-Causal column gains FlashInfer and nothing else",
      changed == {"FLASHINFER": (False, True)})
check(f"the walkthrough's {len(checks)} checks for step 4 and the RTX 4090 case pass",
      bool(checks) and all(c.passed for c in checks),
      "live" if session.live else "committed records")

# %% [markdown]
# ## What you saw, and what's next
#
# - On Blackwell the draft must also be kept off TRTLLM, whose kernels are causal only: step 4, the PR's last hunk.
# - With step 4 the RTX 4090 case runs: target and draft on FlashInfer, with an FP8 cache. Its output need not
#   equal plain decoding's with the same cache in every request: the check above counts the requests that part,
#   and passes only if each parts at a near-tie, where rounding can flip the target's choice (notebook 0).
#
# Next, notebook 5: what upstream fixed after the PR (vLLM PR #48167), and what each step claims about CUDA graphs.

# %% [markdown]
# ## Appendix

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(4)

# %% [markdown]
# ## Try it yourself
#
# Write step 4's hunks yourself, checked by the CPU lab (no GPU). In a terminal (JupyterLab's will do):
#
# ```
# dflash-fi exercise 4           # writes exercises/step4.py: each hunk's reason, where it lands, the stock text
# dflash-fi exercise 4 --check   # your hunks in place of step 4's, on top of the project's steps before it
# ```
#
# Edit each hunk's `"new"` text in that file. The check prints one line per check (steps 1-4, 14 in all) and then
# what still fails. Untouched, it says `step 4 still fails 2 of 14 checks: no TRTLLM for the draft; one warning`: on
# Blackwell the draft still runs on TRTLLM prefill (causal only), and nothing warns that it cannot. Right, it says
# `step 4 passes: all 14 checks of steps 1-4 hold with your hunks` and exits 0. A hunk whose `"old"` text matches
# twice or nowhere is refused, naming its line in your file. The answer is the appendix above.
