"""What the committed records say: the last complete GPU walkthrough, its tables, and where it came from."""

from __future__ import annotations

from dflash_fi.errors import NoRecord
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.near_ties import partings

# Walkthroughs recorded before the plan grew to steps 5 and 6 and CUDA graphs had 8 runs, and did not say so.
EARLIER_PLAN_RUNS = 8


def provenance(record: dict, walkthrough_id: str | None = None) -> str:
    """One line naming where a GPU record came from: run, GPU, versions, commit, time."""
    v = record["versions"]
    what = f"walkthrough {walkthrough_id}" if walkthrough_id else repr(record.get("label"))
    return (f"recorded by {what} on {record['gpu']} (SM {record['compute_capability']}), vllm {v['vllm']}, "
            f"flashinfer {v['flashinfer']}, torch {v['torch']}, commit {record['git_commit']}, {record['finished_at']}")


def latest_walkthrough(records: list[dict]) -> tuple[str, dict[str, dict]] | None:
    """The most recent complete walkthrough in a ledger: (walkthrough id, label -> record)."""
    by_id: dict[str, dict[str, dict]] = {}
    planned: dict[str, int] = {}
    for r in records:
        extra = r.get("spec", {}).get("extra") or {}
        if wid := extra.get("walkthrough_id"):
            by_id.setdefault(wid, {})[r["label"]] = r
            planned[wid] = extra.get("planned_runs", EARLIER_PLAN_RUNS)
    complete = [(wid, recs) for wid, recs in by_id.items() if len(recs) == planned[wid]]
    if not complete:
        return None
    # one ledger file per GPU kind, so file order says nothing of time: the last one to finish wins
    wid, recs = max(complete, key=lambda c: max(r["finished_at"] for r in c[1].values()))
    order = [spec.label for spec in P.walkthrough_plan()]  # engines finish in any order when they run in parallel
    return wid, dict(sorted(recs.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))


def recorded_walkthrough() -> tuple[dict[str, dict], str]:
    """The last complete GPU walkthrough committed under runs/, and the line saying where it came from."""
    from dflash_fi.evidence.ledger import all_records

    latest = latest_walkthrough(all_records())
    if latest is None:
        raise NoRecord("no GPU walkthrough is recorded under runs/: run `dflash-fi walkthrough` on a GPU")
    wid, records = latest
    return records, provenance(next(iter(records.values())), wid)


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1].replace("Backend", "") + (f" ({name.split('.')[2]})"
                                                              if name.startswith("dflash_fi") else "")


def short_backend(record: dict, role: str = "draft") -> str:
    return ", ".join(_short(b) for b in (record.get("backends") or {}).get(role) or []) or "-"


def graphs(record: dict) -> str:
    if not record.get("spec", {}).get("cuda_graphs"):
        return "eager"
    return record.get("cudagraph_mode") or "-"


def sameness(record: dict, baseline: dict | None, workload: str = "uniform") -> str:
    """"32/32 identical to 'no speculation'", or with how many parted and the largest gap where they did."""
    if baseline is None or not (record.get("ok") and baseline.get("ok")):
        return "-"
    run = record if workload == "uniform" else record.get(workload) or {}
    parted = partings(record, baseline, workload)
    same = f"{len(run['tokens']) - len(parted)}/{len(run['tokens'])} identical to '{baseline['label']}'"
    if not parted:
        return same
    base = baseline if workload == "uniform" else baseline.get(workload) or {}
    if "near_ties" not in base:
        return same + " (no logprobs recorded)"
    gaps = [p["gap"] for p in parted if p["gap"] is not None]
    confident = len(parted) - len(gaps)
    return same + (f"; parted at gaps up to {max(gaps):.3f}" if gaps else "") + (
        f"; {confident} at a confident token" if confident else "")


def render_table(records: dict[str, dict]) -> str:
    """One markdown row per run: outcome, backends, graph mode, tau, acceptance, output against its baseline.
    No tokens/s: the walkthrough's engines share the GPU (the benchmarks time engines alone)."""
    lines = ["| run | outcome | target backend | draft backend | CUDA graphs | tau | acceptance, positions 1-5 | "
             "output (near-tie rule) |", "|---|---|---|---|---|---|---|---|"]
    for label, r in records.items():
        if r.get("ok"):
            outcome = "runs"
        else:
            e = r.get("error") or {}
            outcome = f"{e.get('type')} at {e.get('phase')}"
        tau = f"{r['tau']:.3f}" if r.get("tau") is not None else "-"
        pos = r.get("per_position_acceptance")
        pos = " ".join(f"{p:.2f}" for p in pos[:5]) if pos else "-"
        speculative = r.get("spec", {}).get("speculative", True)
        baseline = records.get((P.BASELINES.get(label) or (None,))[0])
        lines.append(f"| {label} | {outcome} | {short_backend(r, 'target')} | "
                     f"{short_backend(r) if speculative else '-'} | {graphs(r)} | {tau} | {pos} | "
                     f"{sameness(r, baseline)} |")
    return "\n".join(lines)


def render_mixed_table(records: dict[str, dict]) -> str:
    """The mixed-batch rows: each against its baselines' mixed workload, tau beside the FLASH_ATTN draft's."""
    fa = records.get(P.FLASH_ATTN_GRAPHS, {}).get("mixed") or {}
    lines = ["| run, mixed batches | requests | tau (FLASH_ATTN draft) | target-step builds above the largest graph | "
             "output (near-tie rule) |", "|---|---|---|---|---|"]
    for label in P.MIXED_ROWS:
        r = records.get(label)
        mixed = (r or {}).get("mixed")
        if not mixed:
            lines.append(f"| {label} | not run | - | - | - |")
            continue
        larger = sum(v for w, v in mixed["builds_larger_than_largest_graph"].items() if w.startswith("target"))
        against = "; ".join(sameness(r, records.get(b), "mixed") for b in P.BASELINES[label])
        tau = f"{mixed['tau']:.3f} ({fa['tau']:.3f})" if mixed.get("tau") and fa.get("tau") else "-"
        lines.append(f"| {label} | {mixed['num_requests']} | {tau} | {larger} (graphs up to "
                     f"{r.get('max_cudagraph_capture_size')} tokens) | {against} |")
    return "\n".join(lines)
