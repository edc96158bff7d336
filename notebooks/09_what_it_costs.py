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
# # 9 · What it costs: steps 8 and 9 against the FLASH_ATTN draft
#
# Against the FLASH_ATTN draft, a FlashInfer draft changes two parts of a decoding step: the host's metadata builds
# (notebook 8) and the draft's attention kernel. This notebook measures both, adds them up against the whole step,
# and says what is left. Every number comes from the evidence summary (`evidence/`), written on a GPU by the engine
# benchmark, the kernel benchmark and the build profile; how they measure is in the appendix.

# %% tags=["nbval-ignore-output"]
from dflash_fi.bench.profile import latest_profile
from dflash_fi.bench.results import latest_kernels
from dflash_fi.bench.turns import latest_turns
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, recorded, show, skip, verdict

session = setup("09_what_it_costs")
turns = recorded(latest_turns, "engines in turns (`dflash-fi bench e2e --record`)")
profile = recorded(latest_profile, "where builds spend host time (`dflash-fi profile --record`)")
kernels = recorded(latest_kernels, "the kernel benchmark (`dflash-fi bench kernels --record`)")

# %% [markdown]
# ## The targets
#
# The engine benchmark runs whole engines with vLLM's CUDA graphs in turns and compares, round by round, the final
# FlashInfer draft (step 9) with the FLASH_ATTN draft: a median with a bootstrap interval, beside an A/A pair of two
# FLASH_ATTN engines that shows how far noise reaches. Step 9's targets (issue 32), judged on the recorded estimates:

# %%
from dflash_fi.bench.stats import Verdict
from dflash_fi.bench.turns import BUILD_TARGET_MS, STEP_GAP_TARGET, TOKENS_TARGET, Metric, stored_targets

TARGET = {Metric.TOKENS: (TOKENS_TARGET, "{:.3f}x", f"at least {TOKENS_TARGET.threshold:.2f}x, low end "
                                                    f"{TOKENS_TARGET.floor:.2f}x"),
          Metric.STEP_TIME: (STEP_GAP_TARGET, "{:+.1%}", f"at most {STEP_GAP_TARGET.threshold:+.0%}"),
          Metric.HOST_BUILD: (BUILD_TARGET_MS, "{:+.3f} ms", f"at most {BUILD_TARGET_MS.threshold:+.2f} ms, high end "
                                                          f"{BUILD_TARGET_MS.ceiling:+.2f} ms")}


def interval(e, what, f=None) -> str:
    return "-" if e is None else (f := TARGET[what][1]).format(e.value) + f" [{f.format(e.low)}, {f.format(e.high)}]"


if turns:
    judged = {t: TARGET[t.what][0].judge(t.estimate) for t in stored_targets()}
    show("| pair, batch | final draft over FLASH_ATTN draft [95%] | A/A pair [95%] | target | verdict |\n|---|---|---|---|"
         "---|\n" + "\n".join(f"| {t.pair.value}, {t.batch} | {t.what.value} {interval(t.estimate, t.what)} | "
                               f"{interval(t.aa, t.what)} | {TARGET[t.what][2]} | **{v.value}** |" for t, v in judged.items()))
    count = {v: [t for t, w in judged.items() if w is v] for v in Verdict}
    noise = max((t.aa.high - t.aa.low for t in judged if t.aa and t.what is Metric.TOKENS), default=float("nan"))
    verdict(f"{len(count[Verdict.MET])} met, {len(count[Verdict.MISSED])} missed, {len(count[Verdict.UNRESOLVED])} "
            f"unresolved of {len(judged)}. The A/A pair's tokens/s intervals are up to {noise:.3f} wide: an interval "
            "straddling 1.00 is noise as much as loss. Below, each gap by its causes: the step's parts, then the "
            "builds builder by builder and function by function.")
else:
    print("not recorded yet: no engine benchmark in the evidence summary")

# %% [markdown]
# ## A decoding step, accounted for
#
# Per decoding step (median of the measured rounds): each FlashInfer draft's step time minus the FLASH_ATTN draft's,
# split into the host's metadata builds (all builders) and the draft's attention kernels (the kernel benchmark's
# per-call difference, one call timed over CUDA-graph replays at the drafter's heads and the shortest context, times
# its attention layers and forwards per step). The rest nothing here measures; the A/A pair shows noise alone:

# %%
import statistics
from dflash_fi.bench.e2e import NEW_TOKENS, flash_attn_draft, flashinfer_draft
from dflash_fi.bench.kernels import BATCHES, CONTEXTS
from dflash_fi.bench.results import final_draft_kernel, kernel_pivot, kernel_rows
from dflash_fi.bench.turns import builds_per_step
from dflash_fi.engine.identity import Pair, label
from dflash_fi.engine.records import Role
from dflash_fi.steps import FINAL_STEP

