"""A notebook's engines, run live on the GPU: what `dflash_fi.notebook`'s session calls, and only on a GPU (the
`LLM(...)` calls a notebook shows, on any machine, are `plan.engine_calls`).

A notebook's live cells run small engines (several at once where the GPU has room) and check them with the
walkthrough's own check functions and tolerances, against a reference-decoder run on the same prompts. The engines
start in the background in the first cell, while the notebook's CPU cells run, and the live cell collects them. A live
cell prints only what every GPU prints alike (outcomes, in the notebook's order). Nothing here runs at import.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from dflash_fi.records.spec import LIVE_NEW_TOKENS, LIVE_PROMPTS


def start(name: str, runs: list) -> Future:
    """The engines of the walkthrough's `runs` (RunIds) and the reference decoder on their prompts, started now in
    the background: a Future of (records by RunId, reference)."""
    pool = ThreadPoolExecutor(1, thread_name_prefix=f"dflash-fi-{name}")
    future = pool.submit(_run_engines, name, list(runs))
    pool.shutdown(wait=False)  # the run goes on; the future holds its result
    return future


def _run_engines(name: str, runs: list) -> tuple[dict, dict]:
    from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_TARGET, load_prompts
    from dflash_fi.proof.engine.pool import run_engines, share_gpus
    from dflash_fi.proof.evidence.plan import expected_to_fail, live_spec
    from dflash_fi.reference.evaluate import evaluate_pair

    specs, slots = share_gpus([live_spec(run, LIVE_PROMPTS, LIVE_NEW_TOKENS) for run in runs])
    with ThreadPoolExecutor(1) as pool:  # the reference decodes on this GPU while the engines start
        reference = pool.submit(evaluate_pair, DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=LIVE_PROMPTS),
                                LIVE_NEW_TOKENS, device="cuda")
        records = {r.run: r for r in run_engines(  # completion order and times differ from run to run: not printed
            specs, slots, f"notebook {name}", expected_to_fail=expected_to_fail, print_fn=lambda line: None)}
        return records, reference.result()


def collect(future: Future, runs: list) -> tuple[dict, dict]:
    """The started engines, once finished; one line per run, in the order given: its outcome, and whether that is
    the expected one."""
    from dflash_fi.proof.evidence.plan import expected_to_fail
    from dflash_fi.records.runs import label

    records, reference = future.result()
    for run in runs:
        expected, record = not expected_to_fail(run), records[run]
        verdict = "as expected" if record.ok == expected else f"UNEXPECTED (expected: {'runs' if expected else 'fails'})"
        print(f"{label(run)}: {live_outcome(record)}, {verdict}")
    return records, reference


def judge(records: dict, reference: dict, margin: dict | None) -> list:
    """The walkthrough's checks that these live records can answer, judged now (`margin`: the pass's near-tie
    margin, as the walkthrough judges; live engines hold no calibration pairs)."""
    from dflash_fi.proof.evidence.checks import check_records, checks

    wanted = {c.id for c in checks() if c.missing(records) is None}
    margin = margin if margin and margin.get("margin") is not None else None
    return [c for c in check_records(records, reference, margin) if c.id in wanted]


def live_outcome(record) -> str:
    """'runs' or 'fails: ValueError at selection': the part of an outcome every GPU shows alike."""
    from dflash_fi.records.engine import outcome

    return "runs" if record.ok else f"fails: {outcome(record)}"
