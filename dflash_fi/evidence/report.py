"""A walkthrough's tables, and what of its records goes into the evidence summary.

`compact` keeps of an engine record what the tables, figures and notebooks read (tokens by hash only);
`sameness_rows` is each run's output against its baselines', counted once, when the tokens are still there. Tables
are rendered here, from records keyed by `RunId`; nothing here is read back.
"""

from __future__ import annotations

from dataclasses import replace

from dflash_fi.engine.identity import RunId, Workload, label
from dflash_fi.engine.records import EngineRecord, Role, outcome, short_backend
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.near_ties import partings


def compact(record: EngineRecord) -> EngineRecord:
    """The record without its token lists, near-ties, log lines and where it ran (the section says where), and of its
    builder timings only the mixed workload's (what the mixed table and checks read)."""
    generates = {w: replace(g, tokens=(), near_ties=None, builds=g.builds if w is Workload.MIXED else ())
                 for w, g in record.generates.items()}
    return replace(record, generates=generates, flash_attn_log_lines=(), rounds=(), build_profiles=(), provenance=None)


def sameness_rows(records: dict[RunId, EngineRecord]) -> list[dict]:
    """Per run, workload and baseline: how many requests parted, the largest gap at a parting, how many at a confident
    token (no recorded gap)."""
    rows = []
    for run, bases in P.baselines().items():
        for baseline in bases:
            ours, theirs = records.get(run), records.get(baseline)
            for workload in Workload:
                if not (ours and theirs and ours.ok and theirs.ok and ours.generate(workload)
                        and theirs.generate(workload)):
                    continue
                parted = partings(ours, theirs, workload)
                gaps = [p["gap"] for p in parted if p["gap"] is not None]
                rows.append({"run": run.to_json(), "baseline": baseline.to_json(), "workload": workload.value,
                             "requests": ours.generate(workload).num_requests, "parted": len(parted),
                             "largest_gap": max(gaps) if gaps else None, "confident": len(parted) - len(gaps),
                             "logprobs": theirs.generate(workload).near_ties is not None})
    return rows


def backends(record: EngineRecord, role: str = "draft") -> str:
    found = record.draft_backends if role == "draft" else record.target_backends
    return ", ".join(short_backend(b) for b in found) or "-"


def graphs(record: EngineRecord) -> str:
    return (record.cudagraph_mode or "-") if record.run.cuda_graphs else "eager"


def sameness(run: RunId, baseline: RunId, rows: list[dict], workload: Workload = Workload.UNIFORM) -> str:
    """"32/32 identical to 'no speculation'", or with how many parted and the largest gap where they did."""
    row = next((r for r in rows if RunId.from_json(r["run"]) == run and RunId.from_json(r["baseline"]) == baseline
                and r["workload"] == workload.value), None)
    if row is None:
        return "-"
    same = f"{row['requests'] - row['parted']}/{row['requests']} identical to '{label(baseline)}'"
    if not row["parted"]:
        return same
    if not row["logprobs"]:
        return same + " (no logprobs recorded)"
    return same + (f"; parted at gaps up to {row['largest_gap']:.3f}" if row["largest_gap"] is not None else "") + (
        f"; {row['confident']} at a confident token" if row["confident"] else "")


def render_table(records: dict[RunId, EngineRecord], rows: list[dict]) -> str:
    """One markdown row per run: outcome, backends, graph mode, tau, acceptance, output against its baseline.
    No tokens/s: the walkthrough's engines share the GPU (the benchmarks time engines alone)."""
    lines = ["| run | outcome | target backend | draft backend | CUDA graphs | tau | acceptance, positions 1-5 | "
             "output (near-tie rule) |", "|---|---|---|---|---|---|---|---|"]
    bases = P.baselines()
    for run, r in records.items():
        tau = f"{r.tau:.3f}" if r.tau is not None else "-"
        uniform = r.generate()
        pos = uniform.acceptance.per_position if uniform and uniform.acceptance else ()
        pos = " ".join(f"{p:.2f}" for p in pos[:5]) or "-"
        baseline = (bases.get(run) or (None,))[0]
        lines.append(f"| {label(run)} | {outcome(r)} | {backends(r, 'target')} | "
                     f"{backends(r) if run.speculative else '-'} | {graphs(r)} | {tau} | {pos} | "
                     f"{sameness(run, baseline, rows) if baseline else '-'} |")
    return "\n".join(lines)


def above_largest_graph(record: EngineRecord, workload: Workload = Workload.MIXED) -> int | None:
    """Target-step builds of more tokens than the largest captured graph."""
    run = record.generate(workload)
    if run is None:
        return None
    return sum(b.above_largest_graph for b in run.builds if b.key.role is Role.TARGET)


def render_mixed_table(records: dict[RunId, EngineRecord], rows: list[dict]) -> str:
    """The mixed-batch rows: each against its baselines' mixed workload, tau beside the FLASH_ATTN draft's."""
    fa = records.get(P.FLASH_ATTN_GRAPHS)
    fa_tau = fa.generate(Workload.MIXED).tau if fa and fa.generate(Workload.MIXED) else None
    lines = ["| run, mixed batches | requests | tau (FLASH_ATTN draft) | target-step builds above the largest graph | "
             "output (near-tie rule) |", "|---|---|---|---|---|"]
    bases = P.baselines()
    for run in P.mixed_rows():
        r = records.get(run)
        mixed = r.generate(Workload.MIXED) if r else None
        if not mixed:
            lines.append(f"| {label(run)} | not run | - | - | - |")
            continue
        against = "; ".join(sameness(run, b, rows, Workload.MIXED) for b in bases[run])
        tau = f"{mixed.tau:.3f} ({fa_tau:.3f})" if mixed.tau and fa_tau else "-"
        lines.append(f"| {label(run)} | {mixed.num_requests} | {tau} | {above_largest_graph(r)} (graphs up to "
                     f"{r.max_cudagraph_capture_size} tokens) | {against} |")
    return "\n".join(lines)
