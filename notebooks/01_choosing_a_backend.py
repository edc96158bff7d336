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
# # 01 · How vLLM picks an attention backend, and the capability flag
#
# Every attention layer asks for its backend once, when the model is built: `get_attn_backend` packs head size,
# dtypes, ... `use_non_causal` into an `AttentionSelectorConfig` and asks the platform; the draft's layers ask apart.

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import runs as P, setup, check, show, show_engine_calls, show_source, verdict, wrapped_lines

live_runs = [P.FLASH_ATTN, P.step_run(0), P.step_run(1), P.RTX4090_STOCK]  # start now (section "On the GPU")
session = setup("01_choosing_a_backend", live=live_runs)

# %% [markdown]
# ## The path of a draft layer, and where each step lands
#
# Selection happens once; then each draft step runs the builder's `build()` and the wrapper's `plan()` (per layer
# group), then `run()` and a kernel per layer:

# %% tags=["nbval-ignore-output"]
from matplotlib import pyplot as plt
from dflash_fi.figures import draft_layer_path
from dflash_fi.figures.path import LANDS, STAGES, marks_of
from dflash_fi.steps import PR_43081_STEPS as PR

draft_layer_path(marks_of({step: LANDS[step] for step in PR}), title="Where each step of PR #43081 lands")
plt.show()  # the picture, then what it says
names = {key: name for key, name, *_ in STAGES}
verdict("only step 1 touches the selector (this notebook); the PR's other steps change what happens once a backend "
        "is chosen: " + "; ".join(f"step {step} in " + ", ".join(names[k] for k in dict.fromkeys(LANDS[step]))
                                  for step in PR[1:]) + f". Steps {PR[-1] + 1}-{max(LANDS)}, after the PR, land on "
        "the same boxes (notebooks 6 and 7 draw them).")

# %% [markdown]
# ## What vLLM checks, in its own code
#
# `get_attn_backend_cls` checks a backend asked for alone (a refusal raises); with none, `get_valid_backends` walks the
# GPU's list, and no valid one raises (the RTX 4090's "no backend"). The draft asks with its own
# `speculative_config["attention_backend"]` (None: the selector picks) and `use_non_causal=True`, checked last:

# %%
from dflash_fi.figures.path import selector_listings

for function, blocks, mark in selector_listings():  # vLLM 0.22.1's own lines, the ones the lesson turns on
    show_source(function, blocks, mark=mark)

# %% [markdown]
# ## The priority lists, and the draft's selection before and after step 1
#
# Each GPU's list (vLLM's own `_get_backend_priorities` at SM 8.9, 9.0, 10.0), then the draft's pick per GPU and KV
# cache, before and after step 1:

# %%
from dflash_fi.lab.selector import (PickChange, column, pick_changes, priority_inputs, priority_lists,
                                    priority_table, selector_matrix)
from dflash_fi.figures import selector_grid
from dflash_fi.vocabulary import BLACKWELL, HOPPER, RTX_4090

GPUS = (RTX_4090, HOPPER, BLACKWELL)
show(priority_table(GPUS, roles=("target",)))  # each GPU's list; the target's pick (the draft's: the grid below)
lists = priority_lists(GPUS)
matrix = [r for r in selector_matrix(steps=(0, 1), capabilities=GPUS) if r["role"] == "draft"]
verdict(f"the list depends on ({', '.join(priority_inputs())}) only, so the target and the draft walk the same "
        f"list and only `use_non_causal` tells them apart. {sum(lists[c][0] == 'FLASHINFER' for c in lists)} of "
        f"{len(lists)} GPUs put FLASHINFER first.")

# %% tags=["nbval-ignore-output"]
selector_grid(matrix);

# %%
NON_CAUSAL = "non-causal attention not supported"  # validate_configuration's reason, as marked above
changes = pick_changes(matrix, lists, reason=NON_CAUSAL)  # step 0 against step 1, per column of the grid
verdict(f"FLASHINFER refuses the draft in {changes.refused_before} of {changes.columns} columns at step 0, for "
        f"non-causal attention, and accepts it in {changes.accepted_after} at step 1. vLLM's own pick changes in "
        + "; ".join(f"{c.column}: {c.before or 'no backend'} -> {c.after}" for c in changes.changed) + ".")
