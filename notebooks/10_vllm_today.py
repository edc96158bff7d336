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
# # 10 · vLLM today: where PR #43081 went, from 0.24.0 to 0.33.0
#
# The lesson builds on vLLM 0.22.1. PR #43081 shipped in vLLM 0.24.0; vLLM 0.33.0 is today's. This notebook reads
# both from their own wheels (fetched from PyPI once into `artifacts/upstream/`, each file checked against its sha256,
# as step 0's `flashinfer.py` is), drives 0.24.0's `flashinfer.py` beside step 4, and follows each place the lesson
# taught into 0.33.0. Every claim about upstream comes from its code, or from the PR thread named with it.

# %% tags=["nbval-ignore-output"]
from dflash_fi.evidence.live import setup
from dflash_fi.notebook import check, show, verdict
from dflash_fi.upstream import SHA256, source

session = setup("10_vllm_today")
for version, path in sorted(SHA256):
    source(version, path)  # fetched once, checked every time
print(f"{len(SHA256)} files of vLLM {', '.join(sorted({v for v, _ in SHA256}))} read, each as pinned")

# %% [markdown]
# ## Step 4 is what vLLM merged
#
# `MergedLab` is the lab of notebooks 1-4 with vLLM 0.24.0's `flashinfer.py` imported, unchanged, as its FlashInfer
# module; the rest is vLLM 0.22.1's. The file imports against 0.22.1 as it is. One name means something else there:
# `PIN_MEMORY`, which 0.24.0 defines as `is_pin_memory_available()` and 0.22.1 as "not WSL"; the lab gives it
# 0.24.0's meaning. Both build the standard batches and seeded random draft and target batches, under SM 8.9 / 9.0 /
# 10.0, bf16 / fp8 / NVFP4 KV caches, TRTLLM on and off, DCP on and off. Compared per build: the selector's answer,
# the CUDA-graph claim, the split, the prefill and decode paths, each `plan()`'s causality, `metadata.causal`,
# cascade, DFlash's own check, refusals (where, and whether the page table was computed first), warnings.

# %%
from dflash_fi.figures.today import comparison_table
from dflash_fi.lab.merged import Difference, compare, difference, warning_texts

builds = compare(seeds=8)
show(comparison_table(builds))
kinds = {difference(b) for b in builds}
check("every build that differs has a named reason", Difference.UNEXPLAINED not in kinds,
      f"{sum(difference(b) is not None for b in builds)} of {len(builds)} builds differ")
check("outside NVFP4, step 4 and vLLM 0.24.0 decide every build alike",
      all(b.step4 == b.merged for b in builds if b.config.kv_cache_dtype != "nvfp4"))
ours, theirs = warning_texts()
print(f"step 4 warns:       {ours}\nvLLM 0.24.0 warns:  {theirs}")
verdict("the merged code routes every batch as step 4 does. The two differences are both NVFP4's: one is another "
        "PR of 0.24.0, the other is where step 3 chose to refuse, before the builder writes anything. The warning "
        "fires under the same condition, in other words (a reviewer of #43081 asked for it).")

# %% [markdown]
# ## The places the lesson taught, release by release
#
# Each place as a definition in each release's own file; a change is named by the PR whose thread shows it
# ("not the lesson's" where it concerns other layers). The diffs are folded below the table.

# %%
from IPython.display import display

from dflash_fi.figures.today import place_diffs, places_table

show(places_table())
display(place_diffs())

# %% [markdown]
# ## The priority lists of 0.33.0
#
# 0.33.0's `cuda.py` cannot be imported against vLLM 0.22.1, so its `_get_backend_priorities` is compiled from its
# source alone, without its `@cache`, with a stand-in `AttentionBackendEnum` whose members are their names (the same
# done to 0.22.1's function gives what vLLM 0.22.1's own returns; `tests/upstream` holds that).

# %%
from dflash_fi.figures.today import priority_table
from dflash_fi.lab.today import priorities
from dflash_fi.upstream import LESSON, TODAY
from dflash_fi.vocabulary import BLACKWELL, HOPPER, RTX_4090

show(priority_table((RTX_4090, HOPPER, BLACKWELL)))
moved = [cap for cap in (RTX_4090, HOPPER, BLACKWELL) if priorities(TODAY, cap, True) != priorities(LESSON, cap)]
check("only SM 10.0's list moves, and only for a non-causal layer", moved == [BLACKWELL]
      and priorities(TODAY, BLACKWELL, False) == priorities(LESSON, BLACKWELL))
