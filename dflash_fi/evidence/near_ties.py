"""The near-tie rule: where greedy outputs of two correct engines may part, and the margin that says so.

Greedy speculative decoding must give plain greedy decoding's output, but only up to the kernels' rounding:
verification runs the target's prefill kernels on 16-token blocks, plain decoding its decode kernels, and two
backends (or an eager and a captured engine) sum in different orders. At a position where the target's two
best candidates are nearly tied, such differences can flip the choice, and the outputs part from there on.
A bug that corrupts attention parts them anywhere, confident tokens included.

So an identity check looks at the first position where a prompt's output parts from its baseline, and asks
the baseline's gap there (nats between its best and second-best candidate, recorded by the engine, see
`dflash_fi.engine.generate`) to be within the near-tie margin. The margin is measured, not chosen: pairs of
correct configurations (`CALIBRATION_PAIRS`: engine to engine, backend to backend, and the FLASH_ATTN draft,
upstream's reference, against plain decoding) are run by `dflash-fi near-ties --record`, every parting's gap is
kept in `runs/<gpu>.near-tie-margin-<commit>.json`, and the margin is MARGIN_FACTOR x the largest of them.
"""

from __future__ import annotations

import json

from dflash_fi.evidence import plan as P
from dflash_fi.evidence.ledger import RUNS_DIR

MARGIN_FACTOR = 2.0
CALIBRATION_PAIRS = (  # (run, baseline): both correct; they differ in one thing
    (P.NO_SPEC_GRAPHS, P.NO_SPEC),  # engine to engine: CUDA graphs or not
    (P.NO_SPEC_GRAPHS_FI_TARGET, P.NO_SPEC_GRAPHS),  # backend to backend: FlashInfer or FlashAttention target
    (P.RTX4090_NO_SPEC, P.NO_SPEC_FP8),  # backend to backend with an fp8 cache
    (P.FLASH_ATTN, P.NO_SPEC),  # upstream's reference speculation against plain decoding
    (P.FLASH_ATTN_GRAPHS, P.NO_SPEC_GRAPHS),
)
CALIBRATION_RUNS = tuple(dict.fromkeys(label for pair in CALIBRATION_PAIRS for label in pair))


def _workload(record: dict, workload: str) -> dict:
    return record if workload == "uniform" else record.get(workload) or {}


def partings(record: dict, baseline: dict, workload: str = "uniform") -> list[dict]:
    """Each request whose output differs from the baseline's: where it parts, and the baseline's gap there
    (None: at least the recorded cap, a confident token)."""
    run, base = _workload(record, workload), _workload(baseline, workload)
    out = []
    for index, (ours, theirs) in enumerate(zip(run["tokens"], base["tokens"])):
        if ours == theirs:
            continue
        position = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
        gaps = dict(map(tuple, (base.get("near_ties") or [[]] * len(base["tokens"]))[index]))
        out.append({"request": index, "position": position, "gap": gaps.get(position)})
    return out


def near_tie_verdict(record: dict, baseline: dict, margin: dict | None, workload: str = "uniform") -> tuple[bool, str]:
    """(passed, what was seen): every parting at a near-tie of the baseline, within the measured margin."""
    run, base = _workload(record, workload), _workload(baseline, workload)
    if not (run.get("tokens") and base.get("tokens")):
        return False, f"no {workload} output recorded"
    if "near_ties" not in base:
        return False, f"{baseline['label']!r} recorded no logprobs: the near-tie rule cannot be applied"
    parted = partings(record, baseline, workload)
    where = f"{len(parted)} of {len(base['tokens'])} requests parted from {baseline['label']!r}"
    if not parted:
        return True, f"identical to {baseline['label']!r} on all {len(base['tokens'])} requests"
    if margin is None:
        return False, f"{where}, and no near-tie margin is committed (run `dflash-fi near-ties --record`)"
    confident = [p for p in parted if p["gap"] is None or p["gap"] > margin["margin"]]
    gaps = [p["gap"] for p in parted if p["gap"] is not None]
    largest = f"{max(gaps):.3f}" if gaps else "-"
    detail = (f"{where}, all at near-ties" if not confident else
              f"{where}, {len(confident)} at a confident token (gap "
              + ", ".join("> cap" if p["gap"] is None else f"{p['gap']:.3f}" for p in confident[:3]) + ")")
    return not confident, f"{detail}; largest gap at a parting {largest} (margin {margin['margin']:.3f}, {margin['file']})"


