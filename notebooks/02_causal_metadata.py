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
# # 2 · The metadata builder: a `causal` field, and all-prefill batches
#
# Once a backend is chosen, every forward pass starts with its **metadata builder**. The model runner (for the
# target) and DFlash's proposer (for the draft) describe the batch in a `CommonAttentionMetadata` (query starts,
# sequence lengths, page table, and `causal`); the builder turns it into the backend's metadata, deciding which
# kernels run which requests. FlashInfer's builder (the third box of notebook 1's picture) first splits the batch
# (`split_decodes_and_prefills`): requests with at most `reorder_batch_threshold` query tokens are *decodes*,
# served by decode kernels (or TRTLLM), the rest *prefills*. The runner orders decodes first, so the split is one
# boundary:

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, show, verdict

# The engines of the section "On the GPU" start now, in the background: each takes most of a minute to start.
live_runs = [P.FLASH_ATTN, P.step_run(2)]
session = setup("02_causal_metadata", live=live_runs)

# %%
from vllm.v1.attention.backends.utils import split_decodes_and_prefills

from dflash_fi.notebook import show_hunks, show_source

show_source(split_decodes_and_prefills, [(r"^    if \($", r"return num_reqs, 0, num_tokens, 0"),
                                         (r"query_lens = query_start_loc", r"return 0, num_reqs"),
                                         (r"first_prefill = ", r"return \(num_decodes")], mark=(r"decode_threshold",))

# %% [markdown]
# ## Step 2, hunk by hunk
#
# DFlash builds its draft metadata with `causal=False` (`DFlashProposer.set_inputs_first_pass`) and then checks that
# every draft layer's metadata says `causal is False`. Stock FlashInfer has nowhere to put that answer. First, a
# field for it:

# %%
show_hunks(2, only=[1], max_lines=None)

# %% [markdown]
# A 16-token draft request is a prefill on an H100/H200 (threshold 1), but where the threshold is higher (Blackwell,
# below) it would be a decode, and a decode kernel cannot let a query token see the ones after it. So a non-causal
# batch goes to prefill whole (hunk 2), and `build()` writes its causality into the metadata DFlash's guard reads
# (hunk 3):

# %%
show_hunks(2, only=[2, 3], max_lines=None)

# %% [markdown]
# ## What each batch becomes
#
# The real `FlashInferMetadataBuilder.build()` of steps 1 and 2, on six standard batches (the DFlash ones are
# what the proposer builds: one block of 16 queries per request). Each cell: the batch's decode and prefill
# requests, on which path, the causality `plan()` was given, and for draft batches `metadata.causal` and DFlash's
# check. FlashInfer's wrappers are the only doubles (each records its `plan()` call); rows that change are bold. On
# an H100/H200 (threshold 1):

# %%
from dflash_fi.lab.routes import Decode, dflash_check, label, metadata_causal
from dflash_fi.lab.routing import routing_report, routing_table
from dflash_fi.notebook import changed_rows
from dflash_fi.vocabulary import BLACKWELL

show(changed_rows(routing_table(steps=(1, 2))))  # the rows that change: bold, and what changes in them
step1, step2 = (routing_report(s).routes[0] for s in (1, 2))
verdict(f"the draft's routing is the same at both steps ({step2.num_prefills} prefill requests, "
      f"plan causal={step2.plan_causal}); what changes is metadata.causal ({metadata_causal(step1)} -> "
      f"{metadata_causal(step2)}), and with it DFlash's check ({dflash_check(step1)} -> "
      f"{dflash_check(step2)}). Target batches do not move.")

# %% [markdown]
# Where TRTLLM attention is available (Blackwell, SM 10.x), vLLM raises the threshold to `1 + 2 x 15` for
# speculative decoding, so the DFlash draft's 16-token requests would be decodes:

# %%
show(changed_rows(routing_table(steps=(1, 2), capability=BLACKWELL, trtllm=True)))
step1_blackwell, step2_blackwell = (routing_report(s, trtllm=True).routes[0] for s in (1, 2))
verdict(f"on Blackwell step 1 sends the draft to {label(step1_blackwell.decode)} "
      f"({step1_blackwell.num_decodes} decode requests); step 2 makes them {step2_blackwell.num_prefills} "
      f"prefill requests, on {label(step2_blackwell.prefill)}: still causal, which step 4 fixes.")

# %% [markdown]
# DFlash's check passes now, but the draft is still planned `causal=True`: this state **runs, and is silently
# wrong**, every block token seeing only the block tokens before it.
#
# ## On the GPU
#
# The FLASH_ATTN draft and step 2's, started in the first cell; then their acceptance per draft position, against
# the reference decoder's two predictions:

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
    print(f"reference decoder on the same prompts: tau non-causal {reference['tau_noncausal']:.3f}, "
          f"causal {reference['tau_causal']:.3f}")
    checks = session.check(records, reference)

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures import acceptance_by_position

acceptance_by_position(records, live_runs, title="Step 2 runs silently causal: acceptance per draft position",
                       reference=reference);
fa, s2 = (records[run].generate().acceptance.per_position for run in live_runs)
ref = reference["per_position_acceptance"]
to_causal, to_noncausal = (sum(abs(x - y) for x, y in zip(s2, ref[k])) / len(s2) for k in ("causal", "noncausal"))
verdict(f"step 2 is {to_causal:.3f} from the reference's causal curve on average and {to_noncausal:.3f} from its "
        f"non-causal one: it drafts causally. At the first position it accepts {s2[0]:.2f} of drafts against the "
        f"FLASH_ATTN draft's {fa[0]:.2f}.")

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
check("on Blackwell, step 1 sends the draft to TRTLLM decode; step 2 to prefill",
      step1_blackwell.decode is Decode.TRTLLM and step2_blackwell.num_decodes == 0)
check("step 2's draft metadata says causal=False and DFlash's check passes",
      step2.metadata_causal is False and step2.dflash_check_passed)
check("step 2 still plans the draft causal (the silent bug)", step2.plan_causal is True)
check(f"the walkthrough's {len(checks)} checks for step 2 pass", bool(checks) and all(c.passed for c in checks),
      "live" if session.live else "committed records")

# %% [markdown]
# ## What you saw, and what's next
#
# The builder's decode/prefill split decides which kernels run; a non-causal batch must be all prefill. Step 2's
# `causal` field satisfies DFlash's guard, and the engine runs, with the acceptance of causal drafting. Next,
# notebook 3: FlashInfer's `plan()` and `run()` (the picture's next two boxes), and a wrapper of the draft's own,
# planned non-causal.

# %% [markdown]
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
# Edit each hunk's `"new"` text in that file. The check prints one line per check (steps 1-2, 7 in all) and then
# what still fails. Untouched, it says `step 2 still fails 3 of 7 checks: draft all prefill; metadata.causal;
# DFlash's check`: on Blackwell the draft still goes to TRTLLM decode, `FlashInferMetadata` has no `causal` field,
# and DFlash's own assertion refuses the draft's metadata. Right, it says `step 2 passes: all 7 checks of steps 1-2
# hold with your hunks` and exits 0. A hunk whose `"old"` text matches twice or nowhere is refused, naming its line
# in your file. The answer is the appendix above.
