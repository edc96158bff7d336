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
# # 8 · What it costs: the FlashInfer draft against the FLASH_ATTN draft
#
# Notebooks 6 and 7 built steps 6 to 8. This one measures what the final FlashInfer draft costs against the FLASH_ATTN draft:
# whole engines (the targets this work set out to reach), the attention kernel, and the host time of a draft step's
# metadata build, before step 8 and after it. Every number is read from the evidence summary (`evidence/`), written by
# the commands that measured it on a GPU in one evidence pass; a cell whose section is not recorded yet says so.

# %% tags=["nbval-ignore-output"]
from dflash_fi.bench.profile import latest_profile
from dflash_fi.bench.results import latest_kernels
from dflash_fi.bench.turns import latest_turns
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, recorded, show, skip, verdict

session = setup("08_what_it_costs")
turns = recorded(latest_turns, "engines in turns (`dflash-fi bench e2e --record`)")
profile = recorded(latest_profile, "where builds spend host time (`dflash-fi profile --record`)")
kernels = recorded(latest_kernels, "the kernel benchmark (`dflash-fi bench kernels --record`)")
for read in (r for r in (turns and vars(turns), profile, kernels) if r):
    print(f"read {read['file']} ({read['gpu']}, commit {read['git_commit'][:10]})")

# %% [markdown]
# ## The targets
#
# `dflash-fi bench e2e` starts every engine at once, then hands out *turns*. Per model pair and batch size it runs
# *rounds* back to back; in each round every engine of the pair works in turn (A B C, then C B A), one at a time, on the
# vCPU that was fastest when the round began. Why so short, and why one vCPU: the GPU machine's vCPUs change speed by
# up to 2x within seconds (each turn records its vCPU's speed before and after), and a host-bound engine is as fast as
# the vCPU its main thread runs on. Long rounds would average that into every number; instead each comparison's two
# engines are neighbours in the turn order (the FLASH_ATTN draft between its twin and the final FlashInfer draft) and
# are paired round by round. Round 1 warms up; after the first round idle engines are stopped. Per measured round, the
# final FlashInfer draft's tokens/s at the median step (embedded pair: tokens per engine step over the median interval
# between steps, which leaves the host's stalls out) or step time (the Qwen3-4B shape: random weights, so only time
# means anything) over the FLASH_ATTN draft's; the estimate is their *median*, with a *95% interval* resampled over the
# rounds (the median, so that a round in which the host changed speed between two turns counts as one round, not by
# its size). A second FLASH_ATTN draft engine, the *A/A pair*, differs in nothing: its interval is how far noise
# reaches. A target is *met* when the whole interval lies on its side, *missed* when it lies on the other, and
# *unresolved* when it straddles the line.

# %%
from dflash_fi.bench.stats import Verdict
from dflash_fi.bench.turns import Metric, idle_cpu, stored_targets, targets_table, vcpu_summary

if turns:
    judged, cpu = stored_targets(), idle_cpu(turns)  # as the benchmark judged them when it ran
    show(targets_table(judged))
    counts = ", ".join(f"{sum(t.verdict is v for t in judged)} {v.value}" for v in Verdict if any(t.verdict is v
                                                                                                  for t in judged))
    noise = max((t.aa.high - t.aa.low for t in judged if t.aa and t.what is Metric.TOKENS), default=float("nan"))
    verdict(f"of {len(judged)} targets: {counts}. The A/A pair's tokens/s intervals are up to {noise:.3f} wide: the "
            f"noise floor. Idle engines took {cpu['free']:.2f} CPU s per round while they ran free, {cpu['stopped']:.2f} "
            f"s once stopped. {vcpu_summary(turns)}")
else:
    print("not recorded yet: no engine benchmark in the evidence summary")

# %% [markdown]
# ## The kernel
#
# The draft's attention alone, at DFlash shapes: 16 queries per request, contexts of 512 to 8,192 tokens, the engine
# benchmark's batches, 32/8 heads of 128 (the Qwen3-4B shape's), pages of 16 scattered through the cache; median time
# of one call over CUDA-graph replays. The final FlashInfer kernel (FlashInfer's fa2, step 5) against vLLM's
# FlashAttention, what the FLASH_ATTN draft runs (version 3 on SM 9.0), and step 6's CUDA-graph wrapper, which no
# draft block uses (notebook 6), against the plain one:

