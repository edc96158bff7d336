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
# # 6 · Full CUDA graphs, and no host work that waits: steps 6 and 7
#
# Notebook 5 ended with a FlashInfer draft costing an SM 9.0 engine its full CUDA graphs: step 6 keeps them. Step 7
# removes two things the *host* (the CPU thread that prepares each engine step while the GPU runs the one before) does
# for the draft: a copy that waits for the GPU, and a build nobody reads.

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, show, show_hunks, skip, verdict

# The engines of "On the GPU" start now, in the background: each takes most of a minute.
live_runs = [P.FLASH_ATTN, P.FLASH_ATTN_GRAPHS, *(P.graphs_run(step) for step in (6, 7))]
session = setup("06_graphs_and_host_work", live=live_runs)

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

claims = {step: cudagraph_claims(step, HOPPER) for step in (5, 6, 7)}
show(format_claims([claims[5], claims[6]]))  # step 7 claims what step 6 does (checked below)
wrappers = {s: {r.batch: r for r in routing_report(s, cuda_graphs=True).routes} for s in (5, 6)}
changed = [batch for batch in wrappers[5] if wrappers[5][batch].prefill is not wrappers[6][batch].prefill]
verdict(f"step 5 resolves {claims[5]['resolved_mode']}, step 6 {claims[6]['resolved_mode']}. Of the CPU lab's "
        f"{len(wrappers[6])} batches only '{changed[0].name}' changes wrapper, to "
        f"'{label(wrappers[6][changed[0]].prefill, wrappers[6][changed[0]])}'.")

# %% [markdown]
# ## Step 7: no host work that waits, and none that nobody reads
#
# The host prepares step n + 1 while the GPU runs step n, which pays only if it never waits. DFlash builds the draft's
# metadata with only an upper bound of the sequence lengths on the host (how many drafts the target accepted is known
# on the GPU only). vLLM's `seq_lens_cpu` copies them on first use, waiting for every kernel queued before. FlashInfer's
# builder read it; step 7 plans from the bound. `plan()` only schedules work from the lengths it is given; the kernel
# reads the *page table* on the GPU. So the page table's host copy, which `plan()` reads, comes from the bounds (numpy),
# its GPU copy from the exact `seq_lens` (GPU operations); `run()` is pointed at it, and a bound-planned request's KV is
# not split (chunks cut by bounds and filled by exact lengths can leave one empty: wrong attention, `tests/gpu`):

# %%
show_hunks(7, only=[8, 9, 6, 10], max_lines={6: 100, 8: 100, 9: 10, 10: 100}, context=0, joined=True)

# %% [markdown]
# **A build nobody reads.** The runner builds metadata for every attention group every step; with a FLASH_ATTN target
# the FlashInfer draft layers are a group of their own, planned every *target* step though they read only the
# drafter's builds. Built under the draft config, each layer records it; the builder asks its layers, and a target
# step's build for draft layers only returns at once, with metadata that a forward would refuse, saying why:

# %%
show_hunks(7, only=[1, 2, 3, 4, 7, 5, 11], max_lines={5: 8, 1: 100, 2: 100, 3: 100, 4: 100, 7: 100, 11: 100},
           context=0, joined=True)

# %% [markdown]
# Step 7 on the real builders (wrappers are the CPU lab's doubles): a draft batch of four requests, and the runner's
# kinds of target batch, built for the draft layers:

# %%
from dflash_fi.lab.host_work import draft_build_reads_gpu_lengths, runner_builds_for_draft_layers

lengths = {step: draft_build_reads_gpu_lengths(step) for step in (6, 7)}
runner = {step: runner_builds_for_draft_layers(step) for step in (6, 7)}
verdict(f"step 6 copies the exact lengths from the GPU ({lengths[6]['copied_from_gpu']}), step 7 plans from the bounds "
        f"{lengths[7]['upper_bounds']} (exact {lengths[7]['exact_seq_lens']}) and copies nothing; its kernel reads page "
        f"table {lengths[7]['kernel_indptr']}, step 6's. Of {len(runner[6])} target batches step 6 plans "
        f"{sum(r['planned'] for r in runner[6])} for the draft layers, step 7 {sum(r['planned'] for r in runner[7])}.")

# %% [markdown]
# ## On the GPU
#
# FlashInfer's fa2 kernel, bf16 and fp8 KV: step 7 planned from bounds and from exact lengths, against the reference.

# %% tags=["gpu", "nbval-ignore-output"]
from dflash_fi.lab.host_tables import bound_planning_table
from dflash_fi.lab.host_work import bound_planning_errors

