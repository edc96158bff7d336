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
# # 06 · What a backend claims about CUDA graphs, and what the runner resolves: steps 5 and 6
#
# A **CUDA graph** records a forward's GPU kernels once (*capture*) and *replays* them: the host launches nothing, and
# each kernel reads the addresses it read at capture (a `plan()` written elsewhere is never seen). vLLM captures
# **FULL** graphs (the whole forward, attention included) and **PIECEWISE** graphs (all but attention, which runs
# eagerly between the pieces); its default, `FULL_AND_PIECEWISE`, replays uniform batches as FULL graphs, the rest
# piecewise. Whether attention may sit inside a FULL graph is each backend's call: its metadata builder class
# *claims* an `AttentionCGSupport` level through `get_cudagraph_support`, from `NEVER` through
# `UNIFORM_SINGLE_TOKEN_DECODE` (one query token per request) and `UNIFORM_BATCH` (the same number per request) to
# `ALWAYS`. One idea: the claim a backend makes, and the mode the runner resolves from it. Step 5 takes upstream's
# fix of the claim (#48167) and a faster kernel for draft blocks; step 6 makes a claim it keeps.

# %% tags=["nbval-ignore-output"]
import dflash_fi.records.summary as S
from dflash_fi.notebook import check, runs, setup, show, show_hunks, show_source, verdict

# The engines of "On the GPU" start now, in the background: each takes most of a minute.
live_runs = [runs.NO_SPEC_GRAPHS_FI_TARGET, runs.STEP4_GRAPHS_FI_TARGET, runs.graphs_fi_target_run(6)]
session = setup("06_upstream_next", live=live_runs, reads=(S.Section.WALKTHROUGH, S.Section.BENCH_KERNELS))

# %% [markdown]
# ## What the runner asks, in vLLM 0.22.1
#
# The model runner asks every attention group's builder class, draft layers included, for its claim, **with the
# engine's (the target's) config**, and resolves one mode for the whole engine from the weakest answer:

# %%
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

show_source(GPUModelRunner._check_and_update_cudagraph_mode,
            [(r"cg_support = builder_cls.get_cudagraph_support", r"\)$"),
             (r"cudagraph_mode = self.compilation", r"min_cg_support,$")],
            mark=(r"self.vllm_config, kv_cache_group", r"resolve_cudagraph_mode_and"))

# %% [markdown]
# The branch the lesson turns on, in `resolve_cudagraph_mode_and_sizes`: a verify step is 1 + 15 tokens per request
# (`uniform_decode_query_len` 16), so a weakest claim below `UNIFORM_BATCH` turns `FULL_AND_PIECEWISE` into
# `PIECEWISE`, for every layer of the engine:

# %%
from vllm.config import CompilationConfig

show_source(CompilationConfig.resolve_cudagraph_mode_and_sizes,
            [(r"# check that if we are doing spec-decode", r"cudagraph_mode = CUDAGraphMode\.PIECEWISE$")],
            mark=(r"UNIFORM_BATCH\.value$", r"cudagraph_mode = CUDAGraphMode.PIECEWISE$"))

# %% [markdown]
# The claims of steps 4, 5 and 6 on pretended GPUs, as vLLM's own resolution turns them into a mode (FLASH_ATTN target,
# FLASHINFER draft; "draft config": the same builder asked with the draft's config, `use_non_causal=True`):

# %%
from dflash_fi.lab.graphs import cudagraph_claims, format_claims
from dflash_fi.vocabulary import BLACKWELL, HOPPER

claims = {(c["step"], c["capability"]): c for c in (cudagraph_claims(step, capability, trtllm) for step in (4, 5, 6)
                                                     for capability, trtllm in ((HOPPER, False), (BLACKWELL, True)))}