with wrapped_lines():
    check("the pick changes exactly where the list puts FLASHINFER before FLASH_ATTN (SM "
          + ", ".join(changes.flashinfer_first) + "), or where no other backend accepts the draft ("
          + ", ".join(column(*key) for key in changes.unserved_before) + ")", changes.as_the_lists_say)

# %% [markdown]
# ## Step 1: one method, and the guard behind it
#
# Step 1 is one classmethod on `FlashInferBackend` (the exercise at the end asks for it; its answer is the Appendix).
# Nothing below the selector knows causality yet: DFlash's guard refuses the draft's metadata:

# %%
from vllm.v1.spec_decode.dflash import DFlashProposer

show_source(DFlashProposer.build_per_group_and_layer_attn_metadata,
            [(r"for layer_name, attn_metadata in per_layer", r"return per_group")], mark=(r"assert getattr",))

# %% [markdown]
# ## On the GPU
#
# Four engines, started in the first cell; then the walkthrough's checks on them (without a GPU: the evidence's):

# %%
show_engine_calls(live_runs)

# %% tags=["gpu"]
live = session.run_live(live_runs)

# %% tags=["nbval-ignore-output"]
from dflash_fi.records.engine import outcome

records, reference, source = session.evidence(live_runs)
checks = session.check(records, reference, quiet=True)  # its lines carry whole error messages: shown shorter below
with wrapped_lines():
    print(source)
    for c in checks:  # by name only: the verdict says how each run ended
        print(f"{c.verdict.value}  {c.name}")
at = {run: outcome(records[run]) if run in records else "not recorded" for run in live_runs}
verdict(f"step 0's draft: {at[live_runs[1]]}; step 1's passes selection, then DFlash's guard fails "
        f"({at[live_runs[2]]}); stock RTX 4090 + FP8: no backend ({at[live_runs[3]]}).")

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
from dflash_fi.lab.batches import STANDARD_BATCHES
from dflash_fi.lab.routing import RoutingLab

with RoutingLab(1) as lab:  # step 1's real build() on a DFlash draft batch, its metadata handed to DFlash's guard
    draft_row = lab.route(STANDARD_BATCHES[0])
with wrapped_lines():
    check("stock FLASHINFER refuses the draft everywhere, for non-causal attention",
          changes.refused_before == changes.columns, f"{changes.columns} columns")
    check("the RTX 4090 + FP8 draft has no backend at step 0 and FLASHINFER at step 1",
          PickChange("8.9", "fp8", None, "FLASHINFER") in changes.changed)
    check("step 1: FLASHINFER accepted everywhere; its metadata has no causal field, so DFlash's guard refuses it",
          changes.accepted_after == changes.columns and draft_row.metadata_causal is None
          and draft_row.dflash_check_passed is False)
    check(f"the walkthrough's {len(checks)} checks for these runs pass",
          bool(checks) and all(c.passed for c in checks), session.judged())

# %% [markdown]
# ## What you saw, and what's next
#
# The selector walks the list; stock FlashInfer refuses `use_non_causal=True`, step 1 accepts it, DFlash's
# guard refuses next. Notebook 2: the metadata builder.

# %% [markdown] tags=["appendix"]
# ## Appendix
#
# Step 1's hunk, the exercise's answer:

# %% tags=["appendix"]
from dflash_fi.notebook import show_hunks, show_step_diff

show_hunks(1)

# %% [markdown] tags=["appendix"]
# `validate_configuration` reads only this flag; nothing else of the backend changes at step 1. The same hunk as a
# diff of vLLM 0.22.1's file:

# %% tags=["appendix"]
show_step_diff(1)

# %% [markdown]
# ## Try it yourself
#
# Write step 1's hunk yourself, checked by the CPU lab (no GPU), in a terminal (JupyterLab's will do):
#
# ```
# dflash-fi exercise 1           # writes exercises/step1.py: each hunk's reason, where it lands, the stock text
# dflash-fi exercise 1 --check   # your hunks in place of step 1's, on top of the project's steps before it
# ```
#
# Edit the hunk's `"new"` text in that file. Untouched, the check says `step 1 still fails 2 of 3 checks: selector
# accepts the draft; RTX 4090 fp8 draft`; right, `step 1 passes: all 3 checks of step 1 hold with your hunks` (exit
# 0). The answer: step 1's hunk, in the Appendix.
