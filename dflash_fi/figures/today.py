"""Notebook 10's tables and listings, rendered from the data of `dflash_fi.lab.merged` and `dflash_fi.lab.today`.

    comparison_table(builds)   step 4 against vLLM 0.24.0: how many builds agree, and each named difference
    places_table()             each place the lesson taught: what changed it from release to release, and why
    place_diffs()              the same places' diffs, folded, one box per release step
    priority_table(gpus)       the priority lists of 0.22.1 and 0.33.0 (causal and non-causal), from their own source
    upstream_table()           each step of this project against what upstream's code shows, since which release
"""

from __future__ import annotations

import collections

from dflash_fi.figures.listings import Listing, details_block, diff_block, stack
from dflash_fi.vocabulary import sm


def comparison_table(builds: list) -> str:
    from dflash_fi.lab.merged import difference

    groups = collections.defaultdict(list)
    for build in builds:
        groups[difference(build)].append(build)
    lines = ["| step 4 against vLLM 0.24.0 | builds | configurations | decisions that differ | why |",
             "|---|---|---|---|---|"]
    for kind, members in sorted(groups.items(), key=lambda kv: kv[0] is not None):
        configs = {b.config for b in members}
        fields = sorted({f for b in members for f in b.differing})
        lines.append(f"| {'the same' if kind is None else kind.name} | {len(members)} | {len(configs)} | "
                     f"{', '.join(fields) or '-'} | {'-' if kind is None else kind.value} |")
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


def priority_table(gpus) -> str:
    from dflash_fi.lab.today import LESSON, TODAY, priorities

    lines = ["| GPU | vLLM 0.22.1 (any layer) | vLLM 0.33.0, causal layer | vLLM 0.33.0, non-causal layer |",
             "|---|---|---|---|"]
    for cap in gpus:
        lists = (priorities(LESSON, cap), priorities(TODAY, cap, False), priorities(TODAY, cap, True))
        lines.append(f"| SM {sm(cap)} | " + " | ".join(" > ".join(names) for names in lists) + " |")
    return "\n".join(lines)


def upstream_table() -> str:
    from dflash_fi.lab.today import UPSTREAM

    lines = ["| step | this project | upstream's code | its code shows it since | PRs |", "|---|---|---|---|---|"]
    for row in UPSTREAM:
        lines.append(f"| {row.step} | {row.ours} | {row.theirs} | {row.since() or 'not in 0.33.0'} | {row.prs} |")
    return "\n".join(lines)