verdict("a DFlash draft on Blackwell that names no backend now gets FLASH_ATTN (#48167: FlashInfer's non-causal "
        "path there had problems under CUDA graphs); everywhere else the walk is 0.22.1's.")

# %% [markdown]
# ## This project's steps against upstream
#
# Each row's "upstream's code" is checked against the releases' code by the probes in `dflash_fi.lab.today.UPSTREAM`
# (a pattern in a definition); "since" is the first release all later ones agree with.

# %%
from dflash_fi.figures.today import upstream_table
from dflash_fi.lab.today import UPSTREAM

show(upstream_table())
check("every row is what the releases' code shows", all(r.since() == r.claimed for r in UPSTREAM))

# #58065 (2026-09) allows async scheduling for DFlash on the V2 model runner; 0.22.1's V1 check already allows it:
from typing import get_args

from vllm.config.speculative import EagleModelTypes

check("vLLM 0.22.1 counts dflash among the methods async scheduling allows", "dflash" in get_args(EagleModelTypes))

# %% [markdown]
# ## On the GPU
#
# The same lab, for this machine's GPU: what its SM gets for a DFlash draft that names no backend, and step 4 beside
# vLLM 0.24.0 at its SM (FlashInfer's wrappers are still the lab's doubles: the routing is decided before them).

# %% tags=["gpu"]
from dflash_fi.lab.merged import Config

if session.gpu_cell():
    here = tuple(session.gpu.capability)
    print(f"SM {session.gpu.sm}: a non-causal layer's first choice is {priorities(TODAY, here, True)[0]} in vLLM "
          f"0.33.0, {priorities(LESSON, here)[0]} in 0.22.1")
    at_this_sm = compare([Config(here, kv, False, False) for kv in ("auto", "fp8")], seeds=8)
    check(f"at SM {session.gpu.sm}, step 4 and vLLM 0.24.0 decide all {len(at_this_sm)} builds alike",
          all(b.step4 == b.merged for b in at_this_sm))

# %% [markdown]
# ### Check

# %%
from dflash_fi.lab.pretend_gpu import cuda_platform_class

cuda_platform_class()  # vllm.platforms.cuda, importable without a driver
from vllm.platforms.cuda import _get_backend_priorities
from vllm.platforms.interface import DeviceCapability

check("the isolated priority function gives what vLLM 0.22.1's own returns, on every GPU here",
      all(priorities(LESSON, cap) == tuple(b.name for b in _get_backend_priorities(False, DeviceCapability(*cap)))
          for cap in (RTX_4090, HOPPER, BLACKWELL)))
check("step 4 against vLLM 0.24.0: every difference named", Difference.UNEXPLAINED not in kinds,
      f"{len(builds)} builds, {len({b.config for b in builds})} configurations")
check("each step's row is what the releases' code shows", all(r.since() == r.claimed for r in UPSTREAM))

# %% [markdown]
# ## What you saw, and what's next
#
# - Steps 1-4 are #43081 as merged in 0.24.0: the same routing, build for build; step 3 refuses NVFP4 earlier.
# - Upstream did what this project did not: FLASH_ATTN first for a non-causal layer on Blackwell (#48167), and a
#   DFlash draft on FlashInfer's XQA kernel on SM 9.0 and 12.x (#50439, #49718), which needs no `plan()`; for
#   causal spec decoding below SM 9.0, full graphs from fa2's decode wrapper rather than from prefill wrappers.
# - This project did what upstream has not: FlashInfer's fa2 kernel for draft blocks (step 5), CUDA-graph prefill wrappers
#   (step 6), planning a draft from host bounds (step 7), planning once (step 8). The drafter still captures
#   piecewise graphs only, as in 0.22.1.
# - Open upstream, as far as public threads show: #57352 (FlashInfer plans without copying `seq_lens` from the GPU,
#   as step 7 does for drafts), #40756 (a crash in FlashInfer's metadata build under speculative decoding; one
#   downstream patch treats it as a `plan()` race on pinned buffers), SGLang #32417 (DFlash's FlashInfer host syncs).
#   Not found in public threads: which PR gave the non-causal wrapper its attention-sink variant.
#
# Next: the draft on XQA, this project's step 9, built on what #50439 shipped.