show(format_claims(list(claims.values())))
verdict(f"on SM 9.0 steps 4 and 5 claim {claims[4, '9.0']['flashinfer_claim']} and the engine resolves "
        f"{claims[4, '9.0']['resolved_mode']}: a FlashInfer draft costs the whole engine its FULL graphs (the "
        "evidence records each engine's mode, below; no benchmark here times a PIECEWISE engine against a FULL one, "
        f"so that cost is not measured); step 6 resolves {claims[6, '9.0']['resolved_mode']}. On SM 10.0 with TRTLLM, step 4 claims "
        f"{claims[4, '10.0']['flashinfer_claim_draft_config']} even for the draft's config, step 5 "
        f"{claims[5, '10.0']['flashinfer_claim_draft_config']}: that is #48167, next.")

# %% [markdown]
# ## Step 5, hunk 3: vLLM #48167
#
# A non-causal batch never runs on TRTLLM (step 4): it runs FlashInfer's prefill wrapper, whose replay never sees a
# later `plan()`. Upstream's fix makes the claim say so for a non-causal config (below). **In vLLM 0.22.1 this hunk
# changes no mode and no replay for the draft**: the runner asks with the target's config (above), and the drafter
# captures piecewise graphs only (step 6). It matters where each group is asked with its own config, as in vLLM
# 0.33.0. On a pretended Blackwell, the CPU lab's batches through `build()` that change, with what would replay if
# each group were asked with its own config:

# %%
from dflash_fi.lab.batches import STANDARD_BATCHES
from dflash_fi.lab.today import graphs_by_batch

show_hunks(5, only=[3], context=0)
bites = {step: graphs_by_batch(step, BLACKWELL) for step in (4, 5)}
changed = [b for b in STANDARD_BATCHES if bites[4][b] != bites[5][b]]
show("| batch | its path | step 4: claim, would replay | step 5: claim, would replay |\n|---|---|---|---|\n" + "\n".join(
    f"| {b.name} | {bites[4][b][0]} | " + " | ".join(", ".join(bites[step][b][1:]) for step in (4, 5)) + " |"
    for b in changed))
kept = [b for b in STANDARD_BATCHES if b not in changed]
verdict(f"{len(changed)} of {len(STANDARD_BATCHES)} batches change, both DFlash draft batches: asked per group, step 4 "
        f"would put FlashInfer's non-causal prefill in a {bites[4][changed[0]][2]} graph, replaying the plan of capture "
        f"time for every later block; #48167 makes it {bites[5][changed[0]][2]}. In 0.22.1 neither happens (one "
        f"config, piecewise drafter). The other {len(kept)}, the target's, keep their paths, claims and graphs.")

# %% [markdown]
# Step 5's other two hunks make the draft's wrapper ask for FlashInfer's fa2 kernel by name; why, with the kernel
# benchmark behind it, is in the appendix.

# %% [markdown]
# ## Step 6: a claim FlashInfer can keep
#
# Without TRTLLM, FlashInfer runs a verify batch (causal, 16 queries per request) on its prefill wrapper. A wrapper
# made with `use_cuda_graph=True` keeps a fixed batch size and buffers at fixed addresses, which `plan()` fills
# before each replay and the captured kernel reads; FlashInfer's decode path already keeps one such wrapper per batch
# size. Step 6 does the same for prefill (its wrappers and which batches get one: appendix), claims `UNIFORM_BATCH`
# for causal configs, and `build()` hands such a batch its graph wrapper. A draft block keeps step 3's wrapper: vLLM
# 0.22.1's drafter captures piecewise graphs only. Then the wrapper each CPU-lab batch gets from the real `build()`:

# %%
from dflash_fi.lab.routes import path_label
from dflash_fi.lab.routing import routing_report

