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
upstream's reference, against plain decoding) are among every walkthrough's own engines, and the margin the
walkthrough judges with is MARGIN_FACTOR x the largest gap at which they parted (`measure_margin`), kept in the
evidence summary beside the checks. `dflash-fi near-ties` runs the calibration pairs alone.
"""

from __future__ import annotations

from dflash_fi.engine.identity import RunId, Workload, label
from dflash_fi.engine.records import EngineRecord
from dflash_fi.evidence import plan as P

MARGIN_FACTOR = 2.0
CALIBRATION_PAIRS = (  # (run, baseline): both correct; they differ in one thing
    (P.NO_SPEC_GRAPHS, P.NO_SPEC),  # engine to engine: CUDA graphs or not
    (P.NO_SPEC_GRAPHS_FI_TARGET, P.NO_SPEC_GRAPHS),  # backend to backend: FlashInfer or FlashAttention target
    (P.RTX4090_NO_SPEC, P.NO_SPEC_FP8),  # backend to backend with an fp8 cache
    (P.FLASH_ATTN, P.NO_SPEC),  # upstream's reference speculation against plain decoding
    (P.FLASH_ATTN_GRAPHS, P.NO_SPEC_GRAPHS),
)
CALIBRATION_RUNS = tuple(dict.fromkeys(run for pair in CALIBRATION_PAIRS for run in pair))


def partings(record: EngineRecord, baseline: EngineRecord, workload: Workload = Workload.UNIFORM) -> list[dict]:
    """Each request whose output differs from the baseline's: where it parts, and the baseline's gap there
    (None: at least the recorded cap, a confident token)."""
    run, base = record.generate(workload), baseline.generate(workload)
    out = []
    for index, (ours, theirs) in enumerate(zip(run.tokens, base.tokens)):
        if ours == theirs:
            continue
        position = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
        gaps = dict(base.near_ties[index]) if base.near_ties is not None else {}
        out.append({"request": index, "position": position, "gap": gaps.get(position)})
    return out


def near_tie_verdict(record: EngineRecord, baseline: EngineRecord, margin: dict | None,
                     workload: Workload = Workload.UNIFORM) -> tuple[bool, str]:
    """(passed, what was seen): every parting at a near-tie of the baseline, within the measured margin."""
    run, base, name = record.generate(workload), baseline.generate(workload), repr(label(baseline.run))
    if not (run and run.tokens and base and base.tokens):
        return False, f"no {Workload(workload).value} output recorded"
    if base.near_ties is None:
        return False, f"{name} recorded no logprobs: the near-tie rule cannot be applied"
    parted = partings(record, baseline, workload)
    where = f"{len(parted)} of {len(base.tokens)} requests parted from {name}"
    if not parted:
        return True, f"identical to {name} on all {len(base.tokens)} requests"
    if margin is None:
        return False, f"{where}, and no near-tie margin was measured (no calibration pair parted or ran)"
    confident = [p for p in parted if p["gap"] is None or p["gap"] > margin["margin"]]
    gaps = [p["gap"] for p in parted if p["gap"] is not None]
    largest = f"{max(gaps):.3f}" if gaps else "-"
    detail = (f"{where}, all at near-ties" if not confident else
              f"{where}, {len(confident)} at a confident token (gap "
              + ", ".join("> cap" if p["gap"] is None else f"{p['gap']:.3f}" for p in confident[:3]) + ")")
    return not confident, f"{detail}; largest gap at a parting {largest} (margin {margin['margin']:.3f})"


def measure_margin(records: dict[RunId, EngineRecord]) -> dict:
    """Every parting between the calibration pairs' outputs (both workloads), and the margin derived from them."""
    pairs, gaps = [], []
    for run, baseline in CALIBRATION_PAIRS:
        for workload in Workload:
            a, b = records.get(run), records.get(baseline)
            if not (a and b and a.ok and b.ok and a.generate(workload) and b.generate(workload)):
                continue
            parted = partings(a, b, workload)
            pairs.append({"run": run.to_json(), "baseline": baseline.to_json(), "workload": workload.value,
                          "requests": len(b.generate(workload).tokens), "parted": parted})
            gaps += [p["gap"] for p in parted]
    measured = [g for g in gaps if g is not None]
    return {
        "rule": f"margin = {MARGIN_FACTOR} x the largest gap (nats, baseline's top-2) at a parting of correct pairs",
        "pairs": pairs, "partings": len(gaps), "partings_at_confident_tokens": gaps.count(None),
        "largest_gap": max(measured) if measured else None,
        "margin": MARGIN_FACTOR * max(measured) if measured else None,
    }


def run_calibration(print_fn=print) -> dict:
    """`dflash-fi near-ties`: the calibration pairs' engines alone (the walkthrough's own specs) on this GPU, and the
    margin they give; nothing is recorded (the walkthrough measures its own)."""
    from dflash_fi.engine.pool import run_engines, share_gpus
    from dflash_fi.stack import require_gpu

    require_gpu("dflash-fi near-ties")
    specs, slots = share_gpus([s for s in P.walkthrough_plan() if s.run in CALIBRATION_RUNS])
    records = {r.run: r for r in run_engines(specs, slots, "dflash-fi near-ties", print_fn=print_fn)}
    measured = measure_margin(records)
    print_fn(f"{measured['partings']} partings between correct pairs, largest gap {measured['largest_gap']}, "
             f"{measured['partings_at_confident_tokens']} at a confident token; margin {measured['margin']}")
    return measured
