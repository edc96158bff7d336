"""Notebook 05's tables and listings, from the data of `dflash_fi.lab.merged`, `dflash_fi.lab.today` and
`dflash_fi.upstream.CLAIMS` (its claims table is also notebooks 06's and 07's), and one count notebook 06 reads.

    comparison_table(builds)   step 4 against vLLM 0.24.0: how many builds agree, and each named difference
    difference_words(kind)     a named difference in plain words: its label and a short why
    places_table()             each place the lesson taught: what changed it from release to release, and why
    place_diffs()              the same places' diffs, folded, one box per release step
    noncausal_branch()         0.33.0's `_get_backend_priorities`, its `use_non_causal` branch, from the pinned wheel
    priority_table(gpus)       the priority lists of 0.22.1 and 0.33.0 (causal and non-causal), from their own source
    claims_table(claims)       each claim: this project's step against what upstream's code shows, and when
    told(claims)               what upstream's code does at each claim, its PRs and since when, as one clause
    identical_outputs(records, run, baseline)   how many of a run's outputs equal its baseline's, of how many
    engines_table(records)     notebook 06's engines: backends and CUDA-graph mode vLLM resolved, and tau
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


def identical_outputs(records: dict, run, baseline) -> tuple[int, int] | None:
    """(how many of `run`'s outputs on the uniform prompts equal `baseline`'s, of how many requests): counted from the
    tokens where `records` (RunId -> EngineRecord) hold them, a live run's; else the evidence summary's count, made
    when its pass still had them. None where neither has the pair."""
    import dflash_fi.records.summary as S
    from dflash_fi.records.runs import Workload

    ours, theirs = (records[r].generate() if r in records else None for r in (run, baseline))
    if ours and theirs and ours.tokens and theirs.tokens:
        return sum(a == b for a, b in zip(ours.tokens, theirs.tokens)), len(ours.tokens)
    row = next((r for r in S.read().walkthrough().sameness
                if (r.run, r.baseline, r.workload) == (run, baseline, Workload.UNIFORM.value)), None)
    return None if row is None else (row.identical, row.requests)


def fa2_verdict(gpu: str, over: dict) -> str:
    """Notebook 06's verdict on step 5's draft kernel, from `kernels_over_fa2`'s ratios (kernel, kv) -> shape -> time
    over fa2's, for FlashInfer's fa3 and vLLM's FlashAttention on a bf16 and an fp8 cache (NaN: no such kernel)."""
    fa3, fa = over["flashinfer-fa3", "bf16"], {kv: over["vllm-flash-attn", kv] for kv in ("bf16", "fp8-e4m3")}
    worst, wins = max(fa3, key=fa3.get), {kv: sum(r < 1 for r in ratios.values()) for kv, ratios in fa.items()}
    no_fp8 = all(r != r for r in over["flashinfer-fa3", "fp8-e4m3"].values())
    return (f"on {gpu}, bf16 cache: fa3 is slower than fa2 at {sum(r > 1 for r in fa3.values())} of {len(fa3)} shapes, "
            f"up to {fa3[worst]:.1f}x at {worst[0]}x{worst[1]}, never faster by more than {1 - min(fa3.values()):.0%}"
            f"{'; on fp8 fa3 has no kernel' * no_fp8}. So step 5 pins fa2. vLLM's FlashAttention beats fa2 at "
            f"{wins['bf16']} of {len(fa3)} shapes on bf16 and {wins['fp8-e4m3']} on fp8: whether a draft belongs on "
            "FlashInfer at all, notebook 08 weighs end to end.")


def tau_verdict(at4, at6, eager, ours, same: tuple[int, int] | None) -> str:
    """Notebook 06's tau clauses: its step-4 and step-6 engines (FlashInfer target, CUDA graphs, live or recorded),
    then notebook 04's eager step 4 (`eager`) against the same prompt set's step 4 of 06 (`ours`), with `same` =
    `identical_outputs` of `ours` against plain decoding on its target. '' for what was not recorded."""
    from dflash_fi.records.engine import short_backend

    out = ""
    if at4.tau and at6.tau:
        out += (f" Tau {at4.tau:.3f} at step 4, {at6.tau:.3f} at step 6 ({at6.tau / at4.tau - 1:+.1%}): step 6 runs "
                "the target's verify batches on its graph wrappers, whose rounding may pick the other of two near-tied "
                "tokens (the checks below hold the texts equal up to near-ties), and tau moves with the texts.")
    if eager is not None and ours is not None and eager.tau and ours.tau and same:
        target = ", ".join(sorted({short_backend(b) for b in eager.target_backends}))
        out += (f" Notebook 04's eager step 4 ({target} target) has tau {eager.tau:.3f} where this one has "
                f"{ours.tau:.3f}: at near-ties the target's kernels pick the text, and so which drafts are accepted; "
                f"only {same[0]}/{same[1]} of its outputs equal plain decoding's on the same target.")
    return out


def engines_table(records: dict) -> str:
    """Notebook 06's engines (RunId -> EngineRecord): the backends vLLM resolved for target and draft layers, the
    CUDA-graph mode it resolved, and tau ('-' where none)."""
    from dflash_fi.records.engine import short_backend
    from dflash_fi.records.runs import label

    def names(backends) -> str:
        return ", ".join(sorted({short_backend(b) for b in backends})) or "-"

    lines = ["| engine | target layers | draft layers | CUDA-graph mode | tau |", "|---|---|---|---|---|"]
    lines += [f"| {label(run)} | {names(r.target_backends)} | {names(r.draft_backends)} | {r.cudagraph_mode} | "
              + (f"{r.tau:.3f}" if r.tau else "-") + " |" for run, r in records.items()]
    return "\n".join(lines)


def replay_table(bites: dict, batches) -> str:
    """`graphs_by_batch` of steps 4 and 5 (`bites[step]`) for `batches`: each one's path, then per step its claim and
    the graph it would replay."""
    lines = ["| batch | its path | step 4: claim, would replay | step 5: claim, would replay |", "|---|---|---|---|"]
    lines += [f"| {b.name} | {bites[4][b][0]} | " + " | ".join(", ".join(bites[s][b][1:]) for s in (4, 5)) + " |"
              for b in batches]
    return "\n".join(lines)


DRAFT_KERNELS = {"flashinfer-fa3": "FlashInfer fa3 (auto, bf16)",
                 "vllm-flash-attn": "vLLM's FlashAttention (FLASH_ATTN draft)"}  # against fa2, on these KV caches:
DRAFT_KVS = ("bf16", "fp8-e4m3")