def measure_margin(records: dict[str, dict]) -> dict:
    """Every parting between the calibration pairs' outputs (both workloads), and the margin derived from them."""
    pairs, gaps = [], []
    for run, baseline in CALIBRATION_PAIRS:
        for workload in ("uniform", "mixed"):
            a, b = records.get(run, {}), records.get(baseline, {})
            if not (a.get("ok") and b.get("ok") and _workload(a, workload).get("tokens")):
                continue
            parted = partings(a, b, workload)
            pairs.append({"run": run, "baseline": baseline, "workload": workload,
                          "requests": len(_workload(b, workload)["tokens"]), "parted": parted})
            gaps += [p["gap"] for p in parted]
    measured = [g for g in gaps if g is not None]
    return {
        "rule": f"margin = {MARGIN_FACTOR} x the largest gap (nats, baseline's top-2) at a parting of correct pairs",
        "pairs": pairs, "partings": len(gaps), "partings_at_confident_tokens": gaps.count(None),
        "largest_gap": max(measured) if measured else None,
        "margin": MARGIN_FACTOR * max(measured) if measured else None,
    }


def committed_margin(runs_dir=RUNS_DIR) -> dict | None:
    """The newest committed near-tie margin measurement ({"margin", "file", ...}), or None."""
    files = sorted(runs_dir.glob("*.near-tie-margin*.json"))
    if not files:
        return None
    newest = max(files, key=lambda f: json.loads(f.read_text())["finished_at"])
    measured = json.loads(newest.read_text())
    return {**measured, "file": newest.name} if measured.get("margin") is not None else None



def run_calibration(record: bool = False, out=None, runs_dir=RUNS_DIR, print_fn=print) -> dict:
    """`dflash-fi near-ties`: run the calibration pairs' engines (the walkthrough's own specs) on this GPU and
    measure the margin; with `record`, append the engines to the ledger and write the measurement to runs/."""
    import time
    from pathlib import Path

    from dflash_fi.engine.pool import run_engines, share_gpus
    from dflash_fi.errors import BadInput
    from dflash_fi.evidence.ledger import append_record, gpu_slug, ledger_path
    from dflash_fi.stack import git_commit, require_gpu, run_context

    gpu = require_gpu("dflash-fi near-ties")
    name = f"{gpu_slug(gpu.name)}.near-tie-margin-{(git_commit() or 'unknown')[:7]}.json"
    path = Path(out) if out else (Path(runs_dir) if record else Path("artifacts")) / name
    if record and path.exists():
        raise BadInput(f"{path} is already recorded and runs/ is append-only: give --out for a new file")
    specs = [s for s in P.walkthrough_plan() if s.label in CALIBRATION_RUNS]
    calibration_id = time.strftime("%Y%m%dT%H%M%S")
    for spec in specs:
        spec.extra = {"near_tie_calibration": calibration_id}
    ledger = ledger_path(gpu.name, runs_dir)
    records = run_engines(specs, share_gpus(specs), f"dflash-fi near-ties (id {calibration_id})",
                          on_record=(lambda r: append_record(ledger, r)) if record else None, print_fn=print_fn)
    measured = {**measure_margin(records), "gpu": gpu.name, "compute_capability": gpu.sm,
                "calibration_id": calibration_id, **run_context()}
    print_fn(f"{measured['partings']} partings between correct pairs, largest gap {measured['largest_gap']}, "
             f"{measured['partings_at_confident_tokens']} at a confident token; margin {measured['margin']}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(measured, indent=1) + "\n")
    print_fn(f"written: {path}")
    return measured
