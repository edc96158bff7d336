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
# Every attention layer asks for its backend once, when the model is built: `get_attn_backend` packs what it needs
# into an `AttentionSelectorConfig` (head size, dtypes, ... `use_non_causal`) and asks the platform. A DFlash engine
# asks on its own for the draft's layers, which is how the draft can run on FlashInfer and the target on
# FlashAttention. This notebook shows that selection, and step 1, which gets FlashInfer past it.

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, show, verdict

# The engines of the section "On the GPU" start now, in the background: each takes most of a minute to start.
live_runs = [P.FLASH_ATTN, P.step_run(0), P.step_run(1), P.RTX4090_STOCK]
session = setup("01_choosing_a_backend", live=live_runs)

# %% [markdown]
# ## What vLLM checks, in its own code
#
# `CudaPlatform.get_attn_backend_cls` (`vllm/platforms/cuda.py`) checks a backend that was asked for alone, its
# reasons becoming the error; with none asked for, `get_valid_backends` asks each backend of the GPU's list the
# same `validate_configuration`. The draft asks with its own config: `speculative_config["attention_backend"]`
# (None: the selector's choice), never the target's, and `use_non_causal=True`, which the last listing checks:

# %%
from vllm.v1.attention.backend import AttentionBackend
from vllm.v1.spec_decode.dflash import DFlashProposer
from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

from dflash_fi.lab.pretend_gpu import cuda_platform_class
from dflash_fi.notebook import show_source

show_source(cuda_platform_class().get_attn_backend_cls,
            [(r"if selected_backend is not None:", r"_asdict"),
             (r"if invalid_reasons:", r"return selected_backend.get_path")],
            mark=(r"if selected_backend is not None", r"validate_configuration\("))
show_source(SpecDecodeBaseProposer._create_draft_vllm_config, [(r"Never inherit the attention", r"backend=spec_cfg")],
            mark=(r"attention_backend",))
show_source(DFlashProposer._create_draft_vllm_config, [(r"base = super", r"use_non_causal")],
            mark=(r"use_non_causal",))
show_source(AttentionBackend.validate_configuration,
            [(r"if use_non_causal and", r"non-causal attention not supported")])

# %% [markdown]
# ## The priority lists, and the draft's selection before and after step 1
#
# `_get_backend_priorities` under pretended GPUs (vLLM's real `CudaPlatform` reporting SM 8.9, 9.0 and 10.0); then,
# per GPU and KV cache, before and after step 1: FLASHINFER asked for the draft, and vLLM's pick with none:

# %%
from dflash_fi.lab.selector import priority_inputs, priority_lists, priority_table, selector_matrix
from dflash_fi.vocabulary import BLACKWELL, HOPPER, KV_CACHE_DTYPE_NAMES, RTX_4090

GPUS = (RTX_4090, HOPPER, BLACKWELL)
show(priority_table(GPUS))
matrix = [{**r, "column": f"SM {r['capability']} + {KV_CACHE_DTYPE_NAMES[r['kv_cache_dtype']]} KV"}
          for r in selector_matrix(steps=(0, 1), capabilities=GPUS) if r["role"] == "draft"]
NON_CAUSAL = "non-causal attention not supported"  # validate_configuration's reason, as marked above
lists = priority_lists(GPUS)
stranded = [r["column"] for r in matrix if r["step"] == 0 and r["auto_backend"] is None]
verdict(f"the list depends on ({', '.join(priority_inputs())}) only, so the target and the draft walk the same "
        f"list and only `use_non_causal` tells them apart. {sum(lists[c][0] == 'FLASHINFER' for c in lists)} of "
        f"{len(lists)} GPUs put FLASHINFER first; stock vLLM leaves the draft no backend on {', '.join(stranded)}.")

# %% tags=["nbval-ignore-output"]
from dflash_fi.figures import selector_grid

selector_grid(matrix);

# %%
picks = {(r["step"], r["column"]): r["auto_backend"] for r in matrix}
changed = [f"{cell}: {picks[0, cell] or 'none'} -> {picks[1, cell]}" for step, cell in picks
           if step == 1 and picks[0, cell] != picks[1, cell]]
refusing = [r for r in matrix if r["step"] == 0 and NON_CAUSAL in r["flashinfer_reasons"]]
verdict(f"at step 0 FLASHINFER refuses the draft in {len(refusing)} of {sum(r['step'] == 0 for r in matrix)} columns "
        f"('{NON_CAUSAL}'); at step 1 every cell is green. With nothing asked for, the pick changes wherever "
        f"FLASHINFER stands before FLASH_ATTN in the list, or nothing else was left: {'; '.join(changed)}.")

# %% [markdown]
# ## Step 1: one method
#
# `supports_non_causal()` is False by default; saying True (a diff of vLLM 0.22.1's `flashinfer.py`) is all it takes:

