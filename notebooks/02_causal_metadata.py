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
# # 02 · The metadata builder: a `causal` field, and all-prefill batches
#
# Every forward pass starts with the **metadata builder** (notebook 1's third box): the runner (target) and DFlash's
# proposer (draft) describe the batch in a `CommonAttentionMetadata` (query starts, sequence lengths, page table,
# `causal`); `build()` turns it into the backend's metadata, once per layer group and batch, choosing the kernels.

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import runs as P
from dflash_fi.notebook import setup
from dflash_fi.notebook import check, show, show_hunks, show_source, verdict

live_runs = [P.FLASH_ATTN, P.step_run(2)]  # start now, in the background (section "On the GPU")
session = setup("02_causal_metadata", live=live_runs)

# %% [markdown]
# ## What `build()` does, in vLLM's own code
#
# Stock `FlashInferMetadataBuilder.build()` in outline, the lines the PR's steps change marked (decodes left out):

# %%
from IPython.display import display

from dflash_fi.figures.path import build_outline

display(build_outline())  # vLLM 0.22.1's build(), as installed: the lines kept, each noted (figures/path.py)

# %% [markdown]
# The split: requests of at most `reorder_batch_threshold` query tokens are *decodes* (decode kernels or TRTLLM), the
# rest *prefills*; decodes come first, so the split is one boundary. FlashInfer passes `require_uniform=True`: decodes
# must all have the same query length, or they count as prefills:

# %%
from vllm.v1.attention.backends.utils import split_decodes_and_prefills

show_source(split_decodes_and_prefills, [(r"is_prefill = query_lens > decode_threshold", r"is_prefill = query_lens >"),
                                         (r"first_prefill = ", r"num_decodes = first_prefill")],
            mark=(r"decode_threshold", r"first_prefill = "))

# %% [markdown]
# ## Step 2, hunk by hunk
#
# DFlash builds its draft metadata with `causal=False` (`DFlashProposer.set_inputs_first_pass`) and then checks that
# every draft layer's metadata says `causal is False`. Stock FlashInfer has nowhere to put that answer. Step 2 is
# three hunks: a `causal` field on the metadata (1); a non-causal batch made all prefill (2); `build()` recording the
# batch's causality (3). **Try them first**: `dflash-fi exercise 2` in a terminal gives you the stock text to edit
# ("Try it yourself", at the end, says how it is checked); then read the hunks below as the answer. Hunk 1, the field:

# %%
show_hunks(2, only=[1], max_lines=None, context=1)

# %% [markdown]
# A decode kernel cannot let a query token see later ones, and where the threshold is high (Blackwell, below) a
# draft request would be a decode: a non-causal batch is all prefill (hunk 2); `build()` records its causality (hunk 3):

# %%
show_hunks(2, only=[2, 3], max_lines=None, context=1)

# %% [markdown]
# ## What each batch becomes
#
# The `build()` of steps 1 and 2 on six batches, FlashInfer's wrappers replaced by recording stand-ins (no GPU);
# rows that change bold. H100/H200:

# %%
from dflash_fi.lab.routes import Decode, dflash_check, metadata_causal, path_label
from dflash_fi.lab.routing import routing_report, routing_rows
from dflash_fi.notebook import changed_rows
from dflash_fi.vocabulary import BLACKWELL

show(changed_rows(*routing_rows(steps=(1, 2))))  # the rows that change: bold, and what changes in them
step1, step2 = (routing_report(s).routes[0] for s in (1, 2))
verdict(f"the draft's routing is the same at both steps ({step2.num_prefills} prefill requests, "
      f"plan causal={step2.plan_causal}); what changes is metadata.causal ({metadata_causal(step1)} -> "
      f"{metadata_causal(step2)}), and with it DFlash's check ({dflash_check(step1)} -> "
      f"{dflash_check(step2)}). Target batches do not move.")

# %% [markdown]
# Where TRTLLM attention is available (Blackwell, SM 10.x), vLLM raises the threshold to `1 + 2 x 15` for
# speculative decoding (one verified token plus twice the 15 speculative tokens, since DFlash drafts in parallel), so
# the DFlash draft's 16-token requests would be decodes:

# %%
show(changed_rows(*routing_rows(steps=(1, 2), capability=BLACKWELL, trtllm=True)))
step1_blackwell, step2_blackwell = (routing_report(s, trtllm=True).routes[0] for s in (1, 2))
verdict(f"on Blackwell step 1 sends the draft to {path_label(step1_blackwell.decode)} "
      f"({step1_blackwell.num_decodes} decode requests); step 2 makes them {step2_blackwell.num_prefills} "
      f"prefill requests, on {path_label(step2_blackwell.prefill)}: still causal, which step 4 fixes.")

# %% [markdown]
# ## On the GPU: it runs, and is silently wrong
#
# DFlash's check passes, but the draft is still planned `causal=True`. The FLASH_ATTN draft and step 2's:

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
    print(f"the reference decoder on the same {reference['n_prompts']} prompts x {reference['n_new_tokens']} tokens: "
          f"tau non-causal {reference['tau_noncausal']:.3f}, causal {reference['tau_causal']:.3f}")
    checks = session.check(records, reference)

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures import acceptance_by_position
from dflash_fi.figures.acceptance import causal_drift_verdict

from matplotlib import pyplot as plt

acceptance_by_position(records, live_runs, title="Step 2 runs silently causal: acceptance per draft position",
                       reference=reference)
plt.show()  # the picture, then what it says
verdict(causal_drift_verdict(records, live_runs, reference))

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
check("on Blackwell, step 1 sends the draft to TRTLLM decode; step 2 to prefill",
      step1_blackwell.decode is Decode.TRTLLM and step2_blackwell.num_decodes == 0)
check("step 2's draft metadata says causal=False and DFlash's check passes",
      step2.metadata_causal is False and step2.dflash_check_passed)
check("step 2 still plans the draft causal (the silent bug)", step2.plan_causal is True)
check(f"the walkthrough's {len(checks)} checks for step 2 pass", bool(checks) and all(c.passed for c in checks),
      session.judged())

# %% [markdown]
# ## What you saw, and what's next
#
# The split decides the kernels, so a non-causal batch must be all prefill; the `causal` field satisfies DFlash's
# guard, and the engine runs, drafting causally. Next, notebook 3: `plan()` and `run()`, and a non-causal wrapper.

# %% [markdown] tags=["appendix"]
# ## Appendix

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(2)

# %% [markdown]
# ## Try it yourself
#
# Write step 2's hunks yourself, checked by the CPU lab (no GPU). In a terminal (JupyterLab's will do):
#
# ```
# dflash-fi exercise 2           # writes exercises/step2.py: each hunk's reason, where it lands, the stock text
# dflash-fi exercise 2 --check   # your hunks in place of step 2's, on top of the project's steps before it
# ```
#
# Edit each hunk's `"new"` text. Untouched, it says `step 2 still fails 3 of 7 checks: draft all prefill;
# metadata.causal; DFlash's check`. Right, it says `step 2 passes: all 7 checks of steps 1-2 hold with your hunks` and
# exits 0. The answer is the three hunks in "Step 2, hunk by hunk" above.
