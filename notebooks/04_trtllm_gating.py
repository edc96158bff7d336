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
# # 4 · TRTLLM gating
#
# On Blackwell, vLLM prefers TRTLLM-gen kernels for prefill and decode. They are causal only, so a non-causal
# batch must never reach them, while causal target batches keep them. The final hunk:

# %%
from dflash_fi.steps import hunk_diff

print(hunk_diff(4))

# %% [markdown]
# With TRTLLM available (forced, as on an SM 10.0 machine), step 3 still sends the draft to TRTLLM prefill;
# step 4 keeps it on the separate non-causal FlashInfer wrapper and says so once. Target batches are routed
# exactly as in stock vLLM.

# %%
from dflash_fi.routing import routing_report

reports = {step: routing_report(step, trtllm=True) for step in (0, 3, 4)}
for step, report in reports.items():
    draft = report["batches"][0]
    print(f"step {step}: draft via {draft['decode'] or draft['prefill']}, plan_causal={draft['plan_causal']}, "
          f"warnings={report['dflash_warnings']}")


def target_routes(report):
    return [{k: v for k, v in r.items() if k != "metadata_causal"} for r in report["batches"] if r["role"] == "target"]


# %% [markdown]
# vLLM's attention-backend feature table, "Non-Causal" column, generated from the live classes:

# %%
from dflash_fi.selector_matrix import feature_table

print("stock vLLM 0.22.1:\n" + feature_table(0))
print("\nstep 4:\n" + feature_table(4))

# %% [markdown]
# ## The whole evidence chain
#
# Every run of the walkthrough on the GPU, and its checks (each step against the previous one, against the
# FLASH_ATTN draft and against the reference decoder):

# %%
from dflash_fi.notebook import recorded_walkthrough, render_table
from dflash_fi.walkthrough import check_records

records, provenance = recorded_walkthrough()
print(provenance)
print(render_table(records))
checks = check_records(records, records["step 3 FLASHINFER draft"]["spec"]["extra"]["reference"])
for check in checks:
    print(check.line())

# %% tags=["gpu"]
from dflash_fi.notebook import live_run, outcome

print(outcome(live_run(step=4)))

# %% [markdown]
# ### Check

# %%
assert reports[3]["batches"][0]["prefill"] == "TRTLLM prefill"
assert reports[4]["batches"][0]["prefill"] == "FlashInfer prefill (separate non-causal wrapper)"
assert len(reports[4]["dflash_warnings"]) == 1
assert target_routes(reports[4]) == target_routes(reports[0])
assert "| `FLASHINFER` | ✅ |" in feature_table(4) and "| `FLASHINFER` | ❌ |" in feature_table(0)
assert all(c.passed for c in checks), [c.line() for c in checks if not c.passed]
