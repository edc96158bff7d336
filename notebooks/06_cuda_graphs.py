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
# # 6 · Full CUDA graphs with a FlashInfer draft: step 6
#
# Notebook 5 ended with a FlashInfer draft costing an SM 9.0 engine its full CUDA graphs: step 6 keeps them, by giving
# FlashInfer's causal verify batches a prefill wrapper that a graph can replay.

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, show, show_hunks, verdict

# The engines of "On the GPU" start now, in the background: each takes most of a minute.
live_runs = [P.FLASH_ATTN, P.FLASH_ATTN_GRAPHS, P.graphs_run(6)]
session = setup("06_cuda_graphs", live=live_runs)

# %% [markdown]
# ## Step 6: a claim FlashInfer can keep
#
# vLLM 0.22.1's runner asks each backend's builder class, with the engine's config, what a full graph may hold, and
# resolves the engine's mode from the weakest answer (notebook 5):

# %%
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from dflash_fi.notebook import show_source

show_source(GPUModelRunner._check_and_update_cudagraph_mode,
            [(r"cg_support = builder_cls.get_cudagraph_support", r"\)$"),
             (r"cudagraph_mode = self.compilation", r"min_cg_support,$")],
            mark=(r"get_cudagraph_support\(", r"resolve_cudagraph_mode_and"))

# %% [markdown]
# A verify step (1 + 15 tokens per request) is a *uniform* batch, which `FULL_AND_PIECEWISE` replays as a full graph
# only if every backend claims `UNIFORM_BATCH`. Without TRTLLM FlashInfer runs it on its prefill wrapper, whose replay
# never sees a later `plan()`. A wrapper made with `use_cuda_graph=True` keeps a fixed batch size and buffers at fixed
# addresses, which `plan()` fills and a replay reads; the decode path keeps one per batch size. Step 6 does the same
# for prefill, and then claims `UNIFORM_BATCH` for causal configs (a draft config keeps step 5's claim):

# %%
show_hunks(6, only=[3], max_lines=100, context=2)

# %% [markdown]
# The wrappers, one per captured batch size on the builder's persistent buffers; which batches get one (causal, all
# prefill, each request with the verify query length or none: vLLM pads a captured batch with empty requests); and
# `build()` asking for it:

# %%
show_hunks(6, only=[1, 2, 4, 5], max_lines=100, context=0, joined=True)

# %% [markdown]
# A draft block keeps step 3's wrapper: vLLM 0.22.1's drafter captures piecewise graphs only. vLLM's resolution on the
# CPU (FLASH_ATTN target, FLASHINFER draft, pretended SM 9.0), and the CPU lab's batches through the real `build()`:

# %%
from dflash_fi.lab.batches import VERIFY
from dflash_fi.lab.graphs import cudagraph_claims, format_claims
from dflash_fi.lab.routes import label
from dflash_fi.lab.routing import routing_report
from dflash_fi.vocabulary import HOPPER

claims = {step: cudagraph_claims(step, HOPPER) for step in (5, 6)}
show(format_claims([claims[5], claims[6]]))
wrappers = {s: {r.batch: r for r in routing_report(s, cuda_graphs=True).routes} for s in (5, 6)}
changed = [batch for batch in wrappers[5] if wrappers[5][batch].prefill is not wrappers[6][batch].prefill]
verdict(f"step 5 resolves {claims[5]['resolved_mode']}, step 6 {claims[6]['resolved_mode']}. Of the CPU lab's "
        f"{len(wrappers[6])} batches only '{changed[0].name}' changes wrapper, to "
        f"'{label(wrappers[6][changed[0]].prefill, wrappers[6][changed[0]])}'.")

# %% [markdown]
# ## On the GPU
#
# The engines of the first cell: the FLASH_ATTN draft eager and with CUDA graphs, and step 6 with graphs.
# Each is one process running this call, with what the table changes:

# %%
from dflash_fi.evidence.live import show_engine_calls

show_engine_calls(live_runs)

# %% tags=["gpu"]
live = session.run_live(live_runs)

# %% [markdown]
# What each engine resolved (backends, CUDA-graph mode), its text and its tau, beside the reference decoder's:

# %% tags=["nbval-ignore-output"]
from dflash_fi.engine.identity import label as run_label
from dflash_fi.engine.records import short_backend

records, reference, source = session.evidence(live_runs)
names = lambda backends: ", ".join(sorted({short_backend(b) for b in backends})) or "-"
uniform = {run: r.generate() for run, r in records.items()}
steps = {run: g.acceptance.num_drafts for run, g in uniform.items()}
ref_steps = sum(p["drafts"] for p in reference["per_prompt_noncausal"])
show(f"{source}\n\n| engine | target, draft layers | CUDA-graph mode | text (sha256) | verification steps | tau |\n"
     "|---|---|---|---|---|---|\n" + "\n".join(
         f"| {run_label(run)} | {names(r.target_backends)}; {names(r.draft_backends)} | {r.cudagraph_mode} | "
         f"`{uniform[run].tokens_sha256[:10]}` | {steps[run]} | {r.tau:.3f} |" for run, r in records.items())
     + f"\n| reference decoder (fp32, eager) | - | - | its own | {ref_steps} | {reference['tau_noncausal']:.3f} |")