# %% tags=["nbval-ignore-output"]
from dflash_fi.bench.kernels import BATCHES
from dflash_fi.bench.results import kernel_pivot, kernel_ratios
from dflash_fi.figures import kernel_against_flash_attn

if kernels:
    kernel_against_flash_attn(kernels, BATCHES);
    pivot = kernel_pivot(kernels, "bf16", batches=BATCHES)
    slower = [p for p in pivot if p["final_over_flash_attn"] > 1]
    padded = max(p["graph_over_final"] or 0 for p in pivot)
    fa2 = kernel_ratios(kernels, "flashinfer-fa2", "flashinfer-fa3", "bf16", batches=BATCHES)
    ratios = {kv: kernel_ratios(kernels, "dflash-fi-final", "vllm-flash-attn", kv, batches=BATCHES)
              for kv in ("bf16", "fp8-e4m3")}
    verdict("the thick line is vLLM's FlashAttention: " + "; ".join(
        f"with {kv} KV the final FlashInfer kernel takes {min(r['ratio'] for r in rows):.2f}x to "
        f"{max(r['ratio'] for r in rows):.2f}x its time" for kv, rows in ratios.items() if rows)
        + f". bf16: vLLM's FlashAttention is faster at {len(slower)} of {len(pivot)} shapes; the graph wrapper's "
        f"padded grid costs up to {padded:.2f}x the plain one; FlashInfer's fa2 beats its fa3 at "
        f"{sum(r['ratio'] < 1 for r in fa2)} of {len(fa2)} shapes (why step 5 names it). Every shape's time: the "
        "appendix.")
else:
    print("not recorded yet: no kernel benchmark in the evidence summary")

# %% [markdown]
# ## A draft step's host time, before step 8 and after
#
# Each engine of the benchmark timed every attention metadata build (`builder.build()`) on the host: the model
# runner's, once per attention group each engine step, and the drafter's, once per draft. Per decoding step, median
# of the measured rounds, at the largest batch, for the embedded pair, beside the step's own time:

# %%
from dflash_fi.bench.e2e import flash_attn_draft, flashinfer_draft
from dflash_fi.bench.turns import build_table, builds_per_step
from dflash_fi.engine.identity import Pair, label
from dflash_fi.steps import FINAL_STEP

if turns:
    batch = max(turns.batches(Pair.EMBEDDED))
    runs = [flash_attn_draft(Pair.EMBEDDED), flashinfer_draft(Pair.EMBEDDED, FINAL_STEP - 1),
            flashinfer_draft(Pair.EMBEDDED)]
    show(build_table(turns, Pair.EMBEDDED, batch, runs))
    per = {run: builds_per_step(turns, run, batch) for run in runs}
    draft_ms = {run: sum(ms for key, (n, ms) in per[run].items() if key.role.value == "draft step") for run in runs}
    verdict(f"at batch {batch} the drafter's build takes " + ", ".join(
        f"{draft_ms[run]:.3f} ms per step for the {label(run)}" for run in runs) + ".")
    fa, final = runs[0], runs[-1]
else:
    print("not recorded yet: no engine benchmark in the evidence summary")

# %% [markdown]
# **Why there are that many builds per step.** The model runner groups attention layers by backend and builds once per
# group; DFlash's drafter builds once more, for its own block:

# %%
from dflash_fi.engine.records import Role

if turns:
    groups = {run: {key.backend: key.layers for key in per[run] if key.role is Role.TARGET} for run in (fa, final)}
    drafter = {run: next(key for key in per[run] if key.role is Role.DRAFT) for run in (fa, final)}
    shared = groups[fa]["FLASH_ATTN"] == groups[final]["FLASH_ATTN"] + drafter[final].layers
    verdict(f"per decoding step at batch {batch} the FLASH_ATTN draft's engine builds "
            f"{sum(n for n, _ in per[fa].values()):.2f} times, the final FlashInfer draft's "
            f"{sum(n for n, _ in per[final].values()):.2f}. The FLASH_ATTN draft's runner builds for "
            + ", ".join(f"{b} ({n} layers)" for b, n in groups[fa].items())
            + (f": its {drafter[fa].layers} draft layers share the target's group" if shared else "")
            + ". The FlashInfer draft's runner builds for " + ", ".join(f"{b} ({n} layers)" for b, n in
                                                                         groups[final].items())
            + f": its {drafter[final].layers} draft layers are a group of their own, built every step (step 7: "
            "without planning). Each drafter builds once more, for its block.")