# %%
from dflash_fi.notebook import show_hunks

show_hunks(1)

# %% [markdown]
# But nothing below the selector knows about non-causal attention yet (the path a draft layer takes after
# selection is the appendix's picture). Step 1's real `FlashInferMetadataBuilder.build()` builds the draft's
# metadata with no notion of causality, and DFlash's own guard (`build_per_group_and_layer_attn_metadata`, which
# requires `causal is False` on every draft layer) refuses it, naming the first draft layer it checks. DFlash
# numbers the draft's layers on from the target's (`start_layer_id=target_layer_num`): the names printed below are
# the ones the lab's and the GPU's message choose from, whichever layer the attention group lists first:

# %%
from dflash_fi.lab.batches import STANDARD_BATCHES
from dflash_fi.lab.routes import dflash_check, metadata_causal
from dflash_fi.lab.routing import RoutingLab

with RoutingLab(1) as lab:
    draft_row = lab.route(STANDARD_BATCHES[0])
print(f"selection: {'FLASHINFER accepted' if draft_row.selection_refused is None else 'refused'}; "
      f"plan_causal: {draft_row.plan_causal}; metadata_causal: {metadata_causal(draft_row)}")
print(f"layers: target {len(lab.layers['target'])}, draft {[layer.layer_name for layer in lab.layers['draft']]}")
print(f"DFlash check: {dflash_check(draft_row, detail=True)}")

# %% [markdown]
# ## On the GPU
#
# Four engines, started in the first cell: the FLASH_ATTN draft, step 0's and step 1's FLASHINFER draft, and the
# RTX 4090 case (an FP8 cache, vLLM's FlashAttention forced to version 2, the draft's backend left to the
# selector); then the walkthrough's checks on them (without a GPU: as the evidence summary judged them):

# %%
from dflash_fi.evidence.live import show_engine_calls

show_engine_calls(live_runs)

# %% tags=["gpu"]
live = session.run_live(live_runs)

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import wrapped_lines

records, reference, source = session.evidence(live_runs)
with wrapped_lines():
    print(source)
    checks = session.check(records, reference)

# %% [markdown]
# ### Check

# %% tags=["nbval-ignore-output"]
step0, step1 = ({(r["capability"], r["kv_cache_dtype"]): r for r in matrix if r["step"] == s} for s in (0, 1))
with wrapped_lines():
    check("stock FLASHINFER refuses the draft everywhere, for non-causal attention",
          all(NON_CAUSAL in r["flashinfer_reasons"] for r in step0.values()), f"{len(step0)} columns")
    check("the RTX 4090 + FP8 draft has no backend at step 0 and FLASHINFER at step 1",
          step0["8.9", "fp8"]["auto_backend"] is None and step1["8.9", "fp8"]["auto_backend"] == "FLASHINFER")
    check("step 1's FLASHINFER is accepted everywhere; its metadata has no causal field and DFlash's guard refuses it",
          all(r["flashinfer_reasons"] == [] for r in step1.values()) and draft_row.dflash_check_passed is False
          and draft_row.metadata_causal is None)
    check(f"the walkthrough's {len(checks)} checks for these runs pass",
          bool(checks) and all(c.passed for c in checks), "live" if session.live else "committed records")

# %% [markdown]
# ## What you saw, and what's next
#
# vLLM checks a requested backend alone, or walks the GPU's list asking each `validate_configuration`; the draft
# asks with `use_non_causal=True`, which stock FlashInfer refuses. Step 1 gets past the selector, into DFlash's own
# guard. Next, notebook 2: the metadata builder, and a step that runs but is silently wrong.

# %% [markdown]
# ## Appendix

# %% [markdown]
# **The path of a draft layer, and where each step lands.** Selection happens once. After it, every decoding step
# of the draft goes through three more places in vLLM's FlashInfer backend before a kernel runs: the metadata
# builder's `build()`, which splits the batch into decodes and prefills; the wrapper's `plan()`; and its `run()`,
# once per layer. The tutorial's steps change each of them, in this order; later notebooks refer to this picture.

# %% tags=["nbval-ignore-output", "appendix"]
from dflash_fi.figures import draft_layer_path
from dflash_fi.figures.path import LANDS, STAGES

draft_layer_path();
names = {key: name for key, name, *_ in STAGES}
selector_steps = [step for step, where in LANDS.items() if "select" in where]
verdict(f"only step {' and '.join(map(str, selector_steps))} touches the selector; the others change what happens "
        "once a backend is chosen: " + "; ".join(f"step {step} in " + ", ".join(names[k] for k in dict.fromkeys(where))
                                                  for step, where in LANDS.items()) + ".")

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
