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
# # 5 · Beyond the PR: CUDA graphs, the draft's kernel, and what it all costs
#
# PR #43081 made the FlashInfer draft correct. Two things were left, and this notebook takes both:
#
# - **CUDA graphs.** vLLM records a model's kernels once and replays them (a *CUDA graph*), which removes
#   the launch overhead that dominates small batches. It resolves one graph mode for the whole engine from
#   the weakest attention backend in it, *draft layers included*. vLLM #48167 (after the PR) found the claim
#   wrong on Blackwell; step 5 takes its fix. The claim is also what costs the engine its full graphs on every
#   GPU before Blackwell; step 6 fixes that, which upstream has not done.
# - **The draft's kernel.** The PR's non-causal wrapper lets FlashInfer pick (`auto`). For DFlash's
#   16-query blocks that is not the fastest choice on SM 9.0; step 5 picks by measurement.

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import setup, show
from dflash_fi.evidence import plan as P

session = setup("05_beyond_the_pr")

# %% [markdown]
# ## What each step claims about CUDA graphs, and what the engine resolves
#
# vLLM 0.22.1's model runner asks every attention backend's builder for `get_cudagraph_support(...)`, takes
# the weakest, and hands it to `CompilationConfig.resolve_cudagraph_mode_and_sizes`. Both run here, on the CPU
# under pretended GPUs, for an engine with a FLASH_ATTN target and a FLASHINFER draft; the last column is
# vLLM's own warning:

# %%
from dflash_fi.lab.graphs import cudagraph_claims, format_claims
from dflash_fi.vocabulary import BLACKWELL, HOPPER

claims = [cudagraph_claims(step, capability, trtllm) for step in (4, 5, 6)
          for capability, trtllm in ((HOPPER, False), (BLACKWELL, True))]
show(format_claims(claims))
for c in claims:
    for warning in c["vllm_warnings"]:
        print(f"step {c['step']}, SM {c['capability']}: vLLM says: {warning}")

# %% [markdown]
# ### Step 5: #48167, and the draft's kernel
#
# Without TRTLLM (SM 9.0), FlashInfer claims `UNIFORM_SINGLE_TOKEN_DECODE`: a uniform batch of 16-token
# requests runs on the prefill wrapper, which a captured graph cannot replay after a new `plan()`. With
# TRTLLM (Blackwell), step 4 claims `UNIFORM_BATCH`, even when asked with the draft's own config
# (`use_non_causal=True`), though a non-causal batch never runs on TRTLLM. Upstream's fix, #48167, makes the
# claim honest for non-causal attention. (In vLLM 0.22.1 the runner asks with the target's config and the
# drafter captures piecewise graphs only, so the wrong claim never bites here; it does in later vLLM, whose
# drafters honour their own backend's claim.) Step 5 also sets the draft's kernel to FA2:

# %%
from dflash_fi.steps import hunk_diff

print(hunk_diff(5))

# %% [markdown]
# ### Step 6: CUDA-graph prefill wrappers
#
# FlashInfer's prefill wrapper has a CUDA-graph mode: a fixed batch size and persistent index buffers that
# `plan()` fills and a captured `run()` reads. The same builder's decode path already keeps one such wrapper
# per captured batch size. Step 6 does the same for prefill, for every batch a full graph can hold, of either
# causality. FlashInfer can then honestly claim `UNIFORM_BATCH`, and the engine keeps `FULL_AND_PIECEWISE`
# (the table above).

# %%
print(hunk_diff(6))

# %% [markdown]
# What the builder does with graphs enabled: uniform batches get the CUDA-graph wrapper of their batch size
# (the DFlash draft on FA2, planned non-causal; the target's spec-verify batch causal); prompts and mixed
# batches, which no full graph holds, keep the shared wrappers:

# %%
from dflash_fi.lab.routing import routing_table

show(routing_table(steps=(5, 6), cuda_graphs=True))

# %% [markdown]
# #46638 (open upstream) adds a non-causal *decode* path for DFlash drafts on SM 100 through FlashInfer's
# CuteDSL decode wrapper; it needs FlashInfer 0.6.15 or later, which vLLM 0.22.1 does not pin, so it is not
# shown here.
#
# ## On the GPU: graphs, live
#
# Four engines with vLLM's default compilation: no speculation, the FLASH_ATTN draft, step 4's FlashInfer
# draft and step 6's. Each record says which graph mode the engine resolved.

