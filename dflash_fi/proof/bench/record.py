"""The benchmark commands' results: with --record, their sections of the evidence summary; else kept under
artifacts/evidence/."""

from __future__ import annotations

import contextlib
import sys
import time

import dflash_fi.records.summary as S


def _section(section, data: dict, rows: dict | None, started: float) -> None:
    from dflash_fi.freshness import provenance
    from dflash_fi.stack import run_context

    made = provenance(section, run_context(), time.time() - started)  # and what the section ran
    print(f"evidence summary ({section.key}): {S.write(section, data, made, rows)}")


def bench(what: str, quick: bool, models: str, rounds: int, record: bool) -> int:
    """`dflash-fi bench`: the kernel or engine benchmark on this GPU, its section of the summary with `record`."""
    from dflash_fi.stack import require_gpu

    if what == "e2e":
        from dflash_fi.proof.bench.e2e import require_rounds

        require_rounds(rounds)  # before the GPU: bad input is refused first
    gpu, started = require_gpu(f"dflash-fi bench {what}"), time.time()
    if what == "kernels":
        from dflash_fi.proof.bench.kernels import run_kernel_bench

        results = run_kernel_bench(quick=quick)
        if record:
            _section(S.Section.BENCH_KERNELS, {"rows": len(results["rows"])}, results, started)
        else:
            S.keep(f"{S.gpu_slug(gpu.name)}.bench-kernels.json", results)
        return 0
    from dflash_fi.proof.bench.e2e import run_e2e_bench
    from dflash_fi.proof.bench.turns import targets, targets_table, turns_of, turns_table
    from dflash_fi.records.runs import Pair

    pairs = {"all": (Pair.EMBEDDED, Pair.QWEN3_4B_SHAPE), "embedded": (Pair.EMBEDDED,),
             "shape": (Pair.QWEN3_4B_SHAPE,)}[models]
    with contextlib.redirect_stdout(tee := S.Tee(sys.stdout)):  # its transcript is kept beside the results
        results = run_e2e_bench(quick=quick, pairs=pairs, rounds=rounds)
        turns = turns_of(results, "this run")
        for pair in turns.pairs():
            print(f"\n{pair.value}:\n{turns_table(turns, pair)}")
        judged = targets(turns)
        print(f"\n{targets_table(judged)}")
        draft = draft_cost_data(turns, rounds)
    S.keep(f"{S.gpu_slug(gpu.name)}.bench-e2e.txt", tee.kept.getvalue())
    if record:
        _section(S.Section.BENCH_E2E, {"warm_up_rounds": results["warm_up_rounds"],
                                       "targets": [t.to_json() for t in judged], **draft}, results, started)
    else:
        S.keep(f"{S.gpu_slug(gpu.name)}.bench-e2e.json", results)
    return 0


def draft_cost_data(turns, rounds: int) -> dict:
    """The draft's cost and the RTX 4090 path's gain (`draft_cost.section_data`), with the kernel verdicts where this
    GPU's kernel benchmark is in the summary, printed as tables. A failure here is printed and recorded as such: it
    must not cost the engine rounds already measured."""
    import traceback

    from dflash_fi.proof.bench import draft_cost, draft_report

    try:
        from dflash_fi.proof.bench.results import kernel_rows, latest_kernels

        kernels = kernel_rows(latest_kernels())
    except Exception as exc:  # no kernel benchmark in the summary: the kernels are not judged
        kernels = ()
        print(f"(no kernel verdicts: {type(exc).__name__}: {str(exc)[:200]})")
    try:
        data = draft_cost.section_data(turns, kernels, rounds)
        costs = [draft_cost.DraftCost.from_json(c) for c in data["draft_cost"]]
        gains = [draft_cost.PathGain.from_json(g) for g in data["rtx4090"]]
        print(f"\nThe draft's cost per decoding step:\n{draft_report.draft_cost_table(costs)}")
        print(f"\nIts kernel:\n{draft_report.kernel_share_table(costs)}")
        print(f"\nThe RTX 4090 path:\n{draft_report.gain_table(gains)}")
    except Exception:
        traceback.print_exc()
        return {"draft_cost_error": traceback.format_exc()[-2000:]}
    return data


def profile(record: bool) -> int:
    """`dflash-fi profile`: where the builds spend host time, its section of the summary with `record`."""
    from dflash_fi.proof.bench.profile import run_profiles
    from dflash_fi.stack import require_gpu

    gpu, started = require_gpu("dflash-fi profile"), time.time()
    results = run_profiles()
    if record:
        _section(S.Section.PROFILE, {"engines": len(results["engines"])}, results, started)
    else:
        S.keep(f"{S.gpu_slug(gpu.name)}.build-profile.json", results)
    return 0
