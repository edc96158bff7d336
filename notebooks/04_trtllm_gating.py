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
# # 4 · TRTLLM gating: the last hunk of PR #43081
#
# On Blackwell (SM 10.x) vLLM prefers NVIDIA's TRTLLM-gen kernels inside the FlashInfer backend, for prefill
# and for decode. They are causal only. Step 3 planned the draft's wrapper non-causal, but on Blackwell the
# builder decides *before* it gets to the wrapper whether the batch runs on TRTLLM at all, and that decision
# still ignores causality. Step 4 makes `prefill_use_trtllm`, `decode_use_trtllm` and `all_uses_trtllm`
# False for a non-causal batch, and says once that the draft runs on FlashInfer's own kernels while the
# target may keep TRTLLM.

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import setup, show
from dflash_fi.evidence.plan import FP8, step_label

session = setup("04_trtllm_gating")

# %%
from dflash_fi.steps import hunk_diff

print(hunk_diff(4))

# %% [markdown]
# ## Forced TRTLLM, before and after
#
# No Blackwell here: `pretend_gpu((10, 0), trtllm=True)` makes vLLM's `CudaPlatform` report SM 10.0 and
# answer "yes" where vLLM asks whether TRTLLM attention can be used. Stock (step 0) sends the draft to TRTLLM
# decode, steps 2 and 3 to TRTLLM prefill: both causal. Step 4 keeps it on the separate non-causal wrapper:

# %%
from dflash_fi.lab.routing import routing_report, routing_table
from dflash_fi.vocabulary import BLACKWELL

show(routing_table(steps=(0, 3, 4), capability=BLACKWELL, trtllm=True))
warnings = routing_report(4, trtllm=True)["dflash_warnings"]
print("logged once by step 4:", warnings)

# %% [markdown]
# The target's batches must be routed exactly as stock vLLM routes them, at every step: the change is for
# the draft alone. Compared over the standard batches here, and over 300 random batches by the property test
# in `tests/lab/test_routing.py`, whose statement is:

# %%
import ast
import inspect
from pathlib import Path

import dflash_fi

tests = Path(inspect.getfile(dflash_fi)).resolve().parent.parent / "tests" / "lab" / "test_routing.py"
tree = ast.parse(tests.read_text())
prop = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_property_step4"))
print(ast.get_source_segment(tests.read_text(), prop))


def target_routes(step):
    return [{k: v for k, v in r.items() if k != "metadata_causal"}
            for r in routing_report(step, trtllm=True)["batches"] if r["role"] == "target"]


same_as_stock = target_routes(4) == target_routes(0)
print("step 4 routes every standard target batch as stock does:", same_as_stock)

# %% [markdown]
# vLLM's attention-backend feature table has a "Non-Causal" column; generated from the live classes, it now
# has FlashInfer in it:

# %%
from dflash_fi.lab.selector import feature_table

print("stock vLLM 0.22.1:\n" + feature_table(0))
print("\nstep 4:\n" + feature_table(4))

# %% [markdown]
# ## On the GPU
#
# An H100 or H200 has no TRTLLM attention, so step 4 changes no kernel there: its output must equal step 3's.
# The FP8 KV cache (the RTX 4090's case) runs too; FP8 changes the target's own numbers, so its check is that
# drafting stays non-causal (tau above the midpoint of the reference's two predictions).

# %% tags=["gpu"]
live = session.run_live([step_label(3), step_label(4), FP8])

# %% tags=["nbval-ignore-output"]
records, reference, source = session.evidence([step_label(3), step_label(4), FP8])
print(source)
checks = session.check(records, reference, ("step 4",))

# %% [markdown]
# Every eager run of the whole walkthrough, against the reference decoder's two predictions (committed
# records; the walkthrough reruns them all with `dflash-fi walkthrough`):

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence.report import recorded_walkthrough
from dflash_fi.figures import tau_by_step
from dflash_fi.steps import STEPS

walkthrough, provenance = recorded_walkthrough()
print(provenance)
eager = ["FLASH_ATTN draft (reference)", *(step_label(s) for s in STEPS), FP8]
tau_by_step(walkthrough, next(iter(walkthrough.values()))["spec"]["extra"]["reference"], eager);

# %% [markdown]
# ### Check

# %%
draft_before, draft_after = (routing_report(s, trtllm=True)["batches"][0] for s in (3, 4))
assert draft_before["prefill"] == "TRTLLM prefill"
assert draft_after["prefill"] == "FlashInfer prefill (separate non-causal wrapper)" and draft_after["plan_causal"] is False
assert len(warnings) == 1 and same_as_stock
assert "| `FLASHINFER` | ✅ |" in feature_table(4) and "| `FLASHINFER` | ❌ |" in feature_table(0)
assert len(checks) == 2 and all(c.passed for c in checks), [c.line() for c in checks]
