"""What the committed records say: the last complete GPU walkthrough, its tables, and where it came from.

Tables are rendered here, from records keyed by `RunId`; nothing here is read back.
"""

from __future__ import annotations

from dflash_fi.engine.identity import RunId, Workload, label
from dflash_fi.engine.records import EngineRecord, Role, outcome, short_backend
from dflash_fi.errors import NoRecord
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.ledger import Walkthrough, latest_walkthrough
from dflash_fi.evidence.near_ties import partings
from dflash_fi.runs import Runs


def provenance(record: EngineRecord, walkthrough_id: str | None = None) -> str:
    """One line naming where a GPU record came from: run, GPU, versions, commit, time."""
    p = record.provenance
    what = f"walkthrough {walkthrough_id}" if walkthrough_id else repr(label(record.run))
    return (f"recorded by {what} on {p.gpu} (SM {p.compute_capability}), vllm {p.versions['vllm']}, "
            f"flashinfer {p.versions['flashinfer']}, torch {p.versions['torch']}, commit {p.git_commit}, {p.finished_at}")


def recorded_walkthrough(runs: Runs | None = None) -> tuple[Walkthrough, dict[RunId, EngineRecord], str]:
    """The last complete GPU walkthrough committed under runs/: its manifest, its records, and where it came from."""
    latest = latest_walkthrough(runs)
    if latest is None:
        raise NoRecord("no GPU walkthrough is recorded under runs/: run `dflash-fi walkthrough` on a GPU")
    manifest, records = latest
    return manifest, records, provenance(next(iter(records.values())), manifest.id)


def backends(record: EngineRecord, role: str = "draft") -> str:
    found = record.draft_backends if role == "draft" else record.target_backends
    return ", ".join(short_backend(b) for b in found) or "-"


def graphs(record: EngineRecord) -> str:
    return (record.cudagraph_mode or "-") if record.run.cuda_graphs else "eager"


def sameness(record: EngineRecord, baseline: EngineRecord | None, workload: Workload = Workload.UNIFORM) -> str:
    """"32/32 identical to 'no speculation'", or with how many parted and the largest gap where they did."""
    if baseline is None or not (record.ok and baseline.ok):
        return "-"
    run, base = record.generate(workload), baseline.generate(workload)
    parted = partings(record, baseline, workload)
    same = f"{len(run.tokens) - len(parted)}/{len(run.tokens)} identical to '{label(baseline.run)}'"
    if not parted:
        return same
    if base.near_ties is None:
        return same + " (no logprobs recorded)"
    gaps = [p["gap"] for p in parted if p["gap"] is not None]
    confident = len(parted) - len(gaps)
    return same + (f"; parted at gaps up to {max(gaps):.3f}" if gaps else "") + (
        f"; {confident} at a confident token" if confident else "")


def render_table(records: dict[RunId, EngineRecord]) -> str:
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
        baseline = records.get((bases.get(run) or (None,))[0])
        lines.append(f"| {label(run)} | {outcome(r)} | {backends(r, 'target')} | "
                     f"{backends(r) if run.speculative else '-'} | {graphs(r)} | {tau} | {pos} | "
                     f"{sameness(r, baseline)} |")
    return "\n".join(lines)


def above_largest_graph(record: EngineRecord, workload: Workload = Workload.MIXED) -> int | None:
    """Target-step builds of more tokens than the largest captured graph (None: recorded before builder roles)."""
    run = record.generate(workload)
    if run is None or run.legacy_builds is not None:
        return None
    return sum(b.above_largest_graph for b in run.builds if b.key.role is Role.TARGET)


def render_mixed_table(records: dict[RunId, EngineRecord]) -> str:
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
        larger = above_largest_graph(r)
        against = "; ".join(sameness(r, records.get(b), Workload.MIXED) for b in bases[run])
        tau = f"{mixed.tau:.3f} ({fa_tau:.3f})" if mixed.tau and fa_tau else "-"
        lines.append(f"| {label(run)} | {mixed.num_requests} | {tau} | "
                     f"{'-' if larger is None else larger} (graphs up to {r.max_cudagraph_capture_size} tokens) | "
                     f"{against} |")
    return "\n".join(lines)
