"""The benchmark commands' results: with --record, their sections of the evidence summary; else kept under
artifacts/evidence/."""

from __future__ import annotations

import contextlib
import sys
import time

import dflash_fi.summary as S


def _section(section, data: dict, rows: dict | None, started: float) -> None:
    from dflash_fi.stack import run_context

    print(f"evidence summary ({section.key}): {S.write(section, data, S.provenance(run_context(), time.time() - started), rows)}")


def bench(what: str, quick: bool, models: str, rounds: int, record: bool) -> int:
    """`dflash-fi bench`: the kernel or engine benchmark on this GPU, its section of the summary with `record`."""
    from dflash_fi.stack import require_gpu

    if what == "e2e":
        from dflash_fi.bench.e2e import require_rounds

        require_rounds(rounds)  # before the GPU: bad input is refused first
    gpu, started = require_gpu(f"dflash-fi bench {what}"), time.time()
    if what == "kernels":
        from dflash_fi.bench.kernels import run_kernel_bench

        results = run_kernel_bench(quick=quick)
        if record:
            _section(S.Section.BENCH_KERNELS, {"rows": len(results["rows"])}, results, started)
        else:
            S.keep(f"{S.gpu_slug(gpu.name)}.bench-kernels.json", results)
        return 0
    from dflash_fi.bench.e2e import run_e2e_bench
    from dflash_fi.bench.turns import targets, targets_table, turns_of, turns_table
    from dflash_fi.engine.identity import Pair

    pairs = {"all": (Pair.EMBEDDED, Pair.QWEN3_4B_SHAPE), "embedded": (Pair.EMBEDDED,),
             "shape": (Pair.QWEN3_4B_SHAPE,)}[models]
    with contextlib.redirect_stdout(tee := S.Tee(sys.stdout)):  # its transcript is kept beside the results
        results = run_e2e_bench(quick=quick, pairs=pairs, rounds=rounds)
        turns = turns_of(results, "this run")
        for pair in turns.pairs():
            print(f"\n{pair.value}:\n{turns_table(turns, pair)}")
        judged = targets(turns)
        print(f"\n{targets_table(judged)}")
    S.keep(f"{S.gpu_slug(gpu.name)}.bench-e2e.txt", tee.kept.getvalue())
    if record:
        _section(S.Section.BENCH_E2E, {"warm_up_rounds": results["warm_up_rounds"],
                                       "targets": [t.to_json() for t in judged]}, results, started)
    else:
        S.keep(f"{S.gpu_slug(gpu.name)}.bench-e2e.json", results)
    return 0


def profile(record: bool) -> int:
    """`dflash-fi profile`: where the builds spend host time, its section of the summary with `record`."""
    from dflash_fi.bench.profile import run_profiles
    from dflash_fi.stack import require_gpu

    gpu, started = require_gpu("dflash-fi profile"), time.time()
    results = run_profiles()
    if record:
        _section(S.Section.PROFILE, {"engines": len(results["engines"])}, results, started)
    else:
        S.keep(f"{S.gpu_slug(gpu.name)}.build-profile.json", results)
    return 0
