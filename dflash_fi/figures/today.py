"""Notebook 05's tables, listings and verdicts, from the data of `dflash_fi.lab.merged`, `dflash_fi.lab.today` and
`dflash_fi.upstream.CLAIMS` (its claims table is also notebooks 06's and 07's).

    comparison_table(builds)   step 4 against vLLM 0.24.0: how many builds agree, and each named difference
    difference_words(kind)     a named difference in plain words: its label and a short why
    places_table()             each place the lesson taught: what changed it from release to release, and why
    place_diffs()              the same places' diffs, folded, one box per release step
    noncausal_branch()         0.33.0's `_get_backend_priorities`, its `use_non_causal` branch, from the pinned wheel
    upstream_comment(), UPSTREAM_WHY   the comment above that branch, and the reason quoted from it
    priority_table(gpus)       the priority lists of 0.22.1 and 0.33.0 (causal and non-causal), from their own source
    claims_table(claims)       each claim: this project's step against what upstream's code shows, and when
    told(claims)               what upstream's code does at each claim, its PRs and since when, as one clause
    pr_claims(), AROUND        the claims of PR #43081 (steps 1-4), and what upstream's code has around them
    merged_verdict(tally), places_verdict(), priority_verdict(gpus), claims_verdict(), closing_verdict(tally)
                               each section's verdict, from the same data
"""

from __future__ import annotations

import collections

from dflash_fi.figures.listings import Listing, details_block, diff_block, stack
from dflash_fi.vocabulary import sm


def difference_words(kind) -> tuple[str, str]:
    """A `dflash_fi.lab.merged.Difference` in plain words: (its row label, a short why); its value is the long why."""
    from dflash_fi.lab.merged import Difference

    return {Difference.NVFP4_NEEDS_SM100F: ("NVFP4 cache off SM 10.x", "0.24.0 refuses when the builder is made"),
            Difference.NVFP4_REFUSED_LATER: ("NVFP4 cache, non-causal batch",
                                             "both refuse; 0.24.0 later, after it wrote the page table"),
            Difference.UNEXPLAINED: ("unexplained", "nothing named explains it")}[kind]


def comparison_table(builds: list) -> str:
    """One row per kind of difference (the same first), then every build: a configuration can have builds in two
    rows (some alike, some not), so the rows' configurations add up to more than the total's. Each kind's long why
    follows the table, one line each."""
    from dflash_fi.lab.merged import difference

    groups = collections.defaultdict(list)
    for build in builds:
        groups[difference(build)].append(build)
    lines = ["| step 4 against vLLM 0.24.0 | builds | configurations with such a build | decisions that differ | why |",
             "|---|---|---|---|---|"]
    kinds = sorted(groups, key=lambda kind: (kind is not None, kind and kind.name))
    for kind in kinds:
        configs, members = {b.config for b in groups[kind]}, groups[kind]
        fields = sorted({f for b in members for f in b.differing})
        label, why = ("the same", "-") if kind is None else difference_words(kind)
        lines.append(f"| {label} | {len(members)} | {len(configs)} | {', '.join(fields) or '-'} | {why} |")
    lines.append(f"| **all** | {len(builds)} | {len({b.config for b in builds})} | | |")
    notes = [f"*{difference_words(kind)[0]}*: {kind.value}." for kind in kinds if kind is not None]
    return "\n".join(lines) + "".join(f"\n\n{note}" for note in notes)


def _lines(diff: str) -> str:
    added = sum(1 for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in diff.splitlines() if line.startswith("-") and not line.startswith("---"))
    return f"+{added} -{removed}"


