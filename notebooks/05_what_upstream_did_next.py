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
# # 5 · What upstream did next: CUDA-graph claims, #48167, and the draft's kernel
#
# After correctness, speed: vLLM resolves one **CUDA graph** mode per engine from what each backend's builder claims a
# graph can replay. Step 5 takes upstream's fix of FlashInfer's claim (vLLM #48167) and a faster kernel for the draft.

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, show, verdict

# The engines of the section "On the GPU" start now, in the background: each takes most of a minute to start.
live_runs = [P.NO_SPEC_GRAPHS, P.FLASH_ATTN_GRAPHS, P.STEP4_GRAPHS, P.step_run(4), P.step_run(5)]
session = setup("05_what_upstream_did_next", live=live_runs)

# %% [markdown]
# ## What the runner asks of a backend, in vLLM 0.22.1
#
# The runner asks every backend's builder class in the engine, draft layers included, what a *full* graph may hold,
# with the engine's (the target's) config, and resolves the mode from the weakest answer.
# A verify step is 1 + 15 tokens per request (`uniform_decode_query_len` 16): a claim below `UNIFORM_BATCH` turns the
# default `FULL_AND_PIECEWISE` into `PIECEWISE`, for every layer. The drafter captures piecewise graphs only
# (`SpecDecodeBaseProposer.initialize_cudagraph_keys`). Then the claims, on pretended GPUs:

# %%
from vllm.config.compilation import CompilationConfig
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from dflash_fi.notebook import show_source

show_source(GPUModelRunner._check_and_update_cudagraph_mode,
            [(r"cg_support = builder_cls.get_cudagraph_support", r"\)$"),
             (r"cudagraph_mode = self.compilation", r"min_cg_support,$")],
            mark=(r"self.vllm_config, kv_cache_group", r"resolve_cudagraph_mode_and"))
show_source(CompilationConfig.resolve_cudagraph_mode_and_sizes,
            [(r"and uniform_decode_query_len > 1", r"UNIFORM_BATCH.value"),
             (r'msg \+= "; setting cudagraph_mode=PIECEWISE"$', r"cudagraph_mode = CUDAGraphMode.PIECEWISE$")],
            mark=(r"uniform_decode_query_len > 1", r"UNIFORM_BATCH.value", r"= CUDAGraphMode.PIECEWISE"))

from dflash_fi.lab.graphs import cudagraph_claims
from dflash_fi.vocabulary import BLACKWELL, HOPPER

claims = [cudagraph_claims(step, capability, trtllm) for step in (4, 5, 6)
          for capability, trtllm in ((HOPPER, False), (BLACKWELL, True))]
by_step = {(c["step"], c["capability"]): c for c in claims}
verdict(f"on SM 9.0 steps 4 and 5 claim {by_step[4, '9.0']['flashinfer_claim']} and the engine resolves "
        f"{by_step[4, '9.0']['resolved_mode']}: a FlashInfer draft costs the whole engine its full graphs (step 6 "
        f"resolves {by_step[6, '9.0']['resolved_mode']}, notebook 6). On SM 10.0 with TRTLLM step 4 claims "
        f"{by_step[4, '10.0']['flashinfer_claim_draft_config']} even when asked with the draft's config; step 5 says "
        f"{by_step[5, '10.0']['flashinfer_claim_draft_config']}. The runner above never asks with that config.")

# %% [markdown]
# ## Step 5, hunk 3: vLLM #48167
#
# A non-causal batch never runs on TRTLLM (step 4); it runs FlashInfer's prefill wrapper, which a captured graph
# cannot replay after a new `plan()`. Upstream's fix makes the claim say so for a non-causal config:

# %%
from dflash_fi.notebook import show_hunks

show_hunks(5, only=[3], context=2)

# %% [markdown]
# The builder reads causality from the config it is asked with: DFlash's draft config says `use_non_causal=True`.
# vLLM 0.22.1's runner asks with the target's config, so here the hunk never changes a resolved mode. It bites where
# each group's builder is asked with its own layers' config, as later vLLM's drafters ask. On a pretended Blackwell,
# vLLM's own `build()`, claim and resolution for each batch of the CPU lab, asked that way (changed rows in bold):

