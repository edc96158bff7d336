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
# # 06 · CUDA-graph claims and the mode the runner resolves: steps 5 and 6
#
# A **CUDA graph** replays a step's captured kernels on the addresses read at capture: a later `plan()` is never seen.
# vLLM's default, `FULL_AND_PIECEWISE`, replays uniform batches in **FULL** graphs (attention inside) if every
# attention builder *claims* it may (`get_cudagraph_support`), the rest **PIECEWISE** (attention eager). Step 5
# takes #48167's fix of FlashInfer's claim and a faster draft kernel; step 6 makes a claim FlashInfer can keep.
#
# | claim | attention may sit in a FULL graph for |
# |---|---|
# | `ALWAYS` | every batch |
# | `UNIFORM_BATCH` | batches of one query length per request, such as verify steps (1 + 15 tokens each) |
# | `UNIFORM_SINGLE_TOKEN_DECODE` | batches of one-token decodes |
# | `NEVER` | no batch |

# %% tags=["nbval-ignore-output"]
import dflash_fi.records.summary as S
from dflash_fi.notebook import check, runs, setup, show, show_hunks, show_source, verdict

# The engines of "On the GPU" start now, in the background: each takes most of a minute.
live_runs = [runs.NO_SPEC_GRAPHS_FI_TARGET, runs.STEP4_GRAPHS_FI_TARGET, runs.graphs_fi_target_run(6)]
session = setup("06_upstream_next", live=live_runs, reads=(S.Section.WALKTHROUGH, S.Section.BENCH_KERNELS))

# %% [markdown]
# ## What the runner asks, in vLLM 0.22.1
#
# Every group's builder, draft layers too, is asked for its claim **with the engine's (target's) config**; the weakest
# answer sets one mode for the whole engine:

# %%
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

show_source(GPUModelRunner._check_and_update_cudagraph_mode,
            [(r"cg_support = builder_cls.get_cudagraph_support", r"\)$"),
             (r"cudagraph_mode = self.compilation", r"min_cg_support,$")],
            mark=(r"self.vllm_config, kv_cache_group", r"resolve_cudagraph_mode_and"))

# %% [markdown]
# The branch the lesson turns on: verify steps of 1 + 15 tokens a request and a claim below `UNIFORM_BATCH` make the
# whole engine `PIECEWISE`:

# %%
from vllm.config import CompilationConfig

show_source(CompilationConfig.resolve_cudagraph_mode_and_sizes,
            [(r"# check that if we are doing spec-decode", r"cudagraph_mode = CUDAGraphMode\.PIECEWISE$")],
            mark=(r"UNIFORM_BATCH\.value$", r"cudagraph_mode = CUDAGraphMode.PIECEWISE$"))

# %%
# Steps 4-6's claims on pretended GPUs, as vLLM resolves them (FLASH_ATTN target; draft config: use_non_causal)
from dflash_fi.lab.graphs import cudagraph_claims, format_claims
from dflash_fi.vocabulary import BLACKWELL, HOPPER

claims = {(c["step"], c["capability"]): c for c in (cudagraph_claims(step, capability, trtllm) for step in (4, 5, 6)
                                                     for capability, trtllm in ((HOPPER, False), (BLACKWELL, True)))}
show(format_claims(list(claims.values())))
c90, c100 = {s: claims[s, "9.0"] for s in (4, 5, 6)}, {s: claims[s, "10.0"] for s in (4, 5)}
verdict(f"on SM 9.0 steps 4 and 5 claim {c90[4]['flashinfer_claim']}; the engine resolves {c90[4]['resolved_mode']}: "
        f"a FlashInfer draft costs every layer its FULL graphs (a cost no benchmark here measures); step 6 resolves "
        f"{c90[6]['resolved_mode']}. On SM 10.0 with TRTLLM, step 4 claims {c100[4]['flashinfer_claim_draft_config']} "
        f"even for the draft's config, step 5 {c100[5]['flashinfer_claim_draft_config']}: that is #48167, next.")

# %% [markdown]
# ## Step 5, hunk 3: vLLM #48167
#
# A non-causal batch runs FlashInfer's prefill wrapper (never TRTLLM), whose replay would miss a later `plan()`; the
# claim of #48167 says so. **In 0.22.1 this changes no mode** (one config asked; the drafter piecewise). On a pretended
# Blackwell, the batches that change if each group is asked with its own config:

# %%
from dflash_fi.lab.batches import STANDARD_BATCHES
from dflash_fi.figures.today import replay_table
from dflash_fi.lab.today import graphs_by_batch

show_hunks(5, only=[3], context=0)
bites = {step: graphs_by_batch(step, BLACKWELL) for step in (4, 5)}
changed = [b for b in STANDARD_BATCHES if bites[4][b] != bites[5][b]]
show(replay_table(bites, changed))
kept = [b for b in STANDARD_BATCHES if b not in changed]
verdict(f"{len(changed)} of {len(STANDARD_BATCHES)} batches change, both DFlash draft batches: asked per group, step 4 "
        f"would put FlashInfer's non-causal prefill in a {bites[4][changed[0]][2]} graph, replaying the plan of "
        f"capture time for every later block; #48167 makes it {bites[5][changed[0]][2]}. The other {len(kept)}, the "
        "target's, keep their paths, claims and graphs.")

