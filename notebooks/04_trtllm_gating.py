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
# # 04 · TRTLLM gating: the PR's last hunk, and the RTX 4090 case
#
# On Blackwell (SM 10.x) vLLM prefers TRTLLM kernels inside the FlashInfer backend, for prefill and decode; they
# are causal only. Step 3 planned the draft's wrapper non-causal, but `build()` (the third box of notebook 1's
# picture) decides *before* the wrapper whether the batch runs on TRTLLM at all, ignoring causality. Step 4 fixes it.
# The RTX 4090 case (SM 8.9: no TRTLLM) is correct since step 3; it is shown here with the complete PR.

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import runs as P
from dflash_fi.notebook import check, setup, show, verdict

# start now, in the background (section "On the GPU")
live_runs = [P.step_run(3), P.step_run(4), P.NO_SPEC_FP8, P.FP8, P.RTX4090_NO_SPEC, P.RTX4090_STEP4]
session = setup("04_trtllm_gating", live=live_runs)

# %% [markdown]
# ## Step 4, hunk by hunk
#
# `build()` asks vLLM's `use_trtllm_attention` separately for prefills and decodes, and that function has no
# `causal` parameter, so it cannot know that a DFlash draft batch must not go to TRTLLM:

# %%
from vllm.utils.flashinfer import use_trtllm_attention

from dflash_fi.notebook import show_source

show_source(use_trtllm_attention, [(r"num_qo_heads: int,", r"-> bool:")])

# %% [markdown]
# So the check goes in `build()`: a non-causal batch never asks for TRTLLM prefill (hunk 1). Step 2 made it all
# prefill, so with hunk 1 `all_uses_trtllm` is already False, and vLLM reads `decode_use_trtllm` only for decodes:
# hunk 2 changes no route DFlash takes. It keeps both False for any non-causal batch, defensively, and logs once.
#
# **Try it yourself first** (CPU lab, no GPU): `dflash-fi exercise 4` in a terminal writes `exercises/step4.py` (edit
# each hunk's `"new"`), `dflash-fi exercise 4 --check` checks it: untouched, `step 4 still fails 2 of 14 checks: no
# TRTLLM for the draft; one warning`; right, `step 4 passes: all 14 checks of steps 1-4 hold with your hunks`. Hint:
# `causal` is in scope in `build()` where both decisions are made. The answer:

# %%
from dflash_fi.notebook import show_hunks

show_hunks(4, max_lines=None)

# %% [markdown]
# ## Forced TRTLLM, before and after
#
# An H100 or H200 has no TRTLLM, so neither hunk changes anything there; in the CPU lab's
# `pretend_gpu((10, 0), trtllm=True)` vLLM's `CudaPlatform` reports SM 10.0 with TRTLLM. What each step's builder does
# with the batches (stock's draft, which the selector refuses, built by the lab anyway):

# %%
from dflash_fi.figures.path import gating_verdict, trtllm_gating
from dflash_fi.lab.routes import Prefill
from dflash_fi.lab.routing import routing_rows
from dflash_fi.notebook import changed_rows
from dflash_fi.vocabulary import BLACKWELL

show(changed_rows(*routing_rows(steps=(0, 3, 4), capability=BLACKWELL, trtllm=True)))
gating = trtllm_gating()  # the draft's route at steps 0, 3, 4; step 4's warnings; its target routes against stock's
verdict(gating_verdict(gating))

# %% [markdown]
# ## On the GPU, and the RTX 4090 case
#
# An H100 or H200 has no TRTLLM, so step 4's output must equal step 3's there, up to **near-ties**: positions where
# the target's two best tokens are closer than a margin measured between correct engines. The RTX 4090 case
# (FlashAttention forced to version 2, an FP8 cache) runs with the complete PR. The engines:

# %%
from dflash_fi.notebook import show_engine_calls

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
import dflash_fi.records.summary as S
from dflash_fi.figures.attention import rtx4090_verdict

rtx = records[P.RTX4090_STEP4]
made = rtx.provenance or S.read().walkthrough().provenance  # where a live record ran; else the summary section
verdict(rtx4090_verdict(rtx, made))

# %% [markdown]
# Every eager run of the committed walkthrough, against the reference decoder on the walkthrough's own prompt set
# (named below; on a GPU the live runs above decode a smaller set, and tau differs a little from set to set, so each
# set is compared only with itself):

# %% tags=["nbval-ignore-output"]
from matplotlib import pyplot as plt

from dflash_fi.figures import tau_by_step
from dflash_fi.figures.acceptance import pr_tau_verdict
from dflash_fi.notebook import section_note

recorded_walkthrough = S.read().walkthrough()
walkthrough, walkthrough_reference = recorded_walkthrough.records, recorded_walkthrough.reference
eager = [P.FLASH_ATTN, *(P.step_run(s) for s in range(5)), P.FP8, P.RTX4090_STEP4]  # the PR's steps only
with wrapped_lines():
    print(section_note(S.Section.WALKTHROUGH))  # the verdict below names its prompt set
tau_by_step(walkthrough, walkthrough_reference, [run for run in eager if run in walkthrough])
plt.show()  # the picture, then what it says
verdict(pr_tau_verdict({run: walkthrough[run] for run in eager if run in walkthrough}, walkthrough_reference))

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
from dflash_fi.lab.selector import non_causal_support

check("on Blackwell, step 3 still sends the draft to TRTLLM prefill; step 4 to its non-causal wrapper",
      gating.before.prefill is Prefill.TRTLLM and gating.after.prefill is Prefill.NON_CAUSAL
      and gating.after.plan_causal is False)
check("step 4 warns once, and routes every target batch as stock does",
      len(gating.warnings) == 1 and gating.targets_as_stock)
stock_support, step4_support = (non_causal_support(s) for s in (0, 4))  # every backend's class, stock and step 4
check("of vLLM's non-MLA backends, only FLASHINFER's supports_non_causal() changes from stock to step 4 (False -> True)", {
    n: (stock_support[n], step4_support[n]) for n in stock_support if stock_support[n] != step4_support[n]
} == {"FLASHINFER": (False, True)})
check(f"the walkthrough's {len(checks)} checks for step 4 and the RTX 4090 case pass",
      bool(checks) and all(c.passed for c in checks),
      session.judged())

# %% [markdown]
# ## What you saw, and what's next
#
# On Blackwell the draft must also be kept off TRTLLM, whose kernels are causal only: step 4, the PR's last hunk.
# The RTX 4090 case, correct since step 3 (SM 8.9 has no TRTLLM), shown with the complete PR: target and draft on
# FlashInfer with an FP8 cache. Next, notebook 5: where PR #43081 went in vLLM, from the release that merged it to
# today's.

# %% [markdown] tags=["appendix"]
# ## Appendix
#
# How the engines watch for the plan race: `docs/plan-race.md`. The target's batches must be routed as stock vLLM
# routes them: the table above compares the standard batches, this property test of `tests/lab/test_routing.py`
# random ones.

# %% tags=["appendix"]
from dflash_fi.notebook import show_test

show_test("tests/lab/test_routing.py", "test_property_step4_non_causal_never_decode_trtllm_or_cascade")

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(4)