# What each draft runs (bf16): step 8 FlashInfer's fa2 as its builder plans it; step 9 XQA on SM 9.0, else fa2.
KERNEL = {FINAL_STEP - 1: "dflash-fi-final",
          FINAL_STEP: "flashinfer-xqa" if turns and turns.compute_capability.startswith("9") else "dflash-fi-final"}
per_call = {(r["kernel"], r["num_qo_heads"], r["num_kv_heads"], r["batch"]): r["median_ms"] for r in
            (kernel_rows(kernels) if kernels else []) if r["kv_dtype"] == "bf16" and "median_ms" in r
            and r["context"] == min(CONTEXTS)}
pivot = kernel_pivot(kernels, "bf16", batches=BATCHES) if kernels else []  # the final draft's kernel, every shape
slower = [p for p in pivot if p["final_over_flash_attn"] > 1]


def account(pair, batch, step):
    fa, fi, aa = flash_attn_draft(pair), flashinfer_draft(pair, step), flash_attn_draft(pair, replica=1)
    step_ms = {run: statistics.median(b.step_ms for b in turns.measured(run, batch).values()) for run in (fa, fi, aa)}
    per = {run: builds_per_step(turns, run, batch) for run in (fa, fi)}
    drafter = next(key for key in per[fi] if key.role is Role.DRAFT)
    heads = (32, 8) if pair is Pair.QWEN3_4B_SHAPE else next(((k[1], k[2]) for k in per_call if k[1:3] != (32, 8)), None)
    times = [per_call.get((name, *heads, batch)) for name in (KERNEL[step], "vllm-flash-attn")] if heads else [None]
    calls = drafter.layers * per[fi][drafter][0]  # attention layers x drafter forwards, per decoding step
    r = dict(pair=pair, batch=batch, run=fi, step=step_ms[fi], fa_step=step_ms[fa], gap=step_ms[fi] - step_ms[fa],
             builds=sum(t for _, t in per[fi].values()) - sum(t for _, t in per[fa].values()), calls=calls,
             kernel=None if None in times else (times[0] - times[1]) * calls, aa=step_ms[aa] - step_ms[fa])
    return {**r, "rest": r["gap"] - r["builds"] - (r["kernel"] or 0)}


def ms(v) -> str:
    return "not measured" if v is None else f"{v:+.3f}"  # a term no benchmark row gives


if turns:
    rows = [account(pair, b, s) for pair in turns.pairs() for b in turns.batches(pair) for s in KERNEL]
    show("| pair, batch | draft (its kernel) | step ms (FLASH_ATTN draft's) | difference | builds | draft attention "
         "kernels | unexplained | A/A pair |\n|---|---|---|---|---|---|---|---|\n" + "\n".join(
             f"| {r['pair'].value}, {r['batch']} | step {r['run'].step} ({KERNEL[r['run'].step]}) | {r['step']:.3f} "
             f"({r['fa_step']:.3f}) | {r['gap']:+.3f} | {r['builds']:+.3f} | {ms(r['kernel'])} | **{r['rest']:+.3f}** | "
             f"{r['aa']:+.3f} |" for r in rows))
    acc8, acc9 = (next(r for r in rows if r["pair"] is Pair.EMBEDDED and r["run"].step == s
                       and r["batch"] == max(turns.batches(Pair.EMBEDDED))) for s in KERNEL)
    noise = max(abs(r["aa"]) for r in rows)
    within = [r for r in rows if abs(r["rest"]) <= noise]
    verdict(f"at embedded batch {acc9['batch']} (FLASH_ATTN draft: {acc9['fa_step']:.3f} ms a step) step 8's step "
            f"differs by {acc8['gap']:+.3f} ms: builds {acc8['builds']:+.3f}, kernels {ms(acc8['kernel'])} "
            f"({acc8['calls']:.0f} calls a step), unexplained {acc8['rest']:+.3f}; step 9's by {acc9['gap']:+.3f}: "
            f"builds {acc9['builds']:+.3f}, kernels {ms(acc9['kernel'])}, unexplained {acc9['rest']:+.3f}"
            + (" (its XQA kernel inside it: the kernel benchmark has no XQA row at these heads)" if acc9["kernel"] is None
               else "") + f". Two FLASH_ATTN engines that differ in nothing differ by up to {noise:.3f} ms a step, and "
            f"{len(within)} of {len(rows)} unexplained gaps are no larger: noise. A larger one is what nothing here times: the draft "
            "attention's own call on the host (FlashInfer's `run()` or XQA's Python against FlashAttention's), the "
            f"kernel at the engine's contexts (prompts plus up to {NEW_TOKENS} tokens; the shortest measured is "
            f"{min(CONTEXTS)}), or the host changing speed between turns. Per call, "
            f"{final_draft_kernel(kernels, 'bf16') if kernels else 'the final kernel'} is slower than FlashAttention at "
            f"{len(slower)} of {len(pivot)} bf16 shapes of 32/8 heads (appendix).")
