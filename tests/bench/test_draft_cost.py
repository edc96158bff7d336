"""The draft's cost and the RTX 4090 path's gain on the CPU: the engine benchmark's real plan taking turns for real
with engine doubles (`dflash_fi.lab.engine_double`), what its rounds say (paired differences, the A/A bound, the
build target, the gains), the summary's data and its reader, the kernel verdicts, and the instruments that record the
draft's route and time its layers (CUDA events stood in for). The times themselves exist only on a GPU."""

import json
import time
from types import SimpleNamespace as NS

import pytest

from dflash_fi.lab.engine_double import DRAFT_MS, ROUTE, TOKENS_PER_S
from dflash_fi.proof.bench import draft_cost as D
from dflash_fi.proof.bench import draft_report as R
from dflash_fi.proof.bench.e2e import draft_cost_runs, e2e_plan, rtx4090_runs
from dflash_fi.proof.bench.stats import Outcome
from dflash_fi.proof.bench.turns import Turns
from dflash_fi.records.runs import Pair

FA_MS, FINAL_MS = 0.05, 0.06


def double_env(run) -> dict:
    """Per engine: the FLASH_ATTN drafts alike, the final draft 0.01 ms slower (x (1 + batch/32)) on XQA at the
    embedded pair and on the kept-plan fa2 wrapper at the Qwen3-4B shape; the RTX 4090 path at 100/200/210 tokens/s."""
    plain, step4, final_4090 = rtx4090_runs()
    tokens = {plain: "100", step4: "200", final_4090: "210"}
    if run in tokens:  # FP8 caches stay on the fa2 wrapper at every step
        return {TOKENS_PER_S: tokens[run], ROUTE: "FIPrefill:fa2"}
    if run.draft_backend == "FLASH_ATTN":
        return {DRAFT_MS: str(FA_MS), ROUTE: "FlashAttentionMetadata"}
    return {DRAFT_MS: str(FINAL_MS), ROUTE: "XQADraft" if run.pair is Pair.EMBEDDED else "FIPrefill:fa2"}


@pytest.fixture(scope="module")
def turns(tmp_path_factory) -> Turns:
    from dflash_fi.proof.engine.server import run_in_turns

    specs = e2e_plan(quick=True, shape_dir=tmp_path_factory.mktemp("shape"))
    records = run_in_turns(specs, rounds=3, command="test", start_timeout_s=120, print_fn=lambda line: None,
                           module="dflash_fi.lab.engine_double", env_of=lambda spec: double_env(spec.run))
    assert all(r.ok for r in records.values())
    return Turns(records, 1, "f.json", "GPU", "9.0", "abc", "now")


def test_only_the_draft_cost_engines_time_their_draft(tmp_path):
    timed = {s.run for s in e2e_plan(shape_dir=tmp_path) if s.bench.time_draft}
    assert timed == set(draft_cost_runs(Pair.EMBEDDED)) | set(draft_cost_runs(Pair.QWEN3_4B_SHAPE))
    plain, step4, final = rtx4090_runs()
    assert not plain.speculative and (step4.step, step4.draft_backend) == (4, None) and final.draft_backend is None
    assert all(r.kv_cache_dtype == "fp8" and r.flash_attn_version == 2 and r.cuda_graphs for r in rtx4090_runs())


def test_the_draft_cost_is_paired_by_round_with_its_aa_pair(turns):
    costs = {(c.pair, c.batch): c for c in D.draft_costs(turns)}
    assert set(costs) == {(p, b) for p in Pair if p is not Pair.CUSTOM for b in (1, 8)}
    for (pair, batch), c in costs.items():
        scale = 1 + batch / 32
        assert c.flash_attn.attention_ms == pytest.approx(FA_MS * scale)
        assert c.attention.value == pytest.approx((FINAL_MS - FA_MS) * scale) and c.attention.low <= c.attention.high
        assert c.attention_aa.value == 0 and c.aa_within and c.aa_bound_ms == pytest.approx(0.005)
        assert c.build.value == 0 and c.build_outcome is Outcome.MET  # the doubles build alike
        assert c.flash_attn.kernel == "vllm-flash-attn"
        assert c.final.kernel == ("flashinfer-xqa" if pair is Pair.EMBEDDED else "dflash-fi-final")


