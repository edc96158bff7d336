"""The walkthrough's checks are real checks: they fail on the records a broken step would produce."""

import hashlib
import json

import pytest

from dflash_fi.evidence import plan as P
from dflash_fi.evidence.checks import CHECKS, KERNEL_TOLERANCE, check_records
from dflash_fi.evidence.near_ties import committed_margin, measure_margin, near_tie_verdict, partings
from dflash_fi.evidence.plan import walkthrough_plan
from dflash_fi.evidence.report import render_mixed_table, render_table

REFERENCE = {"tau_noncausal": 4.0, "tau_causal": 3.0}
MARGIN = {"margin": 0.2, "file": "gpu.near-tie-margin-test.json"}
S, G, GF = P.step_label, P.graphs_label, P.graphs_fi_target_label
TOKENS = ((1, 2, 3), (4, 5, 6))
TIES = [[[1, 0.05]], [[2, 0.5]]]  # request 0 is nearly tied at position 1; request 1's position 2 is not
FLASHINFER = "dflash_fi.patched.step4.FlashInferBackend"


def output(tokens=TOKENS, tau=None, ties=TIES, larger=3):
    toks = [list(t) for t in tokens]
    return {"tokens": toks, "tokens_sha256": hashlib.sha256(json.dumps(toks).encode()).hexdigest(),
            "near_ties": ties, "near_tie_cap": 1.0, "tau": tau, "num_requests": len(toks),
            "builds_larger_than_largest_graph": {"target step, FLASH_ATTN (4 layers)": larger}}


def ok(label, tau, tokens=TOKENS, graphs=None, mixed=None, backends=None):
    return {"label": label, "ok": True, **output(tokens, tau), "per_position_acceptance": [0.5] * 15,
            "mixed": mixed or output(tau=tau), "max_cudagraph_capture_size": 512, "flash_attn_version": 2,
            "backends": backends or {"target": ["vllm.FlashAttentionBackend"], "draft": [FLASHINFER]},
            "cudagraph_mode": graphs or "NONE",
            "spec": {"speculative": tau is not None, "cuda_graphs": graphs is not None, "max_num_seqs": 40}}


def failed(label, kind, phase, message):
    return {"label": label, "ok": False, "error": {"type": kind, "phase": phase, "message": message},
            "spec": {"speculative": True}}


def good_records():
    full = "FULL_AND_PIECEWISE"
    on_flashinfer = {"target": [FLASHINFER], "draft": [FLASHINFER]}
    records = {
        P.NO_SPEC: ok(P.NO_SPEC, None), P.FLASH_ATTN: ok(P.FLASH_ATTN, 4.0),
        S(0): failed(S(0), "ValueError", "selection", "... Reason: ['non-causal attention not supported']"),
        S(1): failed(S(1), "AssertionError", "first draft step", "... does not have non-causal support, ..."),
        S(2): ok(S(2), 3.05),
        **{S(s): ok(S(s), 3.99) for s in (3, 4, 5, 6, 7)},
        P.NO_SPEC_FP8: ok(P.NO_SPEC_FP8, None), P.FP8: ok(P.FP8, 3.95),
        P.RTX4090_NO_SPEC: ok(P.RTX4090_NO_SPEC, None, backends=on_flashinfer),
        P.RTX4090_STOCK: failed(P.RTX4090_STOCK, "ValueError", "selection", "No valid attention backend found for cuda"),
        P.RTX4090_STEP4: ok(P.RTX4090_STEP4, 3.9, backends=on_flashinfer),
        P.NO_SPEC_GRAPHS: ok(P.NO_SPEC_GRAPHS, None, graphs=full),
        P.NO_SPEC_GRAPHS_FI_TARGET: ok(P.NO_SPEC_GRAPHS_FI_TARGET, None, graphs=full),
        P.FLASH_ATTN_GRAPHS: ok(P.FLASH_ATTN_GRAPHS, 4.01, graphs=full),
        P.STEP4_GRAPHS: ok(P.STEP4_GRAPHS, 3.99, graphs="PIECEWISE"),
        P.STEP4_GRAPHS_FI_TARGET: ok(P.STEP4_GRAPHS_FI_TARGET, 3.9, graphs="PIECEWISE"),
        **{G(s): ok(G(s), 3.99, graphs=full) for s in P.GRAPH_STEPS},
        **{GF(s): ok(GF(s), 3.9, graphs=full) for s in P.GRAPH_STEPS},
    }
    assert set(records) == {spec.label for spec in walkthrough_plan()}
    return records


def test_all_checks_pass_on_the_expected_story():
    checks = check_records(good_records(), REFERENCE, MARGIN)
    assert [c.line() for c in checks if c.passed is not True] == []
    assert len(checks) == len(CHECKS)