else:
    print("not recorded yet: no engine benchmark in the evidence summary")

# %% [markdown]
# ## The builds, builder by builder
#
# The model runner groups attention layers by backend and builds once per group each step; DFlash's drafter builds
# once more for its block. At the largest embedded batch, the final draft against the FLASH_ATTN draft:

# %%
from dflash_fi.bench.turns import build_table

if turns:
    batch = max(turns.batches(Pair.EMBEDDED))
    fa, final = runs = [flash_attn_draft(Pair.EMBEDDED), flashinfer_draft(Pair.EMBEDDED)]
    show(build_table(turns, Pair.EMBEDDED, batch, runs))
    per = {run: builds_per_step(turns, run, batch) for run in runs}
    by = {run: {k.backend if k.role is Role.TARGET else "drafter": (k.layers, t) for k, (_, t) in per[run].items()}
          for run in runs}  # builder -> (layers, ms per step): the runner's groups by backend, and the drafter's
    diff = {k: by[final].get(k, (0, 0))[1] - by[fa].get(k, (0, 0))[1] for k in dict.fromkeys([*by[final], *by[fa]])}
    verdict(f"from these rows the final draft's builds take {sum(diff.values()):+.3f} ms a step more: " + ", ".join(
        f"{'the drafter' if k == 'drafter' else 'the runner' + chr(39) + 's ' + k + ' group'} {d:+.3f}"
        for k, d in diff.items()) + ". The FlashInfer draft's layers are a runner group of their own, built every "
        "step though only the drafter reads them (step 7 makes that build return at once); with the FLASH_ATTN draft "
        f"they share the target's group ({by[fa]['FLASH_ATTN'][0]} layers).")
else:
    print("not recorded yet: no engine benchmark in the evidence summary")

# %% [markdown]
# Where a draft build spends its host time, from the build profile (cProfile over every build: it slows what it
# watches, so read shares, not milliseconds; the profiler's own `disable` is left out):

# %%
from dflash_fi.bench.profile import anatomy_rows, profile_batches, profile_runs


def profiled(batch, role="draft step"):
    return [r for r in anatomy_rows(profile, batch, role, top=None) if "_lsprof" not in r["function"]]


def anatomy_table(rows, runs=profile_runs(), top=3) -> str:
    return "| run | function (file:line) | calls per build | own ms per build, profiled |\n|---|---|---|---|\n" + "\n".join(
        f"| {label(r['run'])} | `{r['function']}` ({r['file']}:{r['line']}) | {r['calls_per_build']:.1f} | "
        f"{r['own_ms_per_build']:.4f} |" for run in runs for r in [r for r in rows if r["run"] == run][:top])


if profile:
    largest, (fa_run, step8_run, final_run) = max(profile_batches(profile)), profile_runs()
    found = profiled(largest)
    show(anatomy_table(found, (fa_run, final_run)))  # step 8's: the appendix
    own = {run: sum(r["own_ms_per_build"] for r in found if r["run"] == run) for run in profile_runs()}
    plans = {run: sum(r["calls_per_build"] for r in found if r["run"] == run and r["function"] == "plan"
                      and r["file"].startswith("flashinfer/")) for run in profile_runs()}
    top = [r for r in found if r["run"] == final_run][:3]
    verdict(f"at batch {largest} a draft build's own time, profiled, is " + ", ".join(
        f"{own[run]:.3f} ms ({f'step {run.step}' if run.step else 'FLASH_ATTN'})" for run in own)
        + f". Step {final_run.step}'s goes to " + ", ".join(
            f"`{r['function']}` {r['own_ms_per_build'] / own[final_run]:.0%}" for r in top)
        + f", with no plan() ({plans[final_run]:.2f} a build): Python that checks the batch is uniform blocks (one "
        "element of a CPU tensor read) and fills the metadata with views of vLLM's tensors. That is the drafter's "
        "part of the host-build gap; the runner's extra group is the rest.")