# %%
import copy
from vllm.config import set_current_vllm_config
from dflash_fi.lab.batches import STANDARD_BATCHES
from dflash_fi.lab.graphs import SPEC_DECODE_QUERY_LEN as Q
from dflash_fi.lab.routes import paths
from dflash_fi.lab.routing import RoutingLab


def replays(step: int) -> dict:  # per batch: its path through build(), its layers' claim, the graph it replays
    with RoutingLab(step, BLACKWELL, trtllm=True, cuda_graphs=True) as lab:
        rows = {}
        for batch in STANDARD_BATCHES:
            builder, _, config = lab.builders[batch.role]
            with set_current_vllm_config(config):
                claim = type(builder).get_cudagraph_support(config, lab.kv_cache_spec)
                mode = copy.deepcopy(lab.vllm_config.compilation_config).resolve_cudagraph_mode_and_sizes(
                    claim, "FlashInferBackend", uniform_decode_query_len=Q)
            replay = mode.decode_mode() if set(batch.query_lens) == {Q} else mode.mixed_mode()
            path = paths(lab.route(batch)).replace("FlashInfer prefill (separate ", "").replace(")", "")
            rows[batch] = (path, claim.name, replay.name)
    return rows

bites = {step: replays(step) for step in (4, 5)}
changed = [b for b in STANDARD_BATCHES if bites[4][b] != bites[5][b]]
cell = lambda step, b: "{}; {}; {}".format(*bites[step][b])
show("| batch | step 4: path; claim; replays | step 5 |\n|---|---|---|\n" + "\n".join(
    "| " + " | ".join(f"**{x}**" if b in changed else x for x in (b.name, cell(4, b), cell(5, b))) + " |"
    for b in STANDARD_BATCHES))
path, _, replay_before = bites[4][changed[0]]
verdict(f"{len(changed)} rows change, both DFlash draft batches: at step 4 FlashInfer's {path} would sit in a "
        f"{replay_before} graph, replaying the plan of capture time for every later block; #48167 makes it "
        f"{bites[5][changed[0]][2]} (attention eager, planned each step). The target's batches keep their TRTLLM "
        "paths and graphs.")

# %% [markdown]
# ## Step 5, hunks 1 and 2: the draft's kernel
#
# PR #43081's non-causal wrapper lets FlashInfer choose (`auto`: its fa3 kernel on SM 9.0 with a bf16 cache). Its fa3
# kernel has no form for the bf16 queries vLLM keeps on an FP8 cache, and for 16-query blocks fa2 is the faster one
# (below); on every other GPU `auto` picks fa2 anyway. So the draft's wrapper asks for fa2, by name:

# %%
show_hunks(5, only=[1, 2], context=0, joined=True)

# %% [markdown]
# One constant holds the choice and its reason; the wrapper's constructor alone reads it. The evidence pass's kernel
# benchmark at DFlash shapes (32/8 heads of 128, as in Qwen3-4B):

# %% tags=["nbval-ignore-output"]
from dflash_fi.bench.results import latest_kernels
from dflash_fi.figures import kernels_over_fa2
from dflash_fi.figures.style import pyplot
from dflash_fi.notebook import recorded

kernels = recorded(latest_kernels, "the kernel benchmark (`dflash-fi bench kernels --record`)")
if kernels:
    kvs = ("bf16", "fp8-e4m3")
    _, over = kernels_over_fa2(kernels, {"flashinfer-fa3": "FlashInfer fa3 (auto, bf16)",
                                         "vllm-flash-attn": "vLLM's FlashAttention (FLASH_ATTN draft)"}, kvs)
    pyplot().show()
    fa3, fa = over["flashinfer-fa3", "bf16"], {kv: over["vllm-flash-attn", kv] for kv in kvs}
    shapes, worst, wins = list(fa3), max(fa3, key=fa3.get), {kv: sum(r < 1 for r in fa[kv].values()) for kv in kvs}
    no_fp8 = all(r != r for r in over["flashinfer-fa3", "fp8-e4m3"].values())
    verdict(f"on {kernels['gpu']}, bf16 cache: fa3 is slower than fa2 at {sum(r > 1 for r in fa3.values())} of "
            f"{len(shapes)} shapes, up to {fa3[worst]:.1f}x at {worst[0]}x{worst[1]}, never faster by more than "
            f"{1 - min(fa3.values()):.0%}{'; on fp8 fa3 has no kernel' * no_fp8}. vLLM's FlashAttention beats fa2 at "
            f"{wins['bf16']} of {len(shapes)} shapes on bf16 (up to {1 / min(fa['bf16'].values()):.1f}x) and "
            f"{wins['fp8-e4m3']} on fp8 (up to {1 / min(fa['fp8-e4m3'].values()):.1f}x): notebook 9 weighs that.")