if session.gpu_cell():
    bounded = [row for kv in ("auto", "fp8") for row in bound_planning_errors(kv)]
    show(bound_planning_table(bounded))
    verdict(f"from bounds, each batch computes what its exact plan does (largest difference "
            f"{max(r['bounds_vs_exact'] for r in bounded):.1e}).")

# %% [markdown]
# Then the engines of the first cell: the FLASH_ATTN draft eager and with CUDA graphs, and steps 6 and 7 with graphs.
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
import torch

from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_TARGET, load_prompts
from dflash_fi.reference.drafter import NON_CAUSAL
from dflash_fi.reference.tokenizer import prompt_ids
from dflash_fi.reference.weights import load_pair
from dflash_fi.vocabulary import NUM_SPECULATIVE_TOKENS as K


@torch.inference_mode()
def scored(target, drafter, prompt: list[int], text: tuple[int, ...]) -> tuple[int, int]:
    """(verification steps, accepted drafts) on a given text: each step drafts the block after the anchor and accepts
    the drafts equal to the text's next tokens (on the reference decoder's own text: its step count)."""
    device = target.lm_head.weight.device
    _, layers = target(torch.tensor([prompt + list(text)], device=device))  # the target's features, once
    start = p = len(prompt)
    steps = accepted = 0
    while p - start + 1 < len(text):  # text[p - start] is the anchor
        context = drafter.context_features([layer[:, :p] for layer in layers])
        drafts = drafter(target, context, torch.tensor([[p]], device=device),
                         torch.tensor([[text[p - start]]], device=device), NON_CAUSAL)[0, 0, 1:].argmax(-1).tolist()
        n = 0
        while n < K and p - start + 1 + n < len(text) and drafts[n] == text[p - start + 1 + n]:
            n += 1
        steps, accepted, p = steps + 1, accepted + n, p + 1 + n
    return steps, accepted


if session.gpu_cell():
    texts = {"eager": uniform[P.FLASH_ATTN].tokens, "graphs": uniform[P.FLASH_ATTN_GRAPHS].tokens}
    prompts = [prompt_ids(text) for text in load_prompts(eager.spec.prompts_file, n=n_prompts)]
    pair = load_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, device="cuda")
    counts = {name: [scored(*pair, p, t) for p, t in zip(prompts, text)] for name, text in texts.items()}
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
graphs_kept = {claims[s][k] for s in (6, 7) for k in ("resolved_mode", "resolved_mode_flashinfer_target")}
check("steps 6 and 7 keep SM 9.0's FULL_AND_PIECEWISE (step 5: PIECEWISE), changing the verify batch's wrapper only",
      claims[5]["resolved_mode"] == "PIECEWISE" and graphs_kept == {"FULL_AND_PIECEWISE"} and changed == [VERIFY])
check("step 7 plans from bounds, copies nothing (step 6 did), its kernel reads step 6's page table, and plans "
      "nothing on target steps for the draft layers (step 6 did)", lengths[6]["copied_from_gpu"] and not lengths[7][
          "copied_from_gpu"] and lengths[7]["planned_indptr"] != lengths[7]["kernel_indptr"] == lengths[6][
          "kernel_indptr"] and all(r["planned"] for r in runner[6]) and not any(r["planned"] for r in runner[7]))
check("the engines with CUDA graphs resolved FULL_AND_PIECEWISE, the eager one NONE",
      {records[run].cudagraph_mode for run in graph_runs} == {"FULL_AND_PIECEWISE"}
      and records[P.FLASH_ATTN].cudagraph_mode == "NONE")
if session.on_gpu:
    check("FlashInfer's kernel computes the same planned from bounds (step 7) as from exact lengths",
          max(r["bounds_vs_exact"] for r in bounded) < 5e-3 and not any(r["copied_from_gpu"] for r in bounded))
else:
    skip("FlashInfer's kernel planned from bounds, against exact planning", "no CUDA GPU here")
session.check_walkthrough(live_runs);

# %% [markdown]
# ## What you saw, and what's next
#
# Step 6 keeps the engine's full graphs with replayable prefill wrappers for verify batches. Step 7 plans the draft
# from host bounds, KV unsplit, copying nothing, and plans nothing for nobody. Graph engines write another text than
# eager ones, so their tau is compared with graph engines only. The draft still plans every draft step: notebook 7
# plans once.
#
# ## Appendix

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(6)
show_step_diff(7)
