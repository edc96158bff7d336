"""Notebook 05's tables and listings, from the data of `dflash_fi.lab.merged`, `dflash_fi.lab.today` and
`dflash_fi.upstream.CLAIMS` (its claims table is also notebooks 06's and 07's).

    comparison_table(builds)   step 4 against vLLM 0.24.0: how many builds agree, and each named difference
    places_table()             each place the lesson taught: what changed it from release to release, and why
    place_diffs()              the same places' diffs, folded, one box per release step
    noncausal_branch()         0.33.0's `_get_backend_priorities`, its `use_non_causal` branch, from the pinned wheel
    priority_table(gpus)       the priority lists of 0.22.1 and 0.33.0 (causal and non-causal), from their own source
    claims_table(claims)       each claim: this project's step against what upstream's code shows, and when
"""

from __future__ import annotations

import collections

from dflash_fi.figures.listings import Listing, details_block, diff_block, stack
from dflash_fi.vocabulary import sm


def comparison_table(builds: list) -> str:
    """One row per kind of difference (the same first), then every build: a configuration can have builds in two
    rows (some alike, some not), so the rows' configurations add up to more than the total's."""
    from dflash_fi.lab.merged import difference

    groups = collections.defaultdict(list)
    for build in builds:
        groups[difference(build)].append(build)
    lines = ["| step 4 against vLLM 0.24.0 | builds | configurations with such a build | decisions that differ | why |",
             "|---|---|---|---|---|"]
    for kind, members in sorted(groups.items(), key=lambda kv: kv[0] is not None):
        configs = {b.config for b in members}
        fields = sorted({f for b in members for f in b.differing})
        lines.append(f"| {'the same' if kind is None else kind.name} | {len(members)} | {len(configs)} | "
                     f"{', '.join(fields) or '-'} | {'-' if kind is None else kind.value} |")
    lines.append(f"| **all** | {len(builds)} | {len({b.config for b in builds})} | | |")
    return "\n".join(lines)


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