show_hunks(6, only=[3, 5], context=0, joined=True)
hopper = {step: claims[step, "9.0"] for step in (5, 6)}
wrappers = {s: {r.batch: r for r in routing_report(s, cuda_graphs=True).routes} for s in (5, 6)}
moved = [batch for batch in wrappers[5] if wrappers[5][batch].prefill is not wrappers[6][batch].prefill]
verdict(f"step 5 resolves {hopper[5]['resolved_mode']}, step 6 {hopper[6]['resolved_mode']} (with a FlashInfer target "
        f"too: {hopper[6]['resolved_mode_flashinfer_target']}). Of the CPU lab's {len(wrappers[6])} batches only "
        f"'{moved[0].name}' changes wrapper, to '{path_label(wrappers[6][moved[0]].prefill, wrappers[6][moved[0]])}'.")

# %% [markdown]
# ## On the GPU: step 6's graph wrappers, running
#
# A verify batch reaches FlashInfer's prefill wrapper only on a FlashInfer **target**, so every engine here has one
# (and a FLASHINFER draft where it speculates): plain decoding, step 4 and step 6, with CUDA graphs, each one process
# running this call; below, what each resolved and its tau (mean tokens per verification step):

# %%
from dflash_fi.notebook import show_engine_calls

show_engine_calls(live_runs)

# %% tags=["gpu"]
live = session.run_live(live_runs)

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import label, short_backend

records, reference, source = session.evidence(live_runs)
names = lambda backends: ", ".join(sorted({short_backend(b) for b in backends})) or "-"
show(f"{source}\n\n| engine | target layers | draft layers | CUDA-graph mode | tau |\n|---|---|---|---|---|\n"
     + "\n".join(f"| {label(run)} | {names(r.target_backends)} | {names(r.draft_backends)} | {r.cudagraph_mode} | "
                 + (f"{r.tau:.3f}" if r.tau else "-") + " |" for run, r in records.items()))
at4, at6 = (records[run] for run in live_runs[1:])
taus = (f" Tau is {at4.tau:.2f} at step 4 and {at6.tau:.2f} at step 6 ({at6.tau / at4.tau - 1:+.1%}): a graph changes "
        "how a step runs, not what the draft computes, so a tau gap comes from the texts the two engines decoded, "
        "which the checks below compare." if at4.tau and at6.tau else "")
verdict(f"step 4's FlashInfer engine resolves {at4.cudagraph_mode}, step 6's {at6.cudagraph_mode}: with step 6 every "
        f"verify batch replays in a FULL graph through a CUDA-graph prefill wrapper.{taus} The walkthrough's checks "
        "(next cell) compare step 6's text with plain decoding's and with step 4's, by the near-tie rule.")

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
import contextlib
import io

with contextlib.redirect_stdout(io.StringIO()) as lines:  # one line per check: all passing, one line says so
    ran = session.check(records, reference)
check("on Blackwell step 4 claims UNIFORM_BATCH for the draft's config, step 5 (#48167) not",
      claims[4, "10.0"]["flashinfer_claim_draft_config"] == "UNIFORM_BATCH"
      and claims[5, "10.0"]["flashinfer_claim_draft_config"] == "UNIFORM_SINGLE_TOKEN_DECODE")
check("asked with their own config, only the draft batches change: FULL at step 4, PIECEWISE at step 5",
      changed == [b for b in STANDARD_BATCHES if b.role == "draft"]
      and all(bites[4][b][2] == "FULL" and bites[5][b][2] == "PIECEWISE" for b in changed))
passed = bool(ran) and all(c.passed for c in ran)
check(f"the walkthrough's {len(ran)} checks of these engines pass (texts by the near-tie rule)", passed,
      ("live" if session.live else "as the evidence pass judged them") if passed else lines.getvalue().strip())
check("step 6 keeps SM 9.0's FULL_AND_PIECEWISE (step 5: PIECEWISE), with either target, changing one wrapper",
      hopper[5]["resolved_mode"] == "PIECEWISE" and len(moved) == 1 and {hopper[6][k] for k in (
          "resolved_mode", "resolved_mode_flashinfer_target")} == {"FULL_AND_PIECEWISE"})

# %% [markdown]
# ## What you saw, and what's next

# %%
from dflash_fi.upstream import claim

