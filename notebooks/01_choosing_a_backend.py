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
# # 1 · How vLLM picks an attention backend, and the capability flag
#
# Every attention layer asks for its backend once, when the model is built:
#
# 1. `vllm.v1.attention.selector.get_attn_backend` packs what the layer needs into an
#    `AttentionSelectorConfig` (head size, dtype, KV-cache dtype, ... and `use_non_causal`);
# 2. the platform (`CudaPlatform.get_attn_backend_cls`) checks the backend the user asked for, if any, and
#    fails with that backend's reasons if it refuses;
# 3. otherwise it walks its priority list for the GPU and takes the first backend whose
#    `validate_configuration` returns no reason.
#
# A DFlash engine asks twice, on its own for each model: the target's layers with the engine's
# `attention_backend` (or none), the draft's layers with `speculative_config["attention_backend"]` (or none), so
# the draft can run on FlashInfer while the target runs on FlashAttention. This notebook shows the whole selection,
# the path a draft layer takes after it, and step 1, which gets FlashInfer past the selector.

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, show, verdict

# The engines of the section "On the GPU" start now, in the background: each takes most of a minute to start.
live_runs = [P.FLASH_ATTN, P.step_run(0), P.step_run(1), P.RTX4090_STOCK]
session = setup("01_choosing_a_backend", live=live_runs)

# %% [markdown]
# ## The priority lists, vLLM's own
#
# `CudaPlatform` walks the list that `vllm.platforms.cuda._get_backend_priorities` returns for the GPU. Called
# here under pretended GPUs (vLLM's real `CudaPlatform` reporting SM 8.9, 9.0 and 10.0), with what the walk picks
# from it for the target's layers and for the draft's, in stock vLLM 0.22.1, when nothing is asked for:

# %%
from dflash_fi.lab.selector import priority_inputs, priority_lists, priority_table, selector_matrix
from dflash_fi.vocabulary import BLACKWELL, HOPPER, KV_CACHE_DTYPE_NAMES, RTX_4090, sm

GPUS = (RTX_4090, HOPPER, BLACKWELL)
show(priority_table(GPUS))


def column(row):
    return f"SM {row['capability']} + {KV_CACHE_DTYPE_NAMES[row['kv_cache_dtype']]} KV"


selection = selector_matrix(steps=(0, 1), capabilities=GPUS)
matrix = [r for r in selection if r["role"] == "draft"]
# The draft's layers differ from the target's only in asking with use_non_causal: a reason FLASHINFER gives the draft
# and not the target is its reason to refuse non-causal attention.
target_reasons = {(r["step"], column(r)): r["flashinfer_reasons"] for r in selection if r["role"] == "target"}


def refuses_non_causal(row):
    return bool(set(row["flashinfer_reasons"]) - set(target_reasons[row["step"], column(row)]))


lists = priority_lists(GPUS)
stranded = [column(r) for r in matrix if r["step"] == 0 and r["auto_backend"] is None]
verdict(f"the list depends on ({', '.join(priority_inputs())}) only: the target "
        "and the draft walk the same list, and only validate_configuration, asked with use_non_causal, tells them "
        f"apart. {sum(lists[c][0] == 'FLASHINFER' for c in lists)} of {len(lists)} GPUs put FLASHINFER first; stock "
        f"vLLM leaves the draft with no backend on {', '.join(stranded)}.")

# %% [markdown]
# The walk itself, in `CudaPlatform.get_valid_backends`: each backend of that list, in order, is asked
# `validate_configuration`, and every reason it gives is kept (they are what an error shows).

# %%
from dflash_fi.lab.pretend_gpu import cuda_platform_class
from dflash_fi.notebook import show_source

show_source(cuda_platform_class().get_valid_backends, [(r"for priority, backend in", r"return valid_backends")],
            mark=(r"validate_configuration\(",))

# %% [markdown]
# ## Where the draft's backend is asked for
#
# The drafter builds its own copy of the engine's config. vLLM's base proposer never inherits the target's
# attention backend: it puts `speculative_config["attention_backend"]` there (None: the selector's own choice), and
# DFlash's proposer then marks every draft layer `use_non_causal=True`. That flag is what makes
# `validate_configuration` ask a backend `supports_non_causal()`.

# %%
from vllm.v1.spec_decode.dflash import DFlashProposer
from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

show_source(SpecDecodeBaseProposer._create_draft_vllm_config,
            [(r"spec_cfg = self.speculative_config", r"spec_cfg = self"), (r"Note \(matt\)", r"^    \)$")],
            mark=(r"attention_backend",))
show_source(DFlashProposer._create_draft_vllm_config, [(r"base = super", r"^    \)$")], mark=(r"use_non_causal",))