else:
    print("not recorded yet: no build profile in the evidence summary")

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
from dflash_fi.bench.builds import builder_names
from dflash_fi.bench.results import build_rows

step7, final_build, fa_build = builder_names()
builds = kernels and recorded(lambda: build_rows(kernels, ("bf16",)), "host-build rows of the kernel benchmark")
if kernels:
    check("the kernel benchmark has the final kernel and FlashAttention at every engine-benchmark batch and context",
          {(p["batch"], p["context"]) for p in pivot} == {(b, c) for b in BATCHES for c in CONTEXTS}, kernels["file"])
if builds:
    before, after = ([r for r in builds if r["kernel"] == name] for name in (step7, final_build))
    check("in the kernel benchmark step 7's draft builder planned every build, the final one none after each shape's "
          "first, and took less host time at every shape, GPU busy", all(
              a["plans"] == a["builds"] and not b["plans"] and b["host_ms_busy"] < a["host_ms_busy"]
              for a, b in zip(before, after)))
if turns:
    check("every engine of the benchmark ran every round; the final draft builds for the runner's FLASH_ATTN and "
          "FLASHINFER groups and its drafter", all(e.ok for e in turns.engines.values())
          and len({len(e.rounds) for e in turns.engines.values()}) == 1 and {(k.role, k.backend) for k in per[final]}
          == {(Role.TARGET, "FLASH_ATTN"), (Role.TARGET, "FLASHINFER"), (Role.DRAFT, "FLASHINFER")})
    check("the accounting has every pair and batch, and step 8's kernel term at each (the kernel benchmark has its "
          "shapes)", len(rows) == 2 * sum(len(turns.batches(p)) for p in turns.pairs())
          and all(r["kernel"] is not None for r in rows if r["run"].step == FINAL_STEP - 1))
if profile:
    check("the final draft's builds call plan() no more than the step before's, and none on XQA",
          plans[final_run] <= plans[step8_run] and plans[final_run] == 0,
          f"batch {largest}: {plans[step8_run]:.2f} and {plans[final_run]:.2f} per build")
for what, record in (("the kernel benchmark", kernels), ("its host-build rows", builds), ("engines in turns", turns),
                     ("the build profile", profile)):
    if not record:
        skip(f"the checks on {what}", "not recorded yet")

# %% [markdown]
# ## What you saw, and what's next
#
# Two drafts' decoding steps differ by their builds, their kernels and what no benchmark times; the builds table and
# the profile place a build's gap builder by builder and line by line. Every table: [`docs/RESULTS.md`](../docs/RESULTS.md);
# again on a GPU: `dflash-fi bench e2e --record`, `dflash-fi bench kernels --record`, `dflash-fi profile --record`,
# `dflash-fi notebooks --only 09`. Next, notebook 10: today's vLLM, place by place.

# %% [markdown]
# ## Appendix

# %% [markdown]
# On this GPU, now: the draft builders alone, bf16, the GPU busy (this cell's own timing, not a record):

# %% tags=["gpu", "nbval-ignore-output", "appendix"]
from dflash_fi.bench.builds import builder_names, measure_builds
from dflash_fi.bench.results import build_summary

if session.gpu_cell():
    step7, final_build, fa_build = builder_names()
    live = {(r["kernel"], r["batch"]): r for r in measure_builds("auto", (1, 32), (2048,), print_fn=lambda line: None)}
    show(build_summary({"rows": list(live.values())}))
    verdict("with the GPU busy, the final FlashInfer draft's build takes " + ", ".join(
        f"{live[final_build, b]['host_ms_busy']:.3f} ms at batch {b}" for b in (1, 32)) + ", the FLASH_ATTN draft's "
        + ", ".join(f"{live[fa_build, b]['host_ms_busy']:.3f} ms" for b in (1, 32)) + ".")

# %% tags=["appendix", "nbval-ignore-output"]
from IPython.display import display
from dflash_fi.bench.results import build_summary, kernel_summary
from dflash_fi.bench.turns import turns_table, vcpu_summary
from dflash_fi.figures.listings import folded_markdown

tables = {
    "Every kernel at every shape (batch x context in each row), 32/8 heads": kernels and kernel_summary(kernels),
    "Host builds in the kernel benchmark, every KV dtype (batch x context in each row)": builds and build_summary(kernels),
    "Host builds per decoding step, every engine, by pair and batch": turns and "\n\n".join(
        f"**{pair.value}, batch {b}**\n\n" + build_table(turns, pair, b) for pair in turns.pairs()
        for b in turns.batches(pair)),
    "Each engine's tokens/s or step time, by pair and batch": turns and "\n\n".join(
        f"**{pair.value}**\n\n" + turns_table(turns, pair) for pair in turns.pairs()),
    "Where builds spend host time, by batch and builder": profile and "\n\n".join(
        f"**batch {b}, {role}s**\n\n" + anatomy_table(profiled(b, role), top=6) for b in profile_batches(profile)
        for role in ("target step", "draft step")),
}
for summary, table in tables.items():
    if table:
        display(folded_markdown(summary, table))
    else:
        print(f"{summary}: not recorded yet")