graph_claim, wrappers_claim = claim("noncausal_graph_claim"), claim("graph_prefill_wrappers")
verdict(f"one CUDA-graph mode per engine, resolved from the weakest claim, asked with the target's config: with a "
        f"FlashInfer draft on SM 9.0 that is {hopper[5]['resolved_mode']} through step 5, every layer losing its FULL "
        f"graphs. #48167 keeps a non-causal draft block out of FULL graphs ({graph_claim.when()}, upstream's code); "
        f"step 6's graph prefill wrappers win the FULL graphs back ({hopper[6]['resolved_mode']}), changing "
        f"{len(moved)} of {len(wrappers[6])} batches' wrapper. Upstream {wrappers_claim.agreement.value.removeprefix('upstream ')} "
        f"({wrappers_claim.theirs}). Next, notebook 07: what a draft's metadata build still costs the host.")

# %% [markdown] tags=["appendix"]
# ## Appendix: step 5, hunks 1 and 2, the kernel for draft blocks
#
# PR #43081's non-causal wrapper lets FlashInfer choose (`auto`: its **fa3** kernel on SM 9.0 with a bf16 cache, its
# **fa2** kernel elsewhere). fa3 has no form for the bf16 queries vLLM keeps on an FP8 cache, and for 16-query
# blocks fa2 is the faster one. So the draft's wrapper asks for fa2 by name, one constant holding the choice; below
# it, the evidence pass's kernel benchmark at DFlash shapes (32 query and 8 KV heads of 128, as in Qwen3-4B), each
# kernel's time over fa2's per batch x context (below the line: faster than fa2):

# %% tags=["appendix", "nbval-ignore-output"]
from dflash_fi.figures import kernels_over_fa2
from dflash_fi.figures.style import pyplot
from dflash_fi.notebook import recorded

show_hunks(5, only=[1, 2], context=0, joined=True)
kernels = recorded(lambda: S.read().rows(S.Section.BENCH_KERNELS), "the kernel benchmark")
if kernels:
    kvs = ("bf16", "fp8-e4m3")
    _, over = kernels_over_fa2(kernels, {"flashinfer-fa3": "FlashInfer fa3 (auto, bf16)",
                                         "vllm-flash-attn": "vLLM's FlashAttention (FLASH_ATTN draft)"}, kvs)
    pyplot().show()
    fa3, fa = over["flashinfer-fa3", "bf16"], {kv: over["vllm-flash-attn", kv] for kv in kvs}
    worst, wins = max(fa3, key=fa3.get), {kv: sum(r < 1 for r in fa[kv].values()) for kv in kvs}
    no_fp8 = all(r != r for r in over["flashinfer-fa3", "fp8-e4m3"].values())
    verdict(f"on {kernels['gpu']}, bf16 cache: fa3 is slower than fa2 at {sum(r > 1 for r in fa3.values())} of "
            f"{len(fa3)} shapes, up to {fa3[worst]:.1f}x at {worst[0]}x{worst[1]}, never faster by more than "
            f"{1 - min(fa3.values()):.0%}{'; on fp8 fa3 has no kernel' * no_fp8}. vLLM's FlashAttention beats fa2 at "
            f"{wins['bf16']} of {len(fa3)} shapes on bf16 and {wins['fp8-e4m3']} on fp8. So on Hopper a FlashInfer "
            "draft should be pinned to fa2, never left to `auto`'s fa3; whether it should be FlashInfer at all, "
            "against FLASH_ATTN, the kernel alone does not settle: notebook 08 weighs it end to end.")

# %% [markdown] tags=["appendix"]
# ## Appendix: step 6's wrappers in full, and both steps' diffs
#
# The builder's CUDA-graph wrappers (one per batch size), their persistent `qo_indptr`, and which batches get one:

# %% tags=["appendix"]
show_hunks(6, only=[1, 2, 4], max_lines=None, context=0, joined=True)

# %% [markdown] tags=["appendix"]
# Both steps' whole diffs:

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(5)
show_step_diff(6)