# %% [markdown]
# ## The path of a draft layer, and where each step lands
#
# Selection happens once. After it, every decoding step of the draft goes through three more places in vLLM's
# FlashInfer backend before a kernel runs: the metadata builder's `build()`, which splits the batch into decodes
# and prefills; the wrapper's `plan()`; and its `run()`, once per layer. The tutorial's steps change each of them,
# in this order; later notebooks refer back to this picture.

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures import draft_layer_path

draft_layer_path();

# %%
from dflash_fi.figures.path import LANDS, STAGES

names = {key: name for key, name, *_ in STAGES}
selector_steps = [step for step, where in LANDS.items() if "select" in where]
verdict("; ".join(f"step {step} lands in " + ", ".join(names[k] for k in dict.fromkeys(where))
                  for step, where in LANDS.items())
        + f". Only step {' and '.join(map(str, selector_steps))} touches the selector: the others change what happens "
        "once a backend is chosen.")

# %% [markdown]
# ## The draft's selection, before and after step 1
#
# For the three GPUs, a bf16 and an FP8 KV cache, before (step 0) and after (step 1) the capability flag: what
# happens when FLASHINFER is asked for the draft, and what vLLM picks when nothing is asked for.

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures import selector_grid

selector_grid(matrix);

# %%
picks = {(r["step"], column(r)): r["auto_backend"] for r in matrix}
rescued = {cell: picks[1, cell] for cell in stranded}
changed = {cell: (picks[0, cell], picks[1, cell]) for step, cell in picks
           if step == 1 and cell not in stranded and picks[0, cell] != picks[1, cell]}
refusing = [r for r in matrix if r["step"] == 0 and refuses_non_causal(r)]
verdict(f"at step 0 FLASHINFER refuses the draft in {len(refusing)} of {sum(r['step'] == 0 for r in matrix)} columns "
        "('non-causal attention not supported'); every cell turns green at step 1. Where step 0 left the draft with "
        "nothing, vLLM now picks "
        + ", ".join(f"{b} ({cell})" for cell, b in rescued.items()) + ". The flag also changes a pick where a "
        "backend existed, wherever FLASHINFER stands before FLASH_ATTN in the GPU's priority list: "
        + (", ".join(f"{cell} from {a} to {b}" for cell, (a, b) in changed.items()) or "nowhere here")
        + ". Elsewhere the first choice stays what it was.")

# %% [markdown]
# ## Step 1: one method
#
# The hunk, as a diff of vLLM 0.22.1's own `flashinfer.py` (read from the installed wheel; this repository holds
# only the hunks). Its heading is the hunk's reason; the `@@` line says where it lands.

# %%
from dflash_fi.notebook import show_hunks

show_hunks(1)

# %% [markdown]
# `AttentionBackend.supports_non_causal()` is False by default; `validate_configuration` asks it only for a layer
# with `use_non_causal=True`. Saying True is all the selector needs. But nothing below the selector knows about
# non-causal attention yet. The real `FlashInferMetadataBuilder.build()` of step 1 builds the draft's metadata
# without any notion of causality, and DFlash's own guard (`build_per_group_and_layer_attn_metadata`, which requires
# `causal is False` on every draft layer) refuses it:

# %%
from dflash_fi.lab.batches import STANDARD_BATCHES
from dflash_fi.lab.routes import dflash_check, label, metadata_causal
from dflash_fi.lab.routing import RoutingLab

with RoutingLab(1) as lab:
    draft_row = lab.route(STANDARD_BATCHES[0])
print(f"{'selection':>16}: {'FLASHINFER accepted' if draft_row.selection_refused is None else 'refused'}")
print(f"{'prefill':>16}: {label(draft_row.prefill, draft_row)}")
print(f"{'plan_causal':>16}: {draft_row.plan_causal}")
print(f"{'metadata_causal':>16}: {metadata_causal(draft_row)}")
print(f"{'DFlash check':>16}: {dflash_check(draft_row, detail=True)}")

# %% [markdown]
# ## On the GPU
#
# Four engines on the embedded pair: the FLASH_ATTN draft (the reference), the stock FLASHINFER draft (step 0),
# step 1's, and the RTX 4090 case: an FP8 KV cache with vLLM's FlashAttention forced to version 2 (which stores no
# FP8 KV), the draft's backend left to the selector. Each runs in a process of its own, started in the first cell
# (notebook 0, "Numbers you will see"); the cell after this one waits for them.

# %%
from dflash_fi.evidence.live import show_engine_calls

show_engine_calls(live_runs)

# %% tags=["gpu"]
live = session.run_live(live_runs)

# %% [markdown]
# The walkthrough's checks for steps 0 and 1 and for the stock RTX 4090 case, on those live runs (or, on a
# machine without a GPU, as the evidence summary's walkthrough judged them):

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import wrapped_lines

records, reference, source = session.evidence(live_runs)
with wrapped_lines():
    print(source)
    checks = session.check(records, reference)

# %% [markdown]
# What vLLM itself says when it starts the stock engine of the RTX 4090 case, backend by backend, next to what the
# CPU lab's pretended RTX 4090 said in notebook 0:

# %% tags=["nbval-ignore-output"]
import dflash_fi.summary as S
from dflash_fi.lab.selector import backend_verdicts

stock = records[P.RTX4090_STOCK]
made = stock.provenance or S.read().walkthrough()[4]  # a live record says where it ran; the summary's, its section
# The ValueError the CPU lab's vLLM raised for the pretended RTX 4090 (no backend accepts the draft), as raised.
lab_error = next(r["auto_error"] for r in matrix
                 if (r["step"], r["capability"], r["kv_cache_dtype"]) == (0, sm(RTX_4090), "fp8"))
said = stock.failure.message.strip() if stock.failure else None
same = stock.failure is not None and (stock.failure.type, said) == (type(lab_error).__name__, str(lab_error))
lab_4090 = {v["backend"]: v["reasons"] for v in backend_verdicts(0, RTX_4090, "fp8", "draft")}
show(f"| backend | why it refuses on the CPU lab's pretended RTX 4090 |\n|---|---|\n" + "\n".join(
    f"| {name} | {'; '.join(reasons)} |" for name, reasons in lab_4090.items()))
print(f"vLLM on {made.gpu}: {stock.failure.type if stock.failure else 'no failure'}: {said}")
verdict(f"on {made.gpu} (SM {made.compute_capability}), with only vLLM's FlashAttention forced to "
        f"version 2 and an FP8 cache, vLLM 0.22.1 refuses the draft "
        + ("with the very ValueError, word for word, that the CPU lab's vLLM raises" if same else
           "with another error than the CPU lab's vLLM raises")
        + f" on the pretended RTX 4090: {len(lab_4090)} backends, each with its reasons. What still differs from a real "
        f"4090: vLLM's capability checks see SM {made.compute_capability}, not 8.9, and FlashInfer picks "
        "its own kernels for that silicon.")

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
step0 = {(r["capability"], r["kv_cache_dtype"]): r for r in matrix if r["step"] == 0}
step1 = {(r["capability"], r["kv_cache_dtype"]): r for r in matrix if r["step"] == 1}
with wrapped_lines():
    check("stock FLASHINFER refuses the draft everywhere, for non-causal attention",
          all(map(refuses_non_causal, step0.values())), f"{len(step0)} columns")
    check("the RTX 4090 + FP8 draft has no backend at step 0 and FLASHINFER at step 1",
          step0["8.9", "fp8"]["auto_backend"] is None and step1["8.9", "fp8"]["auto_backend"] == "FLASHINFER")
    check("step 1's FLASHINFER is accepted in every column", all(r["flashinfer_reasons"] == [] for r in step1.values()))
    check("step 1's metadata has no causal field and DFlash's guard refuses it",
          draft_row.dflash_check_passed is False and draft_row.metadata_causal is None)
    check("vLLM on the GPU refuses the RTX 4090 case's draft with the CPU lab's ValueError", same,
          f"{len(lab_4090)} backends")
    check(f"the walkthrough's {len(checks)} checks for these runs pass",
          bool(checks) and all(c.passed for c in checks), "live" if session.live else "committed records")

# %% [markdown]
# ## What you saw, and what's next
#
# - vLLM walks one priority list per GPU and asks each backend `validate_configuration`. The draft asks on its
#   own (`speculative_config["attention_backend"]`), with `use_non_causal=True`, and stock FlashInfer says no.
#   With an FP8 cache where vLLM's FlashAttention is version 2 (an RTX 4090, or forced), nothing is left.
# - Step 1's one method gets past the selector, and straight into DFlash's own guard.
#
# Next, notebook 2: the metadata builder (the picture's second stop), the `causal` field, and a step that runs but
# is silently wrong.

# %% [markdown]
# ## Appendix

# %% tags=["appendix"]
from dflash_fi.notebook import show_step_diff

show_step_diff(1)

# %% [markdown]
# ## Try it yourself
#
# Write step 1's hunk yourself, checked by the CPU lab (no GPU). In a terminal (JupyterLab's will do):
#
# ```
# dflash-fi exercise 1           # writes exercises/step1.py: each hunk's reason, where it lands, the stock text
# dflash-fi exercise 1 --check   # your hunks in place of step 1's, on top of the project's steps before it
# ```
#
# Edit the hunk's `"new"` text in that file. The check prints one line per check (step 1, 3 in all) and then what
# still fails. Untouched, it says `step 1 still fails 2 of 3 checks: selector accepts the draft; RTX 4090 fp8
# draft`: vLLM's selector still refuses FLASHINFER for the draft ("non-causal attention not supported"), and the RTX
# 4090's fp8 draft still finds no backend. Right, it says `step 1 passes: all 3 checks of step 1 hold with your
# hunks` and exits 0. A hunk whose `"old"` text matches twice or nowhere is refused, naming its line in your file.
# The answer is the appendix above.