def by_start(text):
    return next(c.name for c in CHECKS if c.name.startswith(text))


PARTED_AT_A_TIE = ((1, 9, 9), (4, 5, 6))  # request 0 parts at position 1, where the baseline was nearly tied
PARTED_CONFIDENTLY = ((1, 2, 3), (4, 5, 9))  # request 1 parts at position 2: a gap of 0.5, over the margin


@pytest.mark.parametrize("label, change, failing", [
    (S(0), ok(S(0), 4.0), "step 0: FLASHINFER draft rejected"),
    (S(1), ok(S(1), 4.0), "step 1: selection passes"),
    (S(2), ok(S(2), 3.9), "step 2: runs, tau clearly below"),
    (S(3), ok(S(3), 3.05), "step 3: tau equals the FLASH_ATTN"),
    (S(3), ok(S(3), 3.99, tokens=PARTED_CONFIDENTLY), f"{S(3)}: output identical to 'no speculation'"),
    (S(4), ok(S(4), 3.94), "step 4: same output as step 3"),
    (S(4), ok(S(4), 3.99, tokens=PARTED_CONFIDENTLY), "step 4: same output as step 3"),
    (P.FP8, ok(P.FP8, 3.3), "step 4, fp8 KV: runs"),
    (P.FP8, ok(P.FP8, 3.95, tokens=PARTED_CONFIDENTLY), f"{P.FP8}: output identical to 'no speculation, fp8 KV'"),
    (S(5), ok(S(5), 3.5), "step 5: FA2 draft kernel"),
    (S(6), ok(S(6), 3.99, tokens=((9, 9, 9), (4, 5, 6))), "step 6: without graphs"),
    (S(7), ok(S(7), 3.90), "step 7: without graphs"),
    (P.RTX4090_STOCK, ok(P.RTX4090_STOCK, 3.9), "RTX 4090 case, stock"),
    (P.RTX4090_STEP4, ok(P.RTX4090_STEP4, 3.9), "RTX 4090 case, step 4"),  # its target is not on FlashInfer
    (P.RTX4090_STEP4, ok(P.RTX4090_STEP4, 3.9, tokens=PARTED_CONFIDENTLY,
                         backends={"target": [FLASHINFER], "draft": [FLASHINFER]}), f"{P.RTX4090_STEP4}: output"),
    (P.STEP4_GRAPHS, ok(P.STEP4_GRAPHS, 3.99, graphs="FULL_AND_PIECEWISE"), "CUDA graphs: the FLASH_ATTN draft keeps"),
    (G(6), ok(G(6), 3.99, graphs="PIECEWISE"), "step 6, CUDA graphs: the engine keeps"),
    (GF(7), ok(GF(7), 3.9, graphs="PIECEWISE"), "step 7, CUDA graphs: the engine keeps"),
    (G(6), ok(G(6), 3.80, graphs="FULL_AND_PIECEWISE"), "step 6, CUDA graphs: tau within 1%"),
    (G(7), ok(G(7), 3.99, tokens=PARTED_CONFIDENTLY, graphs="FULL_AND_PIECEWISE"), f"{G(7)}: output identical"),
    (GF(6), ok(GF(6), 3.9, tokens=PARTED_CONFIDENTLY, graphs="FULL_AND_PIECEWISE"),
     f"{GF(6)}: output identical to {P.STEP4_GRAPHS_FI_TARGET!r}"),
    (GF(6), failed(GF(6), "RuntimeError", "generation", "illegal memory access"), f"{GF(6)}: output identical"),
    (G(7), ok(G(7), 3.99, graphs="FULL_AND_PIECEWISE", mixed=output(PARTED_CONFIDENTLY, 3.99)),
     f"{G(7)}, mixed batches: output identical"),
    (G(6), ok(G(6), 3.99, graphs="FULL_AND_PIECEWISE", mixed=output(tau=3.99, larger=0)),
     f"{G(6)}, mixed batches: tau within"),  # the batch never outgrew the captured graphs
    (GF(7), ok(GF(7), 3.9, graphs="FULL_AND_PIECEWISE", mixed=output(tau=3.5)), f"{GF(7)}, mixed batches: tau"),
])
def test_a_broken_step_fails_its_check(label, change, failing):
    records = good_records()
    records[label] = change
    names = [c.name for c in check_records(records, REFERENCE, MARGIN) if c.passed is False]
    assert by_start(failing) in names


def test_outputs_that_part_at_near_ties_pass_and_say_so():
    records = good_records()
    records[S(3)] = ok(S(3), 3.99, tokens=PARTED_AT_A_TIE)
    check = next(c for c in check_records(records, REFERENCE, MARGIN) if c.name.startswith(f"{S(3)}: output"))
    assert check.passed and "1 of 2 requests parted" in check.detail and "largest gap at a parting 0.050" in check.detail
    no_margin = next(c for c in check_records(records, REFERENCE, None) if c.name.startswith(f"{S(3)}: output"))
    assert no_margin.passed is False and "no near-tie margin is committed" in no_margin.detail


