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
# # 05 · vLLM today: where PR #43081 went, from 0.24.0 to 0.33.0
#
# Notebooks 01-04 built PR #43081 on vLLM 0.22.1 as steps 1-4. It shipped in **vLLM 0.24.0**; **vLLM 0.33.0** is
# today's release. This notebook reads both releases' own code, each file checked against its pinned sha256 (how:
# appendix), and asks: does the merged code decide every batch as step 4 does, and what has happened since at the
# places the lesson taught? (XQA, PIECEWISE and the like: notebook 00's glossary.)

# %% tags=["nbval-ignore-output"]
from dflash_fi.notebook import check, setup, show, verdict
from dflash_fi.upstream import SHA256, VERSIONS, source

session = setup("05_vllm_today")

for version, path in sorted(SHA256):
    source(version, path)  # fetched once, checked every time
print(f"{len(SHA256)} files of vLLM {', '.join(VERSIONS)} read, each as pinned")

# %% [markdown]
# ## Step 4 is what vLLM merged
#
# The **merged lab** is the CPU lab of notebooks 01-04 with vLLM 0.24.0's `flashinfer.py` as its FlashInfer module.
# Each **build**, one batch under one **configuration** (a GPU of SM 8.9, 9.0 or 10.0; a bf16, fp8 or NVFP4 KV cache;
# TRTLLM and DCP on or off), is compared decision by decision: the selector's answer, the CUDA-graph claim, the split
# into prefill and decode, each `plan()`'s causality, `metadata.causal`, cascade, refusals and warnings.

# %%
from dflash_fi.figures.today import comparison_table, merged_verdict
from dflash_fi.lab.merged import compare, tally

builds = compare(seeds=8)
show(comparison_table(builds))
counts = tally(builds)
verdict(merged_verdict(counts))

# %% [markdown]
# ## The places the lesson taught, release by release
#
# Each place is a definition in each release's own file; a row counts the lines a release added and removed there,
# and names the PR whose thread says why ("not the lesson's": other layers). The diffs are in the appendix.

# %%
from dflash_fi.figures.today import places_table, places_verdict

show(places_table())
verdict(places_verdict())

# %% [markdown]
# ## The priority lists of 0.33.0
#
# Notebook 01's selector takes the first backend of a GPU's **priority list** whose `validate_configuration` says
# yes. In 0.33.0, on SM 10.x, a non-causal layer (`use_non_causal`) gets the other GPUs' list (FLASH_ATTN first), not
# SM 10.x's (FlashInfer first). vLLM's lines, then what the function returns (how it is read: appendix):

# %%
from IPython.display import display

from dflash_fi.figures.today import noncausal_branch, priority_table, priority_verdict
from dflash_fi.vocabulary import BLACKWELL, HOPPER, RTX_4090

gpus = (RTX_4090, HOPPER, BLACKWELL)
display(noncausal_branch())
show(priority_table(gpus))
verdict(priority_verdict(gpus))

# %% [markdown]
# ## The PR's claims against upstream's code
#
# Every claim the course makes about upstream is one row of `dflash_fi.upstream.CLAIMS`, **probed**: a pattern looked
# for in a definition of each release; "in the code" is the first release from which every later one shows it.

# %%
from dflash_fi.figures.today import claims_table, claims_verdict, pr_claims

show(claims_table(pr_claims()))
verdict(claims_verdict())

# %% [markdown]
# ## On the GPU
#
# The same lab at this machine's GPU: what its SM's list gives a non-causal layer in each release, and step 4 beside
# vLLM 0.24.0 at that SM (FlashInfer's wrappers are still the lab's doubles: the routing is decided before them).

# %% tags=["gpu"]
from dflash_fi.lab.merged import Config
from dflash_fi.lab.today import priorities
from dflash_fi.upstream import LESSON, MERGED, TODAY
from dflash_fi.vocabulary import sm

if session.gpu_cell():
    here = tuple(session.gpu.capability)
    print(f"SM {sm(here)}: a non-causal layer's first choice is {priorities(TODAY, here, True)[0]} in vLLM "
          f"{TODAY}, {priorities(LESSON, here)[0]} in {LESSON}")
    at_this_sm = compare([Config(here, kv, False, False) for kv in ("auto", "fp8")], seeds=8)
    check(f"at SM {sm(here)}, step 4 and vLLM {MERGED} decide all {len(at_this_sm)} builds alike",
          all(b.step4 == b.merged for b in at_this_sm))

# %% [markdown]
# ### Check

# %%
from dflash_fi.lab.merged import Difference
from dflash_fi.lab.today import installed_priorities, moved_priorities, priorities
from dflash_fi.upstream import CLAIMS, LESSON, TODAY

check("the isolated priority function gives what vLLM 0.22.1's own returns, on every GPU here",
      all(priorities(LESSON, cap) == installed_priorities(cap) for cap in gpus))
check("step 4 against vLLM 0.24.0: every difference named, all of them NVFP4",
      Difference.UNEXPLAINED not in counts.kinds and counts.nvfp4_only,
      f"{counts.builds} builds, {counts.configs} configurations")
check("only SM 10.0's list moves, and only for a non-causal layer",
      moved_priorities(gpus) == [BLACKWELL] and priorities(TODAY, BLACKWELL, False) == priorities(LESSON, BLACKWELL))
check("each claim's release is what the releases' code shows", all(c.shown_since() == c.since for c in CLAIMS))

# %% [markdown]
# ## What you saw, and what's next

# %%
from dflash_fi.figures.today import closing_verdict

verdict(closing_verdict(counts))

# %% [markdown] tags=["appendix"]
# ## Appendix: how the code is read, every claim, the diffs
#
# The code is read from each release's **wheel** (the file `pip` installs from), fetched from PyPI once into
# `artifacts/upstream/` and never installed. Each file read is **pinned**: checked against a sha256 written in
# `dflash_fi.upstream`, so a different file fails loudly instead of teaching something else. Only the three releases
# 0.22.1, 0.24.0 and 0.33.0 are read, so "in 0.33.0, not in 0.24.0" is all this notebook can say about when a change
# came. The merged lab imports 0.24.0's `flashinfer.py` unchanged; the rest of vLLM is 0.22.1's, and one name that
# file imports, `PIN_MEMORY`, is given 0.24.0's meaning.
#
# 0.33.0's `cuda.py` cannot be imported against vLLM 0.22.1, so its `_get_backend_priorities` is compiled from its
# source alone, with a stand-in `AttentionBackendEnum` whose members are their names; the same done to 0.22.1's
# function gives what 0.22.1's own returns (the check). Only the order of FLASH_ATTN and FLASHINFER matters here:
# TRITON_ATTN, FLEX_ATTENTION and TURBOQUANT, vLLM's other backends for these layers, are reached only when both of
# those refuse.
#
# Every claim about upstream, steps 1-9 (notebooks 06 and 07 read their own rows):

# %% tags=["appendix"]
from collections import Counter

from dflash_fi.upstream import Agreement

show(claims_table(CLAIMS))
by = Counter(c.agreement for c in CLAIMS)
print(f"of {len(CLAIMS)} rows, upstream does the same at {by[Agreement.SAME]}, another way at "
      f"{by[Agreement.OTHERWISE]}, not at {by[Agreement.NOT_DONE]}")

# %% [markdown] tags=["appendix"]
# The diffs of each place:

# %% tags=["appendix"]
from dflash_fi.figures.today import place_diffs

place_diffs()