else:
    print("not recorded yet: no engine benchmark in the evidence summary")

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures import draft_step_time

if turns:
    draft_step_time(turns, batch);
    verdict("each bar is a decoding step (median of rounds): the host's builds at the bottom, the rest (GPU work, "
            "the rest of the host's) above; the numbers on top are the step and its builds, in ms.")
else:
    print("not recorded yet: no engine benchmark in the evidence summary")

# %% [markdown]
# Where a draft build's host time goes: every engine's builds, profiled (`dflash-fi profile`, cProfile: it slows
# what it watches, so read where the time goes, not how much), the functions that took most of it, per build, with the
# file and line they are at:

# %%
from dflash_fi.bench.profile import anatomy, anatomy_rows, profile_batches, profile_runs

if profile:
    largest = max(profile_batches(profile))
    show(anatomy(profile, largest, top=4))
    planned = {r["run"]: r for r in anatomy_rows(profile, largest, top=None)
               if r["function"] == "plan" and r["file"].startswith("flashinfer/")}
    plans = {run: r["calls_per_build"] for run, r in planned.items()}
    verdict(f"at batch {largest}, per draft build, FlashInfer's plan() runs " + "; ".join(
        f"{plans.get(run, 0):.2f} times ({planned[run]['own_ms_per_build'] if run in planned else 0:.3f} ms of its "
        f"own, profiled) for the {label(run)}" for run in profile_runs()[1:]) + ".")
else:
    print("not recorded yet: no build profile in the evidence summary")

# %% [markdown]
# The same three builders alone, in the kernel benchmark: each draft step's build on the host, with the GPU idle and
# busy (a 5 ms kernel queued before each build, so that a build that waits for the GPU takes about that long), and
# issue #22's target, the final FlashInfer draft's build at most the FLASH_ATTN draft's plus 0.05 ms:

# %%
from dflash_fi.bench.builds import builder_names
from dflash_fi.bench.results import build_rows, build_summary

step7, final_build, fa_build = builder_names()
rows = kernels and recorded(lambda: build_rows(kernels, ("bf16",)), "host-build rows of the kernel benchmark")
if rows:
    show(build_summary(kernels, ("bf16",)))
    by = {(r["kernel"], r["batch"], r["context"]): r for r in rows}
    over = [by[final_build, b, c]["host_ms_busy"] - by[fa_build, b, c]["host_ms_busy"] for k, b, c in by if k == step7]
    verdict(f"bf16, GPU busy: the final FlashInfer draft's build is {min(over):+.3f} to {max(over):+.3f} ms from the "
            f"FLASH_ATTN draft's. Step 7's plans {sum(r['plans'] for r in rows if r['kernel'] == step7)} times in "
            f"{sum(r['builds'] for r in rows if r['kernel'] == step7)} builds, step 8's "
            f"{sum(r['plans'] for r in rows if r['kernel'] == final_build)} times after each shape's first build.")
elif not kernels:
    print("not recorded yet: no kernel benchmark in the evidence summary")

# %% [markdown]
# On this GPU, now: the same builders, bf16, two batches of one context (this cell's own timing, not a record):

# %% tags=["gpu", "nbval-ignore-output"]
from dflash_fi.bench.builds import measure_builds

if session.gpu_cell():
    live = {(r["kernel"], r["batch"]): r for r in measure_builds("auto", (1, 32), (2048,), print_fn=lambda line: None)}
    show(build_summary({"rows": list(live.values())}))
    verdict("with the GPU busy, the final FlashInfer draft's build takes " + ", ".join(
        f"{live[final_build, b]['host_ms_busy']:.3f} ms at batch {b}" for b in (1, 32)) + ", the FLASH_ATTN draft's "
        + ", ".join(f"{live[fa_build, b]['host_ms_busy']:.3f} ms" for b in (1, 32)) + ".")

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
from dflash_fi.bench.kernels import CONTEXTS

