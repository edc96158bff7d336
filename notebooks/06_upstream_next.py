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
# answer sets one mode for the whole engine. The table below also gives FlashInfer's claim for the draft's own config
# (`use_non_causal`), which vLLM 0.22.1 does not ask:

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
# Steps 4-6 on pretended GPUs, as vLLM resolves them with a FLASH_ATTN target
from dflash_fi.figures.upstream_next import modes_verdict
from dflash_fi.lab.graphs import format_claims
from dflash_fi.lab.today import graph_claims

claims = graph_claims(steps=(4, 5, 6))
show(format_claims(list(claims.values())))
verdict(modes_verdict(claims))

# %% [markdown]
# ## Step 5, hunk 3: vLLM #48167
#
# A non-causal batch runs FlashInfer's prefill wrapper (never TRTLLM), whose replay would miss a later `plan()`; the
# claim of #48167 says so. **In 0.22.1 this changes no mode** (one config asked; the drafter piecewise). On a pretended
# Blackwell, the batches that change if each group is asked with its own config:

# %%
from dflash_fi.figures.upstream_next import replay_table, replay_verdict
from dflash_fi.lab.batches import STANDARD_BATCHES
from dflash_fi.lab.today import graphs_by_batch
from dflash_fi.vocabulary import BLACKWELL

show_hunks(5, only=[3], context=0)
bites = {step: graphs_by_batch(step, BLACKWELL) for step in (4, 5)}
changed = [b for b in STANDARD_BATCHES if bites[4][b] != bites[5][b]]
show(replay_table(bites, changed))
verdict(replay_verdict(bites, changed))

# %% [markdown]
# Step 5's other hunks (appendix) pin the draft to FlashInfer's **fa2** kernel, not `auto`'s **fa3**. Why, at DFlash's
# shapes (the evidence pass's kernel benchmark):

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures import kernels_over_fa2
from dflash_fi.figures.style import pyplot
from dflash_fi.figures.upstream_next import DRAFT_KERNELS, DRAFT_KVS, fa2_verdict
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
from dflash_fi.figures.upstream_next import wrapper_verdict
from dflash_fi.lab.today import wrappers_moved

show_hunks(6, only=[3, 5], context=0, joined=True)
moved = wrappers_moved(5, 6)  # step 6's routes whose prefill wrapper is not step 5's
verdict(wrapper_verdict(claims, moved))

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
from dflash_fi.figures.upstream_next import engines_table, engines_verdict

records, reference, source = session.evidence(live_runs)
show(f"{source}\n\n{engines_table(records)}")
seen, _, _ = session.evidence([runs.step_run(4), *live_runs])  # 04's engine too: the summary's, one prompt set
verdict(engines_verdict(records, seen, live_runs, eager=runs.step_run(4)))

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures.upstream_next import failing
from dflash_fi.lab.today import by_step
from dflash_fi.vocabulary import HOPPER

draft_claim_on_blackwell = by_step(claims, BLACKWELL, "flashinfer_claim_draft_config")
check("on Blackwell step 4 claims UNIFORM_BATCH for the draft's config, step 5 (#48167) not",
      draft_claim_on_blackwell[4] == "UNIFORM_BATCH" and draft_claim_on_blackwell[5] == "UNIFORM_SINGLE_TOKEN_DECODE")
check("asked with their own config, only the draft batches change: FULL at step 4, PIECEWISE at step 5",
      changed == [b for b in STANDARD_BATCHES if b.role == "draft"]
      and all(bites[4][b].graph == "FULL" and bites[5][b].graph == "PIECEWISE" for b in changed))
ran = session.check(records, reference, quiet=True)  # said in one line below
passed = bool(ran) and all(c.passed for c in ran)
check(f"the walkthrough's {len(ran)} checks of these engines pass (texts by the near-tie rule)", passed,
      session.judged() if passed else failing(ran))
mode, mode_fi_target = (by_step(claims, HOPPER, f) for f in ("resolved_mode", "resolved_mode_flashinfer_target"))
check("step 6 gets SM 9.0's FULL_AND_PIECEWISE back (steps 4, 5: PIECEWISE), with either target, changing one wrapper",
      mode[4] == mode[5] == "PIECEWISE" and mode[6] == mode_fi_target[6] == "FULL_AND_PIECEWISE" and len(moved) == 1)

# %% [markdown]
# ## What you saw, and what's next

# %%
from dflash_fi.figures.upstream_next import closing_verdict

verdict(closing_verdict(claims, moved))

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