(_, n_prompts, n_tokens), = {(r.spec.prompts_file, r.spec.num_prompts, r.spec.max_new_tokens) for r in records.values()}
graph_runs = [run for run in records if run.cuda_graphs]
graph_texts = {uniform[run].tokens_sha256 for run in graph_runs}
eager, graphs, ref_tau = records[P.FLASH_ATTN], records[P.FLASH_ATTN_GRAPHS], reference["tau_noncausal"]
verdict(f"every engine ran the same {n_prompts} prompts x {n_tokens} tokens, as did the reference decoder "
        f"({reference['n_prompts']} x {reference['n_new_tokens']}). The {len(graph_runs)} graph engines write "
        f"{'one text' if len(graph_texts) == 1 else f'{len(graph_texts)} texts'}, the eager engine "
        f"{'the same' if uniform[P.FLASH_ATTN].tokens_sha256 in graph_texts else 'another'}: `enforce_eager=True` also "
        "turns off torch.compile, so the target's rounding differs and greedy choices part at near-ties. On its text "
        f"the FLASH_ATTN draft needs {steps[P.FLASH_ATTN_GRAPHS]} verification steps with graphs, {steps[P.FLASH_ATTN]} "
        f"eager: tau {graphs.tau:.3f} against {eager.tau:.3f}, {graphs.tau / ref_tau - 1:.1%} above the reference "
        f"decoder's {ref_tau:.3f} (fp32, eager, its own text), which the eager engine matches within "
        f"{abs(eager.tau / ref_tau - 1):.1%}. So graph engines are compared on another text; whether that text alone "
        "explains their tau, the GPU cell below measures (the records keep only the texts' hashes).")

# %% [markdown]
# The reference drafter (fp32) scored on each engine's own text, as vLLM counts (drafts past a text's end not
# counted): if the graph text alone is easier to draft, its score rises as the engine's tau does.

# %% tags=["gpu", "nbval-ignore-output"]
from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_TARGET, load_prompts
from dflash_fi.reference.decode import score_text
from dflash_fi.reference.tokenizer import prompt_ids
from dflash_fi.reference.weights import load_pair

if session.gpu_cell():
    texts = {"eager": uniform[P.FLASH_ATTN].tokens, "graphs": uniform[P.FLASH_ATTN_GRAPHS].tokens}
    prompts = [prompt_ids(text) for text in load_prompts(eager.spec.prompts_file, n=n_prompts)]
    pair = load_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, device="cuda")
    counts = {name: [(r.num_drafts, r.num_accepted) for r in (score_text(*pair, p, t) for p, t in zip(prompts, text))]
              for name, text in texts.items()}
    tau_of = {name: 1 + sum(a for _, a in c) / sum(n for n, _ in c) for name, c in counts.items()}
    fewer = [e[0] - g[0] for e, g in zip(counts["eager"], counts["graphs"])]  # per prompt: steps the graph text saves
    parted = sum(a != b for a, b in zip(texts["eager"], texts["graphs"]))
    verdict(f"{parted} of {len(prompts)} prompts' texts part between the eager and the graph engine. Scored by the "
            f"reference drafter, the eager text gives tau {tau_of['eager']:.3f}, the graph text {tau_of['graphs']:.3f}: "
            f"the text accounts for {(tau_of['graphs'] - tau_of['eager']) / ((graphs.tau - eager.tau) or float('nan')):.0%}"
            f" of the engines' gap. It takes {sum(g for g, _ in counts['graphs'])} verification steps to the eager text's "
            f"{sum(e for e, _ in counts['eager'])}; the largest difference on one prompt is {max(fewer, key=abs)} "
            f"(prompt {fewer.index(max(fewer, key=abs))}).")

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
graphs_kept = {claims[6][k] for k in ("resolved_mode", "resolved_mode_flashinfer_target")}
check("step 6 keeps SM 9.0's FULL_AND_PIECEWISE (step 5: PIECEWISE), changing the verify batch's wrapper only",
      claims[5]["resolved_mode"] == "PIECEWISE" and graphs_kept == {"FULL_AND_PIECEWISE"} and changed == [VERIFY])
check("the engines with CUDA graphs resolved FULL_AND_PIECEWISE, the eager one NONE",
      {records[run].cudagraph_mode for run in graph_runs} == {"FULL_AND_PIECEWISE"}
      and records[P.FLASH_ATTN].cudagraph_mode == "NONE")
session.check_walkthrough(live_runs);

# %% [markdown]
# ## What you saw, and what's next
#
# Step 6 keeps the engine's full graphs with replayable prefill wrappers for verify batches; a draft block keeps
# step 3's wrapper. Graph engines write another text than eager ones, so their tau is compared with graph engines
# only. Next, notebook 7: the host work the draft's build still does every step, and step 7.
#
# ## Appendix

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(6)
