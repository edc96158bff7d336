"""The engine benchmark on the CPU: its plan, engines taking turns for real (processes, sockets, pauses), and what
its rounds say (paired intervals, the A/A pair, targets met, missed or unresolved). The engine process is
`dflash_fi.lab.engine_double`: the timings themselves exist only on a GPU."""

import json
import os
from dataclasses import replace

import pytest

from dflash_fi.bench.e2e import e2e_plan, flash_attn_draft, flashinfer_draft, write_shape_models
from dflash_fi.bench.stats import AtLeast, AtMost, Verdict, median_estimate, round_to_round
from dflash_fi.bench.turns import (Metric, Target, Turns, build_table, builds_per_step, ratio, targets, targets_table, turns_of,
                                   turns_table)
from dflash_fi.engine.identity import Pair, RunId
from dflash_fi.engine.records import (BatchRun, BuildKey, BuildTiming, EngineRecord, GenerateResult, Phase,
                                      Provenance, Round, StepTimes)
from dflash_fi.engine.spec import BenchPlan, RunSpec


def test_the_plan_has_an_aa_pair_and_every_engine_validates():
    specs = e2e_plan()
    runs = [s.run for s in specs]
    assert len(set(runs)) == len(runs)
    for pair in Pair.EMBEDDED, Pair.QWEN3_4B_SHAPE:
        assert {flash_attn_draft(pair), flash_attn_draft(pair, replica=1), flashinfer_draft(pair)} <= set(runs)
    assert all(s.run.cuda_graphs and s.kv_cache_memory_bytes and s.bench for s in specs)  # reserved KV: side by side
    for spec in specs:
        spec.validate()


def test_the_qwen3_4b_shape_is_written_as_configs_only(tmp_path):
    write_shape_models(tmp_path)
    target = json.loads((tmp_path / "target" / "config.json").read_text())
    drafter = json.loads((tmp_path / "drafter" / "config.json").read_text())
    assert (target["num_hidden_layers"], target["hidden_size"], target["num_attention_heads"],
            target["num_key_value_heads"], target["head_dim"]) == (36, 2560, 32, 8, 128)
    assert drafter["dflash_config"]["target_layer_ids"] == [1, 9, 17, 25, 33] and drafter["block_size"] == 16
    assert not list(tmp_path.rglob("*.safetensors"))


def test_engines_take_turns_idle_ones_are_stopped_and_a_failed_start_is_recorded():
    """Real processes and sockets. Each double keeps the CPU busy after its turn, as a free-running idle engine can:
    in round 1 (nobody stopped) the working engine's turn sees it; from round 2 on the idle engines are stopped."""
    from dflash_fi.engine.server import run_in_turns
    from dflash_fi.lab.engine_double import BUSY_S, FAIL, ROUND_S, TOKENS_PER_S

    a, b, broken = (RunId(step=s, cuda_graphs=True) for s in (5, 6, 7))
    env = {a: {TOKENS_PER_S: "100", ROUND_S: "0.2", BUSY_S: "0.5"}, b: {TOKENS_PER_S: "50", ROUND_S: "0.2"},
           broken: {FAIL: "start"}}
    specs = [RunSpec(run, num_prompts=2, bench=BenchPlan((1, 2))) for run in (a, b, broken)]
    lines = []
    records = run_in_turns(specs, rounds=3, command="test", start_timeout_s=60, print_fn=lines.append,
                           module="dflash_fi.lab.engine_double", env_of=lambda spec: env[spec.run])
    assert [r.index for r in records[a].rounds] == [1, 2, 3] and records[a].ok
    assert [[x.batch for x in r.batches] for r in records[a].rounds] == [[1, 2]] * 3  # each round, every batch
    assert records[b].rounds[0].batches[1].tokens_per_s == 100.0
    assert records[broken].ok is False and records[broken].failure.phase is Phase.PROCESS
    assert len([line for line in lines if line.strip().startswith("round")]) == 12  # 2 engines x 2 batches x 3 rounds
    busy_neighbour = {r.index: r.others_cpu_s for r in records[b].rounds}  # a spins while b works
    assert busy_neighbour[1] > 0.1 and busy_neighbour[2] < 0.05 and busy_neighbour[3] < 0.05
    turn_cpus = [x.cpu for run in (a, b) for r in records[run].rounds for x in r.batches]
    assert len(turn_cpus) == 12 and all(c.cpu in os.sched_getaffinity(0) for c in turn_cpus)
    on = {(run, r.index, x.batch): x.cpu.cpu for run in (a, b) for r in records[run].rounds for x in r.batches}
    assert all(on[a, i, batch] == on[b, i, batch] for _, i, batch in on)  # a round's engines share its vCPU
    assert EngineRecord.from_json(json.loads(json.dumps(records[a].to_json()))) == records[a]  # the vCPUs kept


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to hold threads apart")
def test_a_turns_main_thread_is_held_on_the_rounds_vcpu_and_its_other_threads_on_the_rest():
    import subprocess
    import sys

    from dflash_fi.engine.server import process_tree
    from dflash_fi.engine.vcpus import FastestVcpu, threads

    code = "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); print(1, flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        child.stdout.readline()  # its second thread is up
        vcpus = FastestVcpu()
        chosen = vcpus.choose()
        vcpus.before(child.pid, process_tree(child.pid))
        main, others = child.pid, [t for t in threads(child.pid) if t != child.pid]
        held = vcpus.after()
        assert os.sched_getaffinity(main) == {held.cpu} and others
        assert all(os.sched_getaffinity(t) == vcpus.cpus - {held.cpu} for t in others)
        assert held.cpu == chosen and held.loop_ms > 0 and held.others_median_loop_ms > 0 and held.loop_ms_after > 0
        assert os.sched_getaffinity(0) == vcpus.cpus  # the parent's own affinity is given back
    finally:
        child.kill()
        child.wait()