def test_the_rtx4090_gain_is_over_no_speculation_per_batch(turns):
    gains = D.path_gains(turns)
    assert [g.batch for g in gains] == [1, 8]
    for g in gains:
        assert g.final_gain.value == pytest.approx(2.1) and g.step4_gain.value == pytest.approx(2.0)
        assert g.final_over_step4.value == pytest.approx(1.05) and g.no_speculation == pytest.approx(100 * g.batch)
        assert g.tau_step4 == pytest.approx(2.0)  # the double accepts 10 of 10 drafts: 1 + 10/10
        # routes recorded, nothing timed: the PR's draft on FlashInfer's own fa2 wrapper, the final one with its plan kept
        assert (g.draft_kernel_step4, g.draft_kernel_final) == ("flashinfer-fa2", "dflash-fi-final")
    assert "| 8 | 800 | 1600 (2.00) | 1680 (2.00) | 2.00x [2.00x, 2.00x] |" in R.gain_table(gains)


def test_the_summary_keeps_what_the_reader_gives_back(turns):
    data = json.loads(json.dumps(D.section_data(turns)))
    summary = NS(entry=lambda section: NS(data={"targets": [], **data}))
    read = D.latest_draft_cost(summary)
    assert [c.to_json() for c in read.costs] == [c.to_json() for c in D.draft_costs(turns)]
    assert data["method"]["aa_share"] == 0.02 and data["method"]["warm_up_rounds"] == 1
    assert [c.attention.value for c in read.costs] == [c.attention.value for c in D.draft_costs(turns)]
    assert [g.final_gain.value for g in read.gains] == [g.final_gain.value for g in D.path_gains(turns)]
    from dflash_fi.errors import NoRecord

    with pytest.raises(NoRecord, match="no draft cost"):
        D.latest_draft_cost(NS(entry=lambda section: NS(data={"targets": []})))


def test_an_aa_interval_past_its_bound_is_said_and_a_slower_build_missed():
    from dflash_fi.proof.bench.stats import median_estimate

    assert D._within(median_estimate([-0.001, 0.002, 0.004]), 0.005)
    assert not D._within(median_estimate([-0.001, 0.002, 0.009]), 0.005)
    assert not D._within(None, 0.005)
    assert D.BUILD_TARGET.judge(median_estimate([0.01, 0.012, 0.011])) is Outcome.MISSED
    assert D.BUILD_TARGET.judge(median_estimate([0.0, 0.001, 0.004])) is Outcome.UNRESOLVED  # median above 0
    assert D.BUILD_TARGET.judge(median_estimate([-0.003, -0.001, -0.002])) is Outcome.MET


def kernel_row(kernel, ms, batch=8, heads=(32, 8), context=512, **extra):
    return {"kernel": kernel, "kv_dtype": "bf16", "batch": batch, "context": context, "num_qo_heads": heads[0],
            "num_kv_heads": heads[1], "median_ms": ms, "share_of_copy": 0.5, **extra}


def test_the_final_drafts_kernel_is_judged_against_the_fastest_flashinfer_kernel_a_draft_can_run(turns):
    rows = [kernel_row("dflash-fi-final", 0.0240), kernel_row("flashinfer-xqa", 0.0244),
            kernel_row("dflash-fi-final-graph", 0.010),  # no draft runs it: not a candidate
            kernel_row("vllm-flash-attn", 0.0125), kernel_row("flashinfer-fa2", 0.0239, context=2048),
            kernel_row("flashinfer-xqa", 0.001, heads=(4, 2)), kernel_row("vllm-flash-attn", 0.001, heads=(4, 2))]
    costs = {(c.pair, c.batch): c for c in D.draft_costs(turns, rows)}
    shape = costs[(Pair.QWEN3_4B_SHAPE, 8)]
    assert (shape.num_qo_heads, shape.num_kv_heads) == (32, 8) and shape.final.kernel == "dflash-fi-final"
    assert shape.fastest_flashinfer == "dflash-fi-final" and shape.kernel_outcome is Outcome.MET
    assert {k.kernel for k in shape.kernels} == {"dflash-fi-final", "flashinfer-xqa", "dflash-fi-final-graph",
                                                "vllm-flash-attn"}  # this shape's rows only
    embedded = costs[(Pair.EMBEDDED, 8)]  # the embedded drafter's heads; XQA alone measured among FlashInfer's
    assert (embedded.num_qo_heads, embedded.num_kv_heads) == (4, 2) and embedded.kernel_outcome is Outcome.MET
    assert costs[(Pair.EMBEDDED, 1)].kernel_outcome is Outcome.NOT_MEASURED  # no batch-1 rows
    faster = rows + [kernel_row("flashinfer-fa3", 0.020)]
    assert D.kernel_verdict((32, 8), 8, "dflash-fi-final", faster)[1:] == ("flashinfer-fa3", Outcome.MISSED)
    assert D.kernel_verdict((32, 8), 8, "dflash-fi-final", [kernel_row("flashinfer-fa3", 0.0238)])[2] is (
        Outcome.NOT_MEASURED)  # the final draft's own kernel not timed there
    table = R.kernel_share_table([shape, D.draft_costs(turns, faster)[-1]])
    assert "| qwen3-4b-shape, 8 | dflash-fi-final 0.0240 ms (50%) | dflash-fi-final 0.0240 ms (50%) |" in table
    assert "| met |" in table
    assert "| embedded, 1 | flashinfer-xqa |" in R.draft_cost_table(D.draft_costs(turns))
    again = [D.DraftCost.from_json(json.loads(json.dumps(c.to_json()))) for c in costs.values()]
    assert [c.to_json() for c in again] == [c.to_json() for c in costs.values()]  # the rounds stay in the rows