# %% tags=["gpu"]
live = session.run_live([P.NO_SPEC_GRAPHS, P.FLASH_ATTN_GRAPHS, P.STEP4_GRAPHS, P.FINAL_GRAPHS])

# %% tags=["nbval-ignore-output"]
graph_labels = [P.NO_SPEC_GRAPHS, P.FLASH_ATTN_GRAPHS, P.STEP4_GRAPHS, P.FINAL_GRAPHS]
records, reference, source = session.evidence(graph_labels)
print(source)
for label in graph_labels:
    print(f"  {label:<40} cudagraph_mode {records.get(label, {}).get('cudagraph_mode')}")
graph_checks = session.check(records, reference, ("CUDA graphs", "step 6, CUDA graphs:"))

# %% [markdown]
# Steps 5 and 6 without graphs change nothing a reader can see but the kernel: same output as step 4, tau
# within 1% (the committed walkthrough; `dflash-fi walkthrough` reruns it):

# %% tags=["nbval-ignore-output"]
eager, eager_reference, eager_source = session.evidence([P.step_label(4), P.step_label(5), P.step_label(6)])
print(eager_source)
eager_checks = session.check(eager, eager_reference, ("step 5", "step 6: without graphs"))

# %% [markdown]
# ## What it costs: the benchmarks
#
# Both benchmarks ran on the GPU machine and wrote results files under `runs/` (`dflash-fi bench kernels
# --record`, `dflash-fi bench e2e --record`); everything below is read from them.
#
# ### The draft's kernel
#
# Non-causal paged attention at DFlash shapes: 16 queries per request, contexts of 512 to 8,192 tokens,
# batches of 1 to 64, 32/8 heads of 128, bf16 KV. Median time per call over CUDA-graph replays.

# %% tags=["nbval-ignore-output"]
from dflash_fi.bench.results import kernel_summary, latest_results
from dflash_fi.figures import kernel_times

kernels = latest_results("kernels")
print(f"{kernels['gpu']} (SM {kernels['compute_capability']}), commit {kernels['git_commit']}, "
      f"copy bandwidth {kernels['copy_GBps']:.0f} GB/s")
show(kernel_summary(kernels))
kernel_times(kernels);

# %% [markdown]
# ### Whole engines
#
# The embedded pair, 256 new tokens per prompt, batches of 1, 8 and 32, best of three after a warm-up; eager
# and with vLLM's default compilation and graphs. Each results file says how many engines shared the host
# while it ran (`engines_at_once`); where a later file measured the same engine again, its rows replace the
# earlier ones:

# %% tags=["nbval-ignore-output"]
from dflash_fi.bench.results import e2e_summary
from dflash_fi.figures import e2e_throughput

e2e = latest_results("e2e")
for part in e2e["parts"]:
    print(f"{part['file']}: {part['rows']} rows, commit {part['git_commit'][:10]}, "
          f"engines at once: {part['engines_at_once'] or 'two (recorded before the field existed)'}")
show(e2e_summary(e2e, model="embedded"))
e2e_throughput(e2e);

# %% [markdown]
# How far to trust the engine numbers: the embedded pair is tiny, so these engines are bound by the CPU and by
# kernel launches, not by the GPU. The eager rows come from a run with two engines on one host at once, each
# perturbing the other (steps 5 and 6 without graphs take exactly the same path, yet differ); the graphs rows
# from a later run with one engine on the host at a time. The results files keep every repeat. The graph
# mode each engine resolved, its tau and its agreement with no speculation are not timings, and hold regardless.
#
# ### Where the FlashInfer draft's time goes
#
# Every engine also timed, on the host, each attention metadata build (`builder.build()`) during the timed
# generates: the model runner's, once per attention group per target step, and the drafter's, once per
# draft. Per decoding step, beside the step time itself and what one FlashInfer `plan()` of the draft's
# shape costs on its own (from the kernel benchmark):

# %% tags=["nbval-ignore-output"]
from dflash_fi.bench.results import build_breakdown, draft_overhead

show(draft_overhead(kernels, e2e))
show(build_breakdown(e2e, batch=1))