def test_turns_compare_a_pairs_engines_seconds_apart_in_alternating_order():
    from dflash_fi.engine.server import schedule

    embedded = [RunSpec(run, num_prompts=8, bench=BenchPlan((1, 8))) for run in
                (flash_attn_draft(Pair.EMBEDDED), flash_attn_draft(Pair.EMBEDDED, 1), flashinfer_draft(Pair.EMBEDDED))]
    shape = [RunSpec(replace(run, pair=Pair.QWEN3_4B_SHAPE), num_prompts=8, bench=BenchPlan((1,)))
             for run in (flash_attn_draft(Pair.EMBEDDED), flashinfer_draft(Pair.EMBEDDED))]
    specs = [embedded[0], shape[0], embedded[1], shape[1], embedded[2]]
    # per pair and batch size, its rounds back to back; each round the pair's engines, forward then backward
    assert schedule(specs, 2) == [(1, 1, [0, 2, 4]), (2, 1, [4, 2, 0]), (1, 8, [0, 2, 4]), (2, 8, [4, 2, 0]),
                                  (1, 1, [1, 3]), (2, 1, [3, 1])]


def test_the_fa_draft_sits_between_its_aa_twin_and_the_final_draft_in_every_turn_order():
    from dflash_fi.bench.e2e import bench_runs

    for pair in Pair.EMBEDDED, Pair.QWEN3_4B_SHAPE:
        order = list(bench_runs(pair))
        fa = order.index(flash_attn_draft(pair))
        assert {order[fa - 1], order[fa + 1]} == {flash_attn_draft(pair, 1), flashinfer_draft(pair)}


def test_a_batch1_turn_decodes_one_prompt_each_in_both_turn_orders():
    from dflash_fi.engine import generate as g

    spec = RunSpec(flash_attn_draft(Pair.EMBEDDED), num_prompts=8, max_new_tokens=4, bench=BenchPlan((1,), 2))
    decoded = []
    original = g.generate
    g.generate = lambda llm, requests, *a, **k: decoded.append([p for p, _ in requests]) or GenerateResult(
        1, 0.1, 10.0, 4.0, "x")
    try:
        for index in range(1, 6):
            g.benchmark_batch(None, ["p0", "p1", "p2"], spec, 1, warm_up=False, round_index=index)
        g.benchmark_batch(None, ["p0", "p1", "p2"], spec, 1, warm_up=False)
    finally:
        g.generate = original
    assert decoded == [["p0"], ["p0"], ["p1"], ["p1"], ["p0"], ["p0"], ["p1"]]


def test_a_median_estimate_lets_one_off_round_count_as_one():
    steady = [0.99, 1.0, 0.98, 1.01, 0.99, 1.0, 0.98, 1.0]
    e = median_estimate(steady + [0.5])  # one round whose host slowed between the two turns
    assert 0.98 <= e.low and e.high <= 1.0 and e.value == pytest.approx(0.99)
    assert round_to_round([100.0, 101.0, 99.99, 150.0]) == (pytest.approx(0.01), pytest.approx(0.5001, abs=1e-4))
    assert round_to_round([1.0]) is None