def test_a_draft_builds_route_is_recorded_outside_its_timed_span():
    from dflash_fi.proof.engine.draft_timing import metadata_route

    class XQADraft: ...
    class FIPrefill:
        def __init__(self):
            self.wrapper = NS(_backend="fa2")
    class FlashAttentionMetadata: ...
    assert metadata_route(NS(prefill=XQADraft())) == ("XQADraft", None)
    assert metadata_route(NS(prefill=FIPrefill())) == ("FIPrefill", "fa2")
    assert metadata_route(FlashAttentionMetadata()) == ("FlashAttentionMetadata", None)
    from dflash_fi.proof.bench.routes import ROUTE_KERNELS

    assert all(key in ROUTE_KERNELS for key in (("XQADraft", None), ("FIPrefill", "fa2"),
                                                  ("FlashAttentionMetadata", None)))


class FakeEvent:
    clock = [0.0]

    def __init__(self, enable_timing):
        self.at = None

    def record(self):
        FakeEvent.clock[0] += 1.0
        self.at = FakeEvent.clock[0]

    def elapsed_time(self, end):
        return end.at - self.at


def fake_torch(capturing=False):
    synced = []
    cuda = NS(Event=FakeEvent, is_current_stream_capturing=lambda: capturing, synchronize=lambda: synced.append(1))
    return NS(cuda=cuda), synced


def test_the_draft_layers_are_timed_per_forward_and_not_while_a_graph_is_captured():
    from dflash_fi.proof.engine import draft_timing

    calls = []
    layers = {name: NS(impl=NS(forward=lambda *a, _n=name, **k: calls.append(_n) or "out")) for name in ("d1", "d0")}
    runner = NS(drafter=NS(_draft_attn_layer_names={"d0", "d1"}),
                vllm_config=NS(compilation_config=NS(static_forward_context={**layers, "t0": NS()})),
                _draft_routes={("XQADraft", None, 32): 3})
    torch, synced = fake_torch()
    draft_timing.install(runner, torch)
    for _ in range(3):  # three draft forwards, each layer in turn
        assert layers["d0"].impl.forward("q") == "out" and layers["d1"].impl.forward("q") == "out"
    layers["d0"].impl.forward("q")  # a forward cut short: not counted
    got = draft_timing.snapshot(runner, torch)
    assert calls == ["d0", "d1"] * 3 + ["d0"] and synced == [1]
    host_us = got.pop("host_us_max")  # the host's time per layer call, from queueing the sleep to the end event
    assert got == {"layers": 2, "forwards_ms": [2.0, 2.0, 2.0], "over_lead": 0,
                   "routes": [{"metadata": "XQADraft", "wrapper_backend": None, "num_reqs": 32, "builds": 3}]}
    assert 0 < host_us < draft_timing.LEAD_US
    assert draft_timing.snapshot(runner, torch) == {"layers": 2, "forwards_ms": [], "routes": [], "host_us_max": None,
                                                   "over_lead": 0}  # reset
    slow = NS(drafter=runner.drafter, vllm_config=NS(compilation_config=NS(static_forward_context={
        n: NS(impl=NS(forward=lambda *a, **k: time.sleep(2 * draft_timing.LEAD_US / 1e6))) for n in ("d0", "d1")})))
    draft_timing.install(slow, torch)
    for name in ("d0", "d1"):
        slow.vllm_config.compilation_config.static_forward_context[name].impl.forward()
    assert draft_timing.snapshot(slow, torch)["over_lead"] == 2  # host work past the lead: counted, not hidden
    capturing, _ = fake_torch(capturing=True)
    runner2 = NS(drafter=runner.drafter, vllm_config=NS(compilation_config=NS(static_forward_context={
        n: NS(impl=NS(forward=lambda *a, **k: "out")) for n in ("d0", "d1")})))
    draft_timing.install(runner2, capturing)
    runner2.vllm_config.compilation_config.static_forward_context["d0"].impl.forward()
    assert runner2._draft_events == []  # no event recorded inside a capture