# %% [markdown]
# Step 5's other hunks (appendix) pin the draft to FlashInfer's **fa2** kernel, not `auto`'s **fa3**. Why, at DFlash's
# shapes (the evidence pass's kernel benchmark):

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures import kernels_over_fa2
from dflash_fi.figures.style import pyplot
from dflash_fi.figures.today import DRAFT_KERNELS, DRAFT_KVS, fa2_verdict
from dflash_fi.notebook import recorded, section_note

kernels = recorded(lambda: S.read().rows(S.Section.BENCH_KERNELS), "the kernel benchmark")
if kernels:
    print(section_note(S.Section.BENCH_KERNELS))
    _, over = kernels_over_fa2(kernels, DRAFT_KERNELS, DRAFT_KVS)  # each kernel over fa2, per KV cache
    pyplot().show()
    verdict(fa2_verdict(kernels["gpu"], over))

# %% [markdown]
# ## Step 6: a claim FlashInfer can keep
#
# Without TRTLLM a verify batch (causal) runs FlashInfer's prefill wrapper; made with `use_cuda_graph=True`, its buffers
# stay where `plan()` refills them for each replay. Step 6 keeps one per batch size, claims `UNIFORM_BATCH` for causal
# configs; a draft block keeps step 3's wrapper:

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
# Only a FlashInfer **target** sends verify batches to its prefill wrapper: so plain decoding, steps 4 and 6, all here:

# %%
from dflash_fi.notebook import show_engine_calls

show_engine_calls(live_runs)

# %% tags=["gpu"]
live = session.run_live(live_runs)

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures.today import engines_table, identical_outputs, tau_verdict

records, reference, source = session.evidence(live_runs)
show(f"{source}\n\n{engines_table(records)}")
at4, at6 = (records[run] for run in live_runs[1:])
seen, _, _ = session.evidence([runs.step_run(4), *live_runs])  # 04's engine too: the summary's, one prompt set
same = identical_outputs(seen, live_runs[1], live_runs[0])
verdict(f"step 4's FlashInfer engine resolves {at4.cudagraph_mode}, step 6's {at6.cudagraph_mode}: every verify batch "
        f"in a FULL graph, through a graph prefill wrapper."
        + tau_verdict(at4, at6, seen.get(runs.step_run(4)), seen.get(live_runs[1]), same))

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
      session.judged() if passed else lines.getvalue().strip())
check("step 6 keeps SM 9.0's FULL_AND_PIECEWISE (step 5: PIECEWISE), with either target, changing one wrapper",
      hopper[5]["resolved_mode"] == "PIECEWISE" and len(moved) == 1 and {hopper[6][k] for k in (
          "resolved_mode", "resolved_mode_flashinfer_target")} == {"FULL_AND_PIECEWISE"})

# %% [markdown]
# ## What you saw, and what's next

# %%
from dflash_fi.upstream import claim

graph_claim, wrappers_claim = claim("noncausal_graph_claim"), claim("graph_prefill_wrappers")
verdict(f"the weakest claim sets one mode: on SM 9.0 a FlashInfer draft gives {hopper[5]['resolved_mode']} "
        f"through step 5 ({graph_claim.prs[0]} keeps draft blocks out of FULL graphs, {graph_claim.when()}); step "
        f"6's graph wrappers win back {hopper[6]['resolved_mode']}, changing {len(moved)} of "
        f"{len(wrappers[6])} batches' wrapper. Upstream {wrappers_claim.agreement.value.removeprefix('upstream ')} "
        f"({wrappers_claim.theirs}). Next, 07: what a draft's metadata build costs the host.")

# %% [markdown] tags=["appendix"]
# ## Appendix: step 5's kernel hunks, step 6's wrappers, both steps' diffs

# %% [markdown] tags=["appendix"]
# Step 5, hunks 1 and 2. PR #43081's non-causal wrapper lets FlashInfer choose (`auto`: its **fa3** kernel on SM 9.0
# with a bf16 cache, its **fa2** kernel elsewhere). fa3 has no form for the bf16 queries vLLM keeps on an FP8 cache,
# and for 16-query blocks fa2 is the faster one (the figure above). So the draft's wrapper asks for fa2 by name, one
# constant holding the choice:

# %% tags=["appendix"]
show_hunks(5, only=[1, 2], context=0, joined=True)

# %% [markdown] tags=["appendix"]
# Step 6's wrappers in full: the builder's CUDA-graph wrappers (one per batch size), their persistent `qo_indptr`,
# and which batches get one:

# %% tags=["appendix"]
show_hunks(6, only=[1, 2, 4], max_lines=None, context=0, joined=True)

# %% [markdown] tags=["appendix"]
# Both steps' whole diffs:

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(5)
show_step_diff(6)