def generate(tps: float, step_ms: float, build_s: float = 0.001) -> GenerateResult:
    # 100 steps at step_ms each: tokens/s at the median step is tps too
    return GenerateResult(num_requests=1, generate_s=step_ms / 10, output_tokens_per_s=tps, steps=100.0, tokens_sha256="x",
                          step_times=StepTimes(100, step_ms, step_ms, step_ms),
                          builds=(BuildTiming(BuildKey("draft step", "FLASHINFER", 2), 100, build_s, 16, 0),))


def engine(run: RunId, per_round: list[tuple[float, float, float]]) -> EngineRecord:
    """A benchmark engine's record: (tokens/s, step ms, host build s) per round; round 1 is the warm-up."""
    rounds = tuple(Round(i, tuple(BatchRun(b, (generate(tps * b, ms, s),)) for b in (1, 8)))
                   for i, (tps, ms, s) in enumerate(per_round, 1))
    return EngineRecord(RunSpec(run, num_prompts=8, bench=BenchPlan((1, 8))), True, rounds=rounds,
                        provenance=Provenance("GPU", "9.0", {}, "abc", "test", "2026-12-01T00:00:00Z"))


def turns(final_ratios: list[float], final_build_s: float = 0.001) -> Turns:
    fa = [(1000.0, 2.0, 0.001)] * (len(final_ratios) + 1)
    aa = [(1000.0 * (1 + 0.005 * (-1) ** i), 2.0, 0.001) for i in range(len(final_ratios) + 1)]
    final = [(1000.0, 2.0, final_build_s)] + [(1000.0 * r, 2.0 / r, final_build_s) for r in final_ratios]
    engines = {r: engine(r, rows) for r, rows in ((flash_attn_draft(Pair.EMBEDDED), fa),
                                                  (flash_attn_draft(Pair.EMBEDDED, 1), aa),
                                                  (flashinfer_draft(Pair.EMBEDDED), final))}
    return Turns(engines, 1, "gpu.bench-turns-abc.json", "GPU", "9.0", "abc", "2026-12-01T00:00:00Z")


def test_a_ratio_is_estimated_over_measured_rounds_with_an_interval():
    t = turns([0.95, 0.99, 1.02, 0.98, 1.00])
    e = ratio(t, flashinfer_draft(Pair.EMBEDDED), flash_attn_draft(Pair.EMBEDDED), 8)
    assert e.rounds == pytest.approx((0.95, 0.99, 1.02, 0.98, 1.00))  # the warm-up round left out
    assert e.low <= e.value <= e.high and e.low < 0.99 < e.high
    steady = median_estimate([0.99] * 5)
    assert steady.low == pytest.approx(steady.high) == pytest.approx(0.99)  # no noise, no width
    d = median_estimate([0.1, 0.2, 0.3])
    assert d.value == pytest.approx(0.2) and d.low <= 0.2 <= d.high


def test_a_target_is_met_missed_or_unresolved_by_its_interval():
    at_least = AtLeast(0.97, floor=0.95)
    assert at_least.judge(median_estimate([0.98, 0.99, 0.985, 0.99, 0.98])) is Verdict.MET
    assert at_least.judge(median_estimate([0.90, 0.91, 0.92, 0.90, 0.91])) is Verdict.MISSED
    assert at_least.judge(median_estimate([0.90, 1.05, 0.93, 1.02, 0.99])) is Verdict.UNRESOLVED
    e = median_estimate([0.99, 0.91, 1.01, 1.0, 0.97])
    assert e.value >= 0.97 and e.low < 0.95 and at_least.judge(e) is Verdict.UNRESOLVED  # low end under the floor
    at_most = AtMost(0.05)
    assert at_most.judge(median_estimate([0.01, 0.02, 0.03])) is Verdict.MET
    assert at_most.judge(median_estimate([0.5, 0.6, 0.7])) is Verdict.MISSED
    assert at_most.judge(median_estimate([0.0, 0.1, 0.04, 0.06])) is Verdict.UNRESOLVED
    assert at_most.judge(None) is Verdict.NOT_MEASURED
    no_worse = AtMost(0.0, ceiling=0.02)  # the build target: no slower at the median, at most +0.02 at the high end
    assert no_worse.judge(median_estimate([-0.01, 0.0, 0.005, -0.002, 0.0])) is Verdict.MET
    assert no_worse.judge(median_estimate([-0.01, 0.0, 0.05, -0.002, 0.03])) is Verdict.UNRESOLVED  # high end over
    assert no_worse.judge(median_estimate([0.01, 0.02, 0.015, 0.012, 0.018])) is Verdict.MISSED