# %% [markdown]
# Upstream since v0.26.0 (#48167) runs a FlashInfer DFlash draft's attention eagerly, and on SM 10.x gives a non-causal
# layer FLASH_ATTN first (notebook 10). Prefill wrappers a graph can replay, it has not taken: notebook 6 does (step 6).
#
# ## On the GPU: what each engine resolves, live
#
# The engines of the first cell (step 5 eager beside step 4: its kernel must change no output), each running this call:

# %%
from dflash_fi.evidence.live import show_engine_calls

show_engine_calls(live_runs)

# %% tags=["gpu"]
live = session.run_live(live_runs)

# %% tags=["nbval-ignore-output"]
from dflash_fi.engine.identity import label
from dflash_fi.engine.records import short_backend
from dflash_fi.notebook import wrapped_lines

records, reference, source = session.evidence(live_runs)
names = lambda backends: ", ".join(sorted({short_backend(b) for b in backends})) or "-"
show("| engine | target layers | draft layers | CUDA-graph mode |\n|---|---|---|---|\n" + "\n".join(
    f"| {label(run)} | {names(r.target_backends)} | {names(r.draft_backends)} | {r.cudagraph_mode} |"
    for run, r in records.items()))
with wrapped_lines():
    print(source)
    checks = session.check(records, reference)
verdict(f"the FLASH_ATTN draft keeps {records[P.FLASH_ATTN_GRAPHS].cudagraph_mode}; step 4's FlashInfer draft turns "
        f"the same engine {records[P.STEP4_GRAPHS].cudagraph_mode}, as vLLM's resolution predicted on the CPU above. "
        f"The eager engines resolve {records[P.step_run(5)].cudagraph_mode}; step 5's fa2 kernel gives step 4's output "
        f"(tau {records[P.step_run(5)].tau:.3f} against {records[P.step_run(4)].tau:.3f}).")

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
check("step 4 on SM 9.0 resolves PIECEWISE, step 6 FULL_AND_PIECEWISE",
      by_step[4, "9.0"]["resolved_mode"] == "PIECEWISE" and by_step[6, "9.0"]["resolved_mode"] == "FULL_AND_PIECEWISE")
check("step 4 claims UNIFORM_BATCH for the draft's config on Blackwell; step 5 (#48167) does not",
      by_step[4, "10.0"]["flashinfer_claim_draft_config"] == "UNIFORM_BATCH"
      and by_step[5, "10.0"]["flashinfer_claim_draft_config"] == "UNIFORM_SINGLE_TOKEN_DECODE")
check("asked with their own config, only the draft batches change: FULL at step 4, PIECEWISE at step 5",
      changed == [b for b in STANDARD_BATCHES if b.role == "draft"]
      and all(bites[4][b][2] == "FULL" and bites[5][b][2] == "PIECEWISE" for b in changed))
check(f"the walkthrough's {len(checks)} checks for graph modes and step 5 pass",
      bool(checks) and all(c.passed for c in checks), "live" if session.live else "committed records")

# %% [markdown]
# ## What you saw, and what's next
#
# One graph mode per engine, from claims asked with the target's config: step 4's FlashInfer draft costs SM 9.0 its
# full graphs. #48167 makes the claim honest for a non-causal config, where a draft block would replay a stale plan.
# Next, notebook 6: keeping the full graphs with a FlashInfer draft (step 6).

# %% [markdown]
# ## Appendix

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(5)