# %% [markdown]
# The FlashInfer draft pays for two FlashInfer builds per step where the FLASH_ATTN draft pays for almost
# none: the drafter's own (FLASH_ATTN's drafter build skips all scheduling, `fast_build=True`), and the model
# runner's for the draft layers' attention group, which it builds on every *target* step although no
# target-step layer reads it (vLLM 0.22.1's runner builds metadata for every attention group in the KV-cache
# group; with a FLASH_ATTN draft the draft layers share the target's group and its one build). `plan()`
# itself is a small part of a FlashInfer build; the rest is the builder's own host work.
#
# ### The Qwen3-4B shape
#
# A 36-layer Qwen3-4B-shaped target and a 5-layer DFlash drafter, random weights: every draft is rejected
# (tau 1), so only the time per decoding step means anything. With 36 target layers, what the graph mode
# costs shows plainly (step 4 runs the target piecewise):

# %% tags=["nbval-ignore-output"]
from dflash_fi.bench.e2e import SHAPE_MODEL

show(e2e_summary(e2e, model=SHAPE_MODEL))
show(build_breakdown(e2e, batch=1, model=SHAPE_MODEL))

# %% [markdown]
# Here the step-6 drafter's builds take about 2.9 ms a step against step 4's 0.6 ms, though both run the same
# builder code on the same batches. Two more engines ran with their builds under cProfile
# (`DFLASH_FI_PROFILE_BUILDS=1`, which slows every build, so their timings live in files of their own,
# `runs/*.build-profile-*.json`, and the README's "Where the FlashInfer draft's time goes" lists their
# costliest functions; the check below reads them).

# %% [markdown]
# The time is in `Tensor.to`, called by the builder itself, not inside `plan()`. FlashInfer's builder reads `common_attn_metadata.seq_lens_cpu`, and the draft
# metadata DFlash builds carries no host copy of the sequence lengths (`_seq_lens_cpu=None`), so vLLM copies
# them from the GPU, a copy that waits for all queued GPU work (vLLM's own deprecation warning on
# `seq_lens_cpu` says so). With full graphs the whole 36-layer target is one graph launch and the host runs
# ahead, so the copy waits for the target's forward, and the drafter's remaining host work no longer overlaps
# the GPU. Under step 4's piecewise graphs the host is behind anyway and the same copy costs little. The
# FLASH_ATTN draft reads sequence lengths on the GPU and copies nothing. Planning FlashInfer from host-side
# bounds instead is what upstream's open vLLM #57352 does; it is the next step, not taken here.

# %% [markdown]
# ### The targets
#
# Issue #10's targets, from the same files:

# %% tags=["nbval-ignore-output"]
from dflash_fi.bench.results import targets_table

show(targets_table(kernels, e2e))

# %% [markdown]
# ### Check

# %%
by_step = {(c["step"], c["capability"]): c for c in claims}
assert by_step[4, "9.0"]["resolved_mode"] == "PIECEWISE" and by_step[6, "9.0"]["resolved_mode"] == "FULL_AND_PIECEWISE"
assert by_step[4, "10.0"]["flashinfer_claim_draft_config"] == "UNIFORM_BATCH"
assert by_step[5, "10.0"]["flashinfer_claim_draft_config"] == "UNIFORM_SINGLE_TOKEN_DECODE"
assert len(graph_checks) == 4 and all(c.passed for c in graph_checks), [c.line() for c in graph_checks]
assert len(eager_checks) == 2 and all(c.passed for c in eager_checks), [c.line() for c in eager_checks]

# The metadata builds explain most of the FlashInfer draft's gap at batch 1 and 32 (graphs, embedded pair).
from dflash_fi.bench.results import e2e_row
for batch in (1, 32):
    fa = e2e_row(e2e["rows"], "embedded", "FLASH_ATTN draft", batch, True)
    fi = e2e_row(e2e["rows"], "embedded", "step 6 FLASHINFER draft", batch, True)
    extra_builds = sum(fi["metadata_build_ms_per_step"].values()) - sum(fa["metadata_build_ms_per_step"].values())
    assert extra_builds > 0.5 * (fi["step_ms"] - fa["step_ms"]) > 0, (batch, extra_builds, fi["step_ms"], fa["step_ms"])

# At the Qwen3-4B shape, the step-6 drafter's profiled builds spend most of their own time in Tensor.to.
from dflash_fi.bench.results import build_profiles
step6_profile = [line for line in build_profiles(top=1).splitlines() if "step6" in line]
assert len(step6_profile) == 1 and "method 'to'" in step6_profile[0], step6_profile