def test_the_targets_read_the_results_file_as_written():
    good, slow = turns([1.01, 1.005, 1.01, 1.0, 1.01]), turns([0.90, 0.91, 0.92, 0.90, 0.91], final_build_s=0.1)
    assert {t.verdict for t in targets(good)} == {Verdict.MET}
    found = {(t.what, t.batch): t for t in targets(slow)}
    assert found[(Metric.TOKENS, 8)].verdict is Verdict.MISSED and found[(Metric.HOST_BUILD, 1)].verdict is Verdict.MISSED
    aa = found[(Metric.TOKENS, 8)].aa
    assert aa.low <= 1.0 <= aa.high + 0.01  # the A/A pair: nothing differs, the interval sits at 1
    data = {"schema": 2, "warm_up_rounds": 1, "gpu": "GPU", "compute_capability": "9.0", "git_commit": "abc",
            "finished_at": "2026-12-01T00:00:00Z", "engines": [e.to_json() for e in slow.engines.values()]}
    again = turns_of(json.loads(json.dumps(data)), "f.json")
    assert [t.verdict for t in targets(again)] == [t.verdict for t in targets(slow)]
    assert [Target.from_json(t.to_json()).verdict for t in targets(slow)] == [t.verdict for t in targets(slow)]
    table = targets_table(targets(slow))
    assert "| embedded, 8 | tokens/s at the median step at least 1.0x (low end 0.97x) |" in table and "| missed |" in table
    assert "| embedded, 1 | host build per step at most +0.00 ms (high end +0.02 ms) |" in table
    # the A/A engine's tokens/s moves 1% between rounds, its step time not; the final draft's step time moves
    assert "| 1 | 1000 (0.0%, 0.0%) | 995 (0.0%, 0.0%) | 1010 (0.7%, 1.0%) |" in turns_table(good, Pair.EMBEDDED)
    assert "| draft step, FLASHINFER (2 layers) | 1.00 | 0.010 | 2.000 |" in build_table(good, Pair.EMBEDDED, 1)


def test_builds_per_step_name_the_runners_builders_first_then_the_drafters():
    runner, drafter = BuildKey("target step", "FLASH_ATTN", 4), BuildKey("draft step", "FLASHINFER", 2)
    result = GenerateResult(num_requests=1, generate_s=1.0, output_tokens_per_s=100.0, steps=50.0, tokens_sha256="x",
                            step_times=StepTimes(50, 2.0, 2.0, 2.0),
                            builds=(BuildTiming(drafter, 50, 0.01, 16, 0), BuildTiming(runner, 100, 0.02, 16, 0)))
    run = flashinfer_draft(Pair.EMBEDDED)
    rounds = tuple(Round(i, (BatchRun(1, (result,)),)) for i in (1, 2))
    record = EngineRecord(RunSpec(run, num_prompts=1, bench=BenchPlan((1,))), True, rounds=rounds)
    t = Turns({run: record}, 1, "f.json", "GPU", "9.0", "abc", "now")
    assert builds_per_step(t, run, 1) == {runner: (2.0, pytest.approx(0.4)), drafter: (1.0, pytest.approx(0.2))}
    assert build_table(t, Pair.EMBEDDED, 1, runs=[run]).count("\n") == 3


def test_tokens_per_s_at_the_median_step_leaves_the_stalls_out():
    """100 steps, 1000 tokens: 2 ms typical steps, but the generate took 0.5 s (a prefill, a stall): 2000 tokens/s
    over the whole generate, 5000 at the median step."""
    g = GenerateResult(num_requests=1, generate_s=0.5, output_tokens_per_s=2000.0, steps=100.0, tokens_sha256="x",
                       step_times=StepTimes(99, 2.0, 1.9, 2.5))
    assert g.decode_tokens_per_s == pytest.approx(5000.0)
    assert BatchRun(1, (g, g)).decode_tokens_per_s == pytest.approx(5000.0)
    assert GenerateResult(1, 0.5, 2000.0, 100.0, "x").decode_tokens_per_s == 2000.0  # no intervals: whole generate