def test_the_record_keeps_the_rounds_when_the_analysis_fails(turns, monkeypatch, capsys):
    from dflash_fi.errors import NoRecord
    from dflash_fi.proof.bench import record, results

    def no_kernels(summary=None):
        raise NoRecord("no bench-kernels section")
    monkeypatch.setattr(results, "latest_kernels", no_kernels)
    data = record.draft_cost_data(turns, rounds=3)
    out = capsys.readouterr().out
    assert data["method"]["rounds"] == 3 and len(data["draft_cost"]) == 4 and len(data["rtx4090"]) == 2
    assert "(no kernel verdicts: NoRecord" in out and "The RTX 4090 path:" in out
    assert all(c["kernel_outcome"] == "NOT_MEASURED" for c in data["draft_cost"])
    monkeypatch.setattr(D, "section_data", lambda *a: 1 / 0)
    broken = record.draft_cost_data(turns, rounds=3)
    assert list(broken) == ["draft_cost_error"] and "ZeroDivisionError" in broken["draft_cost_error"]


def test_what_bench_e2e_records_is_what_notebook_08_and_the_readme_read(turns, tmp_path, monkeypatch):
    """`dflash-fi bench e2e --record` end to end on the engine doubles: its own writer into a summary, then the
    readers a pass's outputs go through (notebook 08's costs and engines, the README's line) find what it wrote."""
    import functools

    import dflash_fi.records.summary as S
    from dflash_fi import stack
    from dflash_fi.errors import NoRecord
    from dflash_fi.figures.cost_engines import recorded_engines
    from dflash_fi.figures.costs import read_costs
    from dflash_fi.proof import readme
    from dflash_fi.proof.bench import e2e, record, results

    root = tmp_path / "evidence"
    engines = [r.to_json() for r in turns.engines.values()]
    monkeypatch.setattr(stack, "require_gpu", lambda what: NS(name="NVIDIA H200", sm="9.0"))
    real_context = stack.run_context
    monkeypatch.setattr(stack, "run_context", lambda command=None: {**real_context(command), "gpu": "NVIDIA H200",
                                                                    "compute_capability": "9.0"})  # as on the GPU
    monkeypatch.setattr(e2e, "run_e2e_bench", lambda **kw: {
        "schema": 2, "gpu": "NVIDIA H200", "compute_capability": "9.0", "rounds": 3, "warm_up_rounds": 1,
        "engines": engines, "git_commit": "abc", "finished_at": "now"})
    monkeypatch.setattr(results, "latest_kernels", lambda summary=None: (_ for _ in ()).throw(NoRecord("none")))
    monkeypatch.setattr(S, "write", functools.partial(S.write, root=root))
    monkeypatch.setattr(S, "keep", lambda name, content: None)
    assert record.bench("e2e", quick=True, models="all", rounds=3, record=True) == 0
    summary = S.read(root)
    costs = read_costs(summary)
    assert len(costs.shapes) == 4 and [g.batch for g in costs.gains] == [1, 8]
    assert sorted(map(repr, (e.run for e in recorded_engines(summary)))) == sorted(map(repr, turns.engines))
    monkeypatch.setattr(readme, "_summary", lambda: summary)
    assert any(line.startswith("- The draft's cost inside the engine") for line in readme.verdict().splitlines())