# %% tags=["appendix", "nbval-ignore-output"]
import dflash_fi.summary as S
from dflash_fi.bench.e2e import BATCH1_PROMPTS, ROUNDS, SHAPE_BATCH1_PROMPTS, SHAPE_NEW_TOKENS
from dflash_fi.bench.turns import idle_cpu
from dflash_fi.evidence.live import LIVE_NEW_TOKENS, LIVE_PROMPTS
from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_TARGET, load_prompts
from dflash_fi.reference.evaluate import evaluate_pair

# The one odd prompt: the first held-out prompt alone against the next three (the reference decoder, on this machine).
first, others = (evaluate_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=4)[i:j], 64) for i, j in ((0, 1), (1, 4)))
margin = recorded(lambda: S.read().walkthrough()[2], "the walkthrough's near-tie margin")
cpu = idle_cpu(turns) if turns else None
method = f"""
**Where the notebooks' numbers come from.**

| where | prompts x new tokens | what runs |
|---|---|---|
| notebook 0's reference decoder | 6 x 64 | pure PyTorch, fp32 (CPU; on a GPU there too) |
| live cells of notebooks 1-8 | {LIVE_PROMPTS} x {LIVE_NEW_TOKENS} | small vLLM engines, and the reference decoder on the same prompts |
| the walkthrough (`dflash-fi walkthrough`; check cells without a GPU) | 32 x 128, and the mixed workload | every step's engine |
| the engine benchmark | batch 1: one prompt alone, the first {BATCH1_PROMPTS} by turns; 8 and 32 together; x {NEW_TOKENS} | engines in turns; the Qwen3-4B shape {SHAPE_BATCH1_PROMPTS} prompt at batch 1, x {SHAPE_NEW_TOKENS} |

**tau differs between prompt sets and between engines of one configuration.** Held-out files differ in how
predictable they are; a bf16 near-tie in the draft flips with an engine's memory settings. The text stays the same,
so what moves is the number of verification steps; the checks allow 1% on the same text.

**Outputs can part from plain decoding, and be right.** Verification runs the target's prefill kernels on 16-token
blocks, plain decoding its decode kernels; two backends sum in different orders, and where the target's two best
candidates are nearly tied the choice can flip. A check therefore asks the baseline's top-2 gap at the first parting
to be within a *near-tie margin*, measured from the walkthrough's own pairs of correct engines"""
if margin and margin.get("margin") is not None:
    method += (f": they parted {margin['partings']} times, at gaps up to {margin['largest_gap']:.3f} nats "
               f"({margin['partings_at_confident_tokens']} at a confident token), so the margin is "
               f"{margin['margin']:.3f} nats ({margin['rule']})")
method += f""".

**One prompt is not like the others.** The first held-out prompt sits in the boilerplate of a codec module, which
the drafter predicts almost perfectly: alone, its tau is {first['tau_noncausal']:.2f}, against
{others['tau_noncausal']:.2f} for the next three ({first['tau_noncausal'] / others['tau_noncausal']:.1f}x). So the
benchmark's batch 1 takes the median of several prompts decoded alone.

**The engine benchmark.** Every engine starts at once; per pair and batch it runs {ROUNDS} rounds (the first warms
up), in each of which every engine works in turn (A B C, then C B A), one at a time, on the vCPU that was fastest
when the round began: the GPU machine's vCPUs change speed within seconds, and a host-bound engine is as fast as its
vCPU. The two engines of each comparison are neighbours in the turn order and are paired round by round: the
estimate is the median of the per-round ratios (or differences), its 95% interval bootstrapped over the rounds; a
second FLASH_ATTN draft engine, the A/A pair, shows the noise. Tokens/s is taken at the median step (tokens per step
over the median interval between steps), which leaves the host's stalls out. A target is met when its estimate and
interval lie on its side, missed when the interval lies on the other, unresolved otherwise."""
if cpu:
    method += (f" Idle engines took {cpu['free']:.2f} CPU s per round while they ran free, {cpu['stopped']:.2f} s "
               f"once stopped. {vcpu_summary(turns)}")
display(folded_markdown("How these numbers are measured", method))