def places_table() -> str:
    from dflash_fi.lab.today import PLACES, changes

    lines = ["| place | 0.22.1 → 0.24.0 | 0.24.0 → 0.33.0 |", "|---|---|---|"]
    for place in PLACES:
        cells = [f"{_lines(c.diff)}: {c.why}" if c.diff else "unchanged" for c in changes(place)]
        lines.append(f"| {place.title} (`{place.qualname}`) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def place_diffs() -> Listing:
    from dflash_fi.lab.today import PLACES, changes

    folded = []
    for place in PLACES:
        shown = [diff_block(c.diff, f"{c.before} → {c.after}: {c.why}", max_lines=None)
                 for c in changes(place) if c.diff]
        if shown:
            folded.append(details_block(f"{place.title}: {place.qualname}, diffs", stack(*shown)))
    return stack(*folded)


def noncausal_branch() -> Listing:
    """The lines of vLLM 0.33.0's `_get_backend_priorities` (read from its pinned wheel) where a non-causal layer's
    list parts from a causal one's: the parameter, the SM 10.x test, and the first entries of both lists, the lines
    naming `use_non_causal` marked."""
    import re

    from dflash_fi.figures.listings import code_block
    from dflash_fi.upstream import CUDA, TODAY, definition

    lines = definition(TODAY, CUDA, "_get_backend_priorities").splitlines()
    blocks = ((r"^def ", r"^def "), (r"use_non_causal: bool", r"use_non_causal: bool"),
              (r"# SM100f", r"AttentionBackendEnum\.FLASH_ATTN,$"), (r"^\s+else:$", r"return \[$"),
              (r"AttentionBackendEnum\.FLASH_ATTN,$", r"AttentionBackendEnum\.FLASHINFER,$"))
    keep, at = [], 0
    for first, last in blocks:  # each block searched from the end of the one before
        start = next(i for i in range(at, len(lines)) if re.search(first, lines[i]))
        at = next(i for i in range(start, len(lines)) if re.search(last, lines[i])) + 1
        keep.extend(range(start, at))
    out = []
    for previous, i in zip([None, *keep], keep):
        if previous is not None and i > previous + 1:  # lines left out: '...' at the next line's indent
            out.append(" " * (len(lines[i]) - len(lines[i].lstrip())) + "...")
        out.append(lines[i])
    out.append(" " * (len(out[-1]) - len(out[-1].lstrip())) + "...")
    marked = tuple(n + 1 for n, line in enumerate(out) if "use_non_causal" in line)
    return code_block("\n".join(out), f"vLLM {TODAY}'s {CUDA}: _get_backend_priorities, non-MLA layers", marked)


def priority_table(gpus) -> str:
    from dflash_fi.lab.today import LESSON, TODAY, priorities

    lines = ["| GPU | vLLM 0.22.1 (any layer) | vLLM 0.33.0, causal layer | vLLM 0.33.0, non-causal layer |",
             "|---|---|---|---|"]
    for cap in gpus:
        lists = (priorities(LESSON, cap), priorities(TODAY, cap, False), priorities(TODAY, cap, True))
        lines.append(f"| SM {sm(cap)} | " + " | ".join(" > ".join(names) for names in lists) + " |")
    return "\n".join(lines)


def claims_table(claims) -> str:
    """`dflash_fi.upstream.CLAIMS` (or some of them) as a table: the verdict column is the claim's `Agreement`, the
    release column what the pinned releases' code shows (`Claim.when`)."""
    lines = ["| step | this project | upstream's code | so | in the code | PRs |", "|---|---|---|---|---|---|"]
    for c in claims:
        lines.append(f"| {c.step} | {c.ours} | {c.theirs} | {c.agreement.value} | {c.when()} | "
                     f"{', '.join(c.prs) or 'none found'} |")
    return "\n".join(lines)


def told(claims) -> str:
    """Each claim's `theirs` with its PRs and `when()`, joined: a verdict's account of upstream, from the rows alone."""
    return "; ".join(f"{c.theirs} ({', '.join((*c.prs, c.when()))})" for c in claims)


AROUND = ("flash_attn_first", "xqa_draft")  # the claims on what upstream's code has around the PR's, by key


def pr_claims() -> list:
    """The claims on PR #43081's own steps (1-4)."""
    from dflash_fi.upstream import CLAIMS

    return [c for c in CLAIMS if c.step <= 4]


def _held(claims) -> list:
    """The claims every later release's code shows, 0.33.0's included: shown since 0.22.1 or 0.24.0."""
    from dflash_fi.upstream import LESSON, MERGED

    return [c for c in claims if c.since in (LESSON, MERGED)]


def _around() -> str:
    from dflash_fi.upstream import claim

    return told([claim(key) for key in AROUND])


_ORIGIN = {"NVFP4_NEEDS_SM100F": "another PR of 0.24.0",
           "NVFP4_REFUSED_LATER": "step 3 refusing NVFP4 before `build()` writes anything",
           "UNEXPLAINED": "nothing named"}  # where each kind of difference comes from, by `Difference` name


def merged_verdict(tally) -> str:
    """Notebook 05's verdict on step 4 against vLLM 0.24.0, from `dflash_fi.lab.merged.tally`."""
    kinds = "; ".join(f"{difference_words(k)[0]}: {_ORIGIN[k.name]}" for k in tally.kinds)
    return (f"{tally.alike} of {tally.builds} builds decide every field alike. The {len(tally.differ)} that differ "
            f"{'all have' if tally.nvfp4_only else 'do not all have'} an NVFP4 KV cache, and fall in "
            f"{len(tally.kinds)} named kinds ({kinds}). The configurations column adds up to more than "
            f"{tally.configs} because {tally.mixed} configurations have builds in both rows.")


def places_verdict() -> str:
    from dflash_fi.lab.today import PLACES, changes

    changed = [[p.title for p in PLACES if changes(p)[hop].diff] for hop in (0, 1)]
    kept = [p.title for p in PLACES if not changes(p)[1].diff]
    return (f"{len(changed[0])} of {len(PLACES)} places changed from 0.22.1 to 0.24.0, {len(changed[1])} from 0.24.0 "
            f"to 0.33.0; unchanged since the merge: {' and '.join(kept) or 'none'}. Upstream's code has also gained: "
            f"{_around()}. XQA is {_xqa()}")


def _xqa() -> str:
    """The glossary's XQA, for the verdict that first names it."""
    from dflash_fi.lab.glossary import glossary

    return next(t.definition for t in glossary() if t.term == "XQA")


# Quoted from the comment above 0.33.0's SM 10.x test (`upstream_comment`); `priority_verdict` fails if it is not there.
UPSTREAM_WHY = "non-causal cutlass path (used for dflash attention) is known to have problems"


def upstream_comment() -> str:
    """The comment vLLM 0.33.0 writes above `_get_backend_priorities`' `not use_non_causal` test, as one line, read
    from its pinned wheel."""
    from dflash_fi.upstream import CUDA, TODAY, definition

    lines = definition(TODAY, CUDA, "_get_backend_priorities").splitlines()
    end = start = next(i for i, line in enumerate(lines) if "not use_non_causal" in line)
    while start and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    return " ".join(line.strip().removeprefix("#").strip() for line in lines[start:end])


def priority_verdict(gpus) -> str:
    from dflash_fi.lab.today import LESSON, TODAY, moved_priorities, priorities
    from dflash_fi.upstream import claim

    moved, why = moved_priorities(gpus), claim("flash_attn_first")
    causal_kept = all(priorities(TODAY, cap, False) == priorities(LESSON, cap) for cap in gpus)
    firsts = sorted({priorities(TODAY, cap, True)[0] for cap in moved})
    if UPSTREAM_WHY not in upstream_comment():
        raise LookupError(f"vLLM {TODAY}'s comment no longer says {UPSTREAM_WHY!r}: {upstream_comment()!r}")
    return (f"only {', '.join(f'SM {sm(c)}' for c in moved)} changes, "
            f"{'and only' if causal_kept else 'also'} for a non-causal layer: a DFlash draft that names no backend "
            f"gets {', '.join(firsts)} first there ({', '.join(why.prs)}, {why.when()}), because, upstream's comment "
            f"says, FlashInfer's \"{UPSTREAM_WHY}\". On the other GPUs the walk is 0.22.1's.")


def claims_verdict() -> str:
    from dflash_fi.steps.course import NOTEBOOK_OF_STEP
    from dflash_fi.upstream import CLAIMS, MERGED, TODAY

    ours = pr_claims()
    rest = collections.Counter(NOTEBOOK_OF_STEP[c.step] for c in CLAIMS if c not in ours)
    return (f"{sum(c.since == MERGED for c in ours)} of the PR's {len(ours)} rows are {MERGED}'s code, and "
            f"{len(_held(ours))} of {len(ours)} still show in {TODAY}'s. The other {sum(rest.values())} rows are steps "
            "5-9's, taught " + " and ".join(f"in {nb} ({n} rows)" for nb, n in rest.items())
            + f"; all {len(CLAIMS)}: appendix.")


def closing_verdict(tally) -> str:
    from dflash_fi.upstream import MERGED, TODAY, claim

    ours, graphs = pr_claims(), claim("noncausal_graph_claim")
    return (f"PR #43081 is in vLLM {MERGED} as steps 1-4 wrote it: {tally.alike} of {tally.builds} builds decide "
            f"alike, the {len(tally.differ)} others {'only on NVFP4' if tally.nvfp4_only else 'not only on NVFP4'}, "
            f"for {len(tally.kinds)} named reasons. By {TODAY}, {len(_held(ours))} of its {len(ours)} claims still "
            f"hold, and upstream built around it: {_around()}. Next, notebook 06: how vLLM picks a CUDA-graph mode "
            f"from a backend's claim, FlashInfer's claim fixed ({', '.join(graphs.prs)}, {graphs.when()}), and step 6.")
