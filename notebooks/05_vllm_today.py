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
from dflash_fi.figures.today import comparison_table, difference_words
from dflash_fi.lab.merged import Difference, compare, difference

builds = compare(seeds=8)
show(comparison_table(builds))
kinds = {b: difference(b) for b in builds}
differ = [b for b in builds if kinds[b] is not None]
configs = {b.config for b in builds}
mixed = {b.config for b in differ} & {b.config for b in builds if kinds[b] is None}
named = sorted({k for k in kinds.values() if k is not None}, key=lambda k: k.name)
verdict(f"{len(builds) - len(differ)} of {len(builds)} builds decide every field alike. The {len(differ)} that "
        f"differ all have an NVFP4 KV cache, and fall in {len(named)} named kinds "
        f"({'; '.join(difference_words(k)[0] for k in named)}): one is another PR of 0.24.0, the other is step 3 "
        f"refusing NVFP4 before `build()` writes anything. The configurations column adds up to more than "
        f"{len(configs)} because {len(mixed)} configurations have builds in both rows.")

# %% [markdown]
# ## The places the lesson taught, release by release
#
# Each place is a definition in each release's own file; a row counts the lines a release added and removed there,
# and names the PR whose thread says why ("not the lesson's": other layers). The diffs are in the appendix.

# %%
from dflash_fi.figures.today import places_table, told
from dflash_fi.lab.today import PLACES, changes, priorities
from dflash_fi.upstream import CLAIMS, LESSON, MERGED, TODAY, claim

show(places_table())
changed = {hop: [p.title for p in PLACES if changes(p)[hop].diff] for hop in (0, 1)}
kept = [p.title for p in PLACES if not changes(p)[1].diff]
pr_claims = [c for c in CLAIMS if c.step <= 4]
held = [c for c in pr_claims if c.since in (LESSON, MERGED)]  # shown since then: every later release's code too
around = [claim("flash_attn_first"), claim("xqa_draft")]
verdict(f"{len(changed[0])} of {len(PLACES)} places changed from 0.22.1 to 0.24.0, {len(changed[1])} from 0.24.0 to "
        f"0.33.0; unchanged since the merge: {' and '.join(kept)}. {len(held)} of the PR's {len(pr_claims)} claims "
        f"(table further down) still show in {TODAY}'s code. Around them, upstream's code now has: {told(around)}.")

# %% [markdown]
# ## The priority lists of 0.33.0
#
# Notebook 01's selector takes the first backend of a GPU's **priority list** whose `validate_configuration` says
# yes. In 0.33.0 a non-causal layer (`use_non_causal`) skips SM 10.x's list, FlashInfer first, for the other GPUs',
# FLASH_ATTN first: vLLM's lines, then what the function returns (how it is read: appendix).

# %%
from IPython.display import display

from dflash_fi.figures.today import noncausal_branch, priority_table
from dflash_fi.vocabulary import BLACKWELL, HOPPER, RTX_4090, sm

gpus = (RTX_4090, HOPPER, BLACKWELL)
display(noncausal_branch())
show(priority_table(gpus))
moved = [cap for cap in gpus if priorities(TODAY, cap, True) != priorities(LESSON, cap)]
first = {cap: priorities(TODAY, cap, True)[0] for cap in moved}
verdict(f"only {', '.join(f'SM {sm(c)}' for c in moved)} changes, and only for a non-causal layer: a DFlash draft "
        f"that names no backend gets {', '.join(set(first.values()))} first there "
        f"({', '.join(claim('flash_attn_first').prs)}, {claim('flash_attn_first').when()}). On the other GPUs "
        "the walk is 0.22.1's.")

# %% [markdown]
# ## The PR's claims against upstream's code
#
# Every claim the course makes about upstream is one row of `dflash_fi.upstream.CLAIMS`, **probed**: a pattern looked
# for in a definition of each release; "in the code" is the first release from which every later one shows it.

# %%
from collections import Counter

from dflash_fi.figures.today import claims_table
from dflash_fi.notebook import NOTEBOOK_OF_STEP

show(claims_table(pr_claims))
rest = Counter(NOTEBOOK_OF_STEP[c.step] for c in CLAIMS if c not in pr_claims)
verdict(f"the PR's {len(pr_claims)} rows are all {MERGED}'s code ({sum(c.since == MERGED for c in pr_claims)} of "
        f"{len(pr_claims)}). The other {sum(rest.values())} rows are steps 5-9's, taught "
        + " and ".join(f"in {nb} ({n} rows)" for nb, n in rest.items()) + f"; all {len(CLAIMS)}: appendix.")

# %% [markdown]
# ## On the GPU
#
# The same lab at this machine's GPU: what its SM's list gives a non-causal layer in each release, and step 4 beside
# vLLM 0.24.0 at that SM (FlashInfer's wrappers are still the lab's doubles: the routing is decided before them).

# %% tags=["gpu"]
from dflash_fi.lab.merged import Config

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
from dflash_fi.lab.today import installed_priorities

check("the isolated priority function gives what vLLM 0.22.1's own returns, on every GPU here",
      all(priorities(LESSON, cap) == installed_priorities(cap) for cap in gpus))
check("step 4 against vLLM 0.24.0: every difference named, all of them NVFP4",
      Difference.UNEXPLAINED not in kinds.values() and all(b.config.kv_cache_dtype == "nvfp4" for b in differ),
      f"{len(builds)} builds, {len(configs)} configurations")
check("only SM 10.0's list moves, and only for a non-causal layer",
      moved == [BLACKWELL] and priorities(TODAY, BLACKWELL, False) == priorities(LESSON, BLACKWELL))
check("each claim's release is what the releases' code shows", all(c.shown_since() == c.since for c in CLAIMS))

# %% [markdown]
# ## What you saw, and what's next

# %%
graphs = claim("noncausal_graph_claim")
verdict(f"PR #43081 is in vLLM {MERGED} as steps 1-4 wrote it: {len(builds) - len(differ)} of {len(builds)} builds "
        f"decide alike, the {len(differ)} others only on NVFP4, for {len(named)} named reasons. By {TODAY}, "
        f"{len(held)} of its {len(pr_claims)} claims still hold, and upstream built around it: {told(around)}. Next, "
        f"notebook 06: how vLLM picks a CUDA-graph mode from a backend's claim, FlashInfer's claim fixed "
        f"({', '.join(graphs.prs)}, {graphs.when()}), and step 6.")

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
