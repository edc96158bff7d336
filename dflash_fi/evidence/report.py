"""What the committed records say: the last complete GPU walkthrough, its table, and where it came from."""

from __future__ import annotations

from dflash_fi.errors import NoRecord
from dflash_fi.evidence.checks import agreement
from dflash_fi.evidence.plan import NO_SPEC, NO_SPEC_GRAPHS, walkthrough_plan

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
    order = [spec.label for spec in walkthrough_plan()]  # engines finish in any order when they run in parallel
    return wid, dict(sorted(recs.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))


def recorded_walkthrough() -> tuple[dict[str, dict], str]:
    """The last complete GPU walkthrough committed under runs/, and the line saying where it came from."""
    from dflash_fi.evidence.ledger import all_records

    latest = latest_walkthrough(all_records())
    if latest is None:
        raise NoRecord("no GPU walkthrough is recorded under runs/: run `dflash-fi walkthrough` on a GPU")
    wid, records = latest
    return records, provenance(next(iter(records.values())), wid)


def short_backend(record: dict) -> str:
    draft = (record.get("backends") or {}).get("draft") or []
    return ", ".join(b.rsplit(".", 1)[-1].replace("Backend", "")
                     + (f" ({b.split('.')[2]})" if b.startswith("dflash_fi") else "") for b in draft) or "-"


def graphs(record: dict) -> str:
    if not record.get("spec", {}).get("cuda_graphs"):
        return "eager"
    return record.get("cudagraph_mode") or "-"


def render_table(records: dict[str, dict]) -> str:
    """One markdown row per run: outcome, draft backend, graph mode, tau, acceptance, tokens/s, agreement."""
    lines = ["| run | outcome | draft backend | CUDA graphs | tau | acceptance, positions 1-5 | tokens/s | "
             "same as no-spec |", "|---|---|---|---|---|---|---|---|"]
    for label, r in records.items():
        if r.get("ok"):
            outcome = "runs"
        else:
            e = r.get("error") or {}
            outcome = f"{e.get('type')} at {e.get('phase')}"
        tau = f"{r['tau']:.3f}" if r.get("tau") is not None else "-"
        pos = r.get("per_position_acceptance")
        pos = " ".join(f"{p:.2f}" for p in pos[:5]) if pos else "-"
        tps = f"{r['output_tokens_per_s']:.0f}" if r.get("output_tokens_per_s") else "-"
        speculative = r.get("spec", {}).get("speculative", True)
        baseline = records.get(NO_SPEC_GRAPHS if r.get("spec", {}).get("cuda_graphs") else NO_SPEC, {})
        same = agreement(r, baseline) if speculative and baseline else None
        lines.append(f"| {label} | {outcome} | {short_backend(r) if speculative else '-'} | {graphs(r)} | {tau} | "
                     f"{pos} | {tps} | {f'{same:.0%}' if same is not None else '-'} |")
    return "\n".join(lines)