if kernels:
    check("the kernel pivot has every engine-benchmark batch at every context",
          {(p["batch"], p["context"]) for p in pivot} == {(b, c) for b in BATCHES for c in CONTEXTS}, kernels["file"])
if rows:
    before, after = ([r for r in rows if r["kernel"] == name] for name in (step7, final_build))
    check("step 7's draft builder planned every build, step 8's none after each shape's first, and took less host "
          "time at every shape, GPU busy", all(a["plans"] == a["builds"] and not b["plans"] and b["host_ms_busy"] <
                                               a["host_ms_busy"] for a, b in zip(before, after)), f"{len(after)} shapes")
if turns:
    check("every engine of the benchmark ran every round; the final draft builds for the runner's FLASH_ATTN and "
          "FLASHINFER groups and its drafter", all(e.ok for e in turns.engines.values())
          and len({len(e.rounds) for e in turns.engines.values()}) == 1 and {(k.role, k.backend) for k in per[final]}
          == {(Role.TARGET, "FLASH_ATTN"), (Role.TARGET, "FLASHINFER"), (Role.DRAFT, "FLASHINFER")})
if profile:
    _, planned_each, planned_once = profile_runs()
    # The profile runs the step before the final one and the final one: the final draft plans no more than the one
    # before it, and on SM 9.0 (step 9's XQA) none at all.
    check("the final draft's builds call plan() no more than the step before's, and none on XQA",
          plans.get(planned_once, 0) <= plans.get(planned_each, 0) and plans.get(planned_once, 0) == 0,
          f"batch {largest}: {plans.get(planned_each, 0):.2f} and {plans.get(planned_once, 0):.2f} per build")
for what, record in (("the kernel benchmark", kernels), ("its host-build rows", rows), ("engines in turns", turns),
                     ("the build profile", profile)):
    if not record:
        skip(f"the checks on {what}", "not recorded yet")

# %% [markdown]
# ## What you saw, and what's next

# %%
lines = []
if turns:
    lines.append(f"Targets: {counts} (of {len(judged)}), each judged by its 95% interval beside the A/A pair's.")
if kernels:
    lines.append(f"Kernel: vLLM's FlashAttention is faster than the final FlashInfer kernel at {len(slower)} of "
                 f"{len(pivot)} bf16 shapes; FlashInfer is the backend an RTX 4090 with an FP8 cache has.")
if rows:
    lines.append(f"Host: the final FlashInfer draft's build is {min(over):+.3f} to {max(over):+.3f} ms from the "
                 "FLASH_ATTN draft's, the GPU busy.")
print("\n".join(f"- {line}" for line in lines) or "Not recorded yet: the results this notebook reads come from "
      "`dflash-fi bench e2e --record`, `dflash-fi bench kernels --record` and `dflash-fi profile --record` on a GPU.")

# %% [markdown]
# Every table behind these lines, generated from the evidence summary, is in [`docs/RESULTS.md`](../docs/RESULTS.md). To measure
# again on a GPU: `dflash-fi bench e2e --record`, `dflash-fi bench kernels --record`, `dflash-fi profile --record`,
# then `dflash-fi notebooks --only 08`. That is the whole change; the README lists every command.
#
# ## Appendix

# %% tags=["appendix"]
from IPython.display import display

from dflash_fi.bench.results import kernel_summary
from dflash_fi.figures.listings import folded_markdown

for summary, table in (("Every kernel at every shape, 32/8 heads", kernels and kernel_summary(kernels)),
                       ("Host builds, every KV dtype", rows and build_summary(kernels)),
                       ("Host builds per decoding step, every engine and batch", turns and "\n\n".join(
                           build_table(turns, pair, b) for pair in turns.pairs() for b in turns.batches(pair))),
                       ("Where builds spend host time, every batch and builder", profile and "\n\n".join(
                           anatomy(profile, b, role) for b in profile_batches(profile)
                           for role in ("target step", "draft step")))):
    if table:
        display(folded_markdown(summary, table))
    else:
        print(f"{summary}: not recorded yet")