def test_partings_find_the_first_differing_position_and_the_baselines_gap():
    base, run = ok("base", None), ok("run", 4.0, tokens=((1, 2), (4, 5, 7)))
    assert partings(run, base) == [{"request": 0, "position": 2, "gap": None},  # ran out: parts where it ends
                                   {"request": 1, "position": 2, "gap": 0.5}]
    assert near_tie_verdict(run, {**base, "near_ties": None} | {"label": "b"}, MARGIN)[0] is False
    without = {k: v for k, v in base.items() if k != "near_ties"}
    assert "recorded no logprobs" in near_tie_verdict(run, without, MARGIN)[1]


def test_the_margin_is_measured_from_correct_pairs(tmp_path):
    records = good_records()
    records[P.NO_SPEC_GRAPHS] = ok(P.NO_SPEC_GRAPHS, None, tokens=PARTED_AT_A_TIE, graphs="FULL_AND_PIECEWISE")
    measured = measure_margin(records)
    assert measured["partings"] >= 1 and measured["largest_gap"] == 0.05 and measured["margin"] == pytest.approx(0.1)
    assert measured["partings_at_confident_tokens"] == 0
    assert committed_margin(tmp_path) is None
    (tmp_path / "gpu.near-tie-margin-abc.json").write_text(json.dumps({**measured, "finished_at": "2026-12-01T00:00Z"}))
    assert committed_margin(tmp_path)["margin"] == pytest.approx(0.1)


def test_a_missing_record_is_not_run_rather_than_passed():
    records = good_records()
    del records[G(6)]
    results = {c.name: c for c in check_records(records, REFERENCE, MARGIN)}
    assert results[by_start("step 6, CUDA graphs: the engine keeps")].passed is None
    assert results[by_start("step 6, CUDA graphs: the engine keeps")].line().startswith("NOT RUN")


def test_every_run_gets_the_same_kv_cache_and_asks_for_logprobs():
    specs = walkthrough_plan()
    sizes = {spec.num_gpu_blocks for spec in specs}
    assert len(sizes) == 1 and sizes.pop() >= 32 * -(-(97 + 128 + 16) // 16)
    assert {spec.logprobs for spec in specs} == {2} and {spec.workloads for spec in specs} == {("uniform", "mixed")}
    for spec in specs:
        spec.validate()


def test_every_check_names_runs_of_the_plan_and_baselines_differ_in_one_thing():
    specs = {spec.label: spec for spec in walkthrough_plan()}
    assert all(set(check.needs) <= set(specs) for check in CHECKS)
    compared = ("step", "draft_backend", "target_backend", "kv_cache_dtype", "flash_attn_version", "speculative",
                "cuda_graphs")
    for run, baselines in P.BASELINES.items():
        for baseline in baselines:
            differ = [f for f in compared if getattr(specs[run], f) != getattr(specs[baseline], f)]
            # speculation (and with it the draft's step and backend), or the graph mode: never the target's setup
            assert {"target_backend", "kv_cache_dtype", "flash_attn_version"}.isdisjoint(differ), (run, baseline)


def test_tables_have_a_row_per_run_and_no_speed():
    records = good_records()
    records[S(3)] = ok(S(3), 3.99, tokens=PARTED_AT_A_TIE)
    table = render_table(records)
    assert len(table.splitlines()) == 2 + len(walkthrough_plan()) and "tokens/s" not in table
    assert f"| {S(1)} | AssertionError at first draft step |" in table
    assert "1/2 identical to 'no speculation'; parted at gaps up to 0.050" in table
    mixed = render_mixed_table(records)
    assert len(mixed.splitlines()) == 2 + len(P.MIXED_ROWS)


def test_engines_of_one_step_differ_within_the_kernel_tolerance():
    """The recorded repeats behind the 1% same-kernel checks: tau moves between engines, the output does not."""
    from dflash_fi.evidence.ledger import RUNS_DIR

    path = RUNS_DIR / "nvidia-h200.engine-variation.json"
    if not path.is_file():
        pytest.skip("no engine-variation record committed")
    runs = json.loads(path.read_text())["runs"]
    step3 = {r["tau"] for r in runs if r["step"] == 3}
    assert len(step3) >= 2, "the record no longer shows step 3 varying between engines"
    assert len({r["tokens_sha256"] for r in runs}) == 1
    taus = [r["tau"] for r in runs]
    assert (max(taus) - min(taus)) / min(taus) <= KERNEL_TOLERANCE
