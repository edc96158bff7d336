"""The walkthrough's checks are real checks: they fail on the records a broken step would produce."""

import hashlib
import json
from dataclasses import replace

import pytest

from dflash_fi.engine.identity import RunId, label
from dflash_fi.engine.records import (Acceptance, Backend, BuildKey, BuildTiming, EngineRecord, Failure,
                                      GenerateResult, Phase, PlanWatch, Provenance, Role)
from dflash_fi.engine.spec import RunSpec
from dflash_fi.evidence import plan as P
from dflash_fi.evidence.check_types import Check, CheckId, CheckKind as K
from dflash_fi.evidence.checks import KERNEL_TOLERANCE, REFERENCE_TOLERANCE, Verdict, check_records, checks
from dflash_fi.evidence.near_ties import measure_margin, near_tie_verdict, partings
from dflash_fi.evidence.plan import walkthrough_plan
from dflash_fi.evidence.report import compact, render_mixed_table, render_table, sameness_rows

REFERENCE = {"tau_noncausal": 4.0, "tau_causal": 3.0}
MARGIN = {"margin": 0.2}
S, G, GF = P.step_run, P.graphs_run, P.graphs_fi_target_run
FINAL = P.final_step()
TOKENS = ((1, 2, 3), (4, 5, 6))
TIES = (((1, 0.05),), ((2, 0.5),))  # request 0 is nearly tied at position 1; request 1's position 2 is not
FLASHINFER = Backend("dflash_fi.patched.step4.FlashInferBackend", "FLASHINFER", 4)
FLASH_ATTN = Backend("vllm.v1.attention.backends.flash_attn.FlashAttentionBackend", "FLASH_ATTN")
PROVENANCE = Provenance("NVIDIA H200", "9.0", {"vllm": "0.22.1", "flashinfer": "0.6.11.post2", "torch": "2.11"},
                        "abc", "test", "2026-12-01T00:00:00Z")


CALM_PLANS = (PlanWatch(Role.DRAFT, 40, 3, 0), PlanWatch(Role.TARGET, 80, 0, 0))  # pending, but the same schedule
XQA_PLANS = (PlanWatch(Role.TARGET, 80, 0, 0),)  # a draft on XQA plans nothing


def plans_of(run: RunId):
    return XQA_PLANS if run.step >= FINAL and run.kv_cache_dtype == "auto" else CALM_PLANS


def output(tokens=TOKENS, tau=None, ties=TIES, larger=3, plans=CALM_PLANS):
    acceptance = None if tau is None else Acceptance(10, 150, round((tau - 1) * 10), (0.5,) * 15)
    return GenerateResult(
        num_requests=len(tokens), generate_s=1.0, output_tokens_per_s=100.0, steps=10.0,
        tokens_sha256=hashlib.sha256(json.dumps(tokens).encode()).hexdigest(), tokens=tokens, acceptance=acceptance,
        near_ties=ties, near_tie_cap=1.0,
        builds=(BuildTiming(BuildKey("target step", "FLASH_ATTN", 4), 10, 0.001, 600, larger),), plans=plans)


def ok(run: RunId, tau, tokens=TOKENS, graphs=None, mixed=None, target=(FLASH_ATTN,), draft=(FLASHINFER,),
       async_scheduling=True):
    return EngineRecord(RunSpec(run=run, max_num_seqs=40), True, target_backends=target, draft_backends=draft,
                        cudagraph_mode=graphs or "NONE", max_cudagraph_capture_size=512, flash_attn_version=2,
                        async_scheduling=async_scheduling,
                        generates={"uniform": output(tokens, tau), "mixed": mixed or output(tau=tau, plans=plans_of(run))},
                        provenance=PROVENANCE)


def failed(run: RunId, kind, phase, message):
    return EngineRecord(RunSpec(run=run), False, Failure(kind, message, phase), provenance=PROVENANCE)


def good_records():
    full = "FULL_AND_PIECEWISE"
    on_flashinfer = dict(target=(FLASHINFER,), draft=(FLASHINFER,))
    records = {
        P.NO_SPEC: ok(P.NO_SPEC, None), P.FLASH_ATTN: ok(P.FLASH_ATTN, 4.0),
        S(0): failed(S(0), "ValueError", Phase.SELECTION, "... Reason: ['non-causal attention not supported']"),
        S(1): failed(S(1), "AssertionError", Phase.FIRST_DRAFT_STEP, "... does not have non-causal support, ..."),
        S(2): ok(S(2), 3.1),
        **{S(s): ok(S(s), 4.0) for s in range(3, FINAL + 1)},
        P.NO_SPEC_FP8: ok(P.NO_SPEC_FP8, None), P.FP8: ok(P.FP8, 3.9),
        P.RTX4090_NO_SPEC: ok(P.RTX4090_NO_SPEC, None, **on_flashinfer),
        P.RTX4090_STOCK: failed(P.RTX4090_STOCK, "ValueError", Phase.SELECTION, "No valid attention backend found for cuda"),
        P.RTX4090_STEP4: ok(P.RTX4090_STEP4, 3.9, **on_flashinfer),
        P.final_rtx4090(): ok(P.final_rtx4090(), 3.9, **on_flashinfer),
        P.NO_SPEC_GRAPHS: ok(P.NO_SPEC_GRAPHS, None, graphs=full),
        P.NO_SPEC_GRAPHS_FI_TARGET: ok(P.NO_SPEC_GRAPHS_FI_TARGET, None, graphs=full),
        P.FLASH_ATTN_GRAPHS: ok(P.FLASH_ATTN_GRAPHS, 4.0, graphs=full),
        P.STEP4_GRAPHS: ok(P.STEP4_GRAPHS, 4.0, graphs="PIECEWISE"),
        P.STEP4_GRAPHS_FI_TARGET: ok(P.STEP4_GRAPHS_FI_TARGET, 3.9, graphs="PIECEWISE"),
        **{G(s): ok(G(s), 4.0, graphs=full) for s in P.graph_steps()},
        **{GF(s): ok(GF(s), 3.9, graphs=full) for s in P.graph_steps()},
    }
    assert set(records) == {spec.run for spec in walkthrough_plan()}
    return records


def test_all_checks_pass_on_the_expected_story():
    results = check_records(good_records(), REFERENCE, MARGIN)
    assert [c.line() for c in results if not c.passed] == []
    assert len(results) == len(checks())


def by_id(kind, *runs):
    """The one check of this kind about these runs (its first runs, in its own order)."""
    found = [c.id for c in checks() if c.kind is kind and c.needs[:len(runs)] == runs]
    assert len(found) == 1, (kind, runs, found)
    return found[0]


PARTED_AT_A_TIE = ((1, 9, 9), (4, 5, 6))  # request 0 parts at position 1, where the baseline was nearly tied
PARTED_CONFIDENTLY = ((1, 2, 3), (4, 5, 9))  # request 1 parts at position 2: a gap of 0.5, over the margin


@pytest.mark.parametrize("run, change, failing", [
    (S(0), ok(S(0), 4.0), by_id(K.REFUSED_AT_SELECTION, S(0))),
    (S(0), failed(S(0), "ValueError", Phase.ENGINE_START, "non-causal attention not supported"),
     by_id(K.REFUSED_AT_SELECTION, S(0))),  # the type vLLM raises, but not where the selector refuses
    (S(1), ok(S(1), 4.0), by_id(K.DFLASH_CHECK_FAILS, S(1))),
    (S(2), ok(S(2), 3.9), by_id(K.TAU_BELOW_FLASH_ATTN, S(2))),
    (S(3), ok(S(3), 3.1), by_id(K.SAME_TAU, S(3))),
    (S(3), ok(S(3), 4.0, tokens=PARTED_CONFIDENTLY), by_id(K.SAME_OUTPUT, S(3), P.NO_SPEC)),
    (S(4), ok(S(4), 3.9), by_id(K.SAME_OUTPUT_AND_TAU, S(4))),
    (S(4), ok(S(4), 4.0, tokens=PARTED_CONFIDENTLY), by_id(K.SAME_OUTPUT_AND_TAU, S(4))),
    (P.FP8, ok(P.FP8, 3.3), by_id(K.STILL_NON_CAUSAL, P.FP8)),
    (P.FP8, ok(P.FP8, 3.9, tokens=PARTED_CONFIDENTLY), by_id(K.SAME_OUTPUT, P.FP8)),
    (S(5), ok(S(5), 3.5), by_id(K.SAME_OUTPUT_AND_TAU, S(5))),
    (S(6), ok(S(6), 4.0, tokens=((9, 9, 9), (4, 5, 6))), by_id(K.SAME_OUTPUT_AND_TAU, S(6))),
    (S(FINAL), ok(S(FINAL), 3.9), by_id(K.SAME_OUTPUT_AND_TAU, S(FINAL))),
    (P.RTX4090_STOCK, ok(P.RTX4090_STOCK, 3.9), by_id(K.REFUSED_AT_SELECTION, P.RTX4090_STOCK)),
    # the plan race: a draft plan rewrote a queued schedule for another batch; or no async scheduling to race with
    (G(FINAL - 1), ok(G(FINAL - 1), 4.0, graphs="FULL_AND_PIECEWISE",
                      mixed=output(tau=4.0, plans=(PlanWatch(Role.DRAFT, 40, 3, 1),))),
     by_id(K.NO_HARMFUL_REPLAN, G(FINAL - 1))),
    (S(4), ok(S(4), 4.0, async_scheduling=False), by_id(K.NO_HARMFUL_REPLAN, S(4))),
    (S(4), ok(S(4), 4.0, mixed=output(tau=4.0, plans=None)), by_id(K.NO_HARMFUL_REPLAN, S(4))),
    (S(4), ok(S(4), 4.0, mixed=output(tau=4.0, plans=XQA_PLANS)), by_id(K.NO_HARMFUL_REPLAN, S(4))),  # saw no plan
    (G(FINAL), ok(G(FINAL), 4.0, graphs="FULL_AND_PIECEWISE", mixed=output(tau=4.0, plans=CALM_PLANS)),
     by_id(K.NO_HARMFUL_REPLAN, G(FINAL))),  # the XQA draft planned
    (P.RTX4090_STEP4, ok(P.RTX4090_STEP4, 3.9), by_id(K.ON_FLASHINFER_STILL_NON_CAUSAL, P.RTX4090_STEP4)),  # its target is not on FlashInfer
    (P.final_rtx4090(), ok(P.final_rtx4090(), 3.3, target=(FLASHINFER,)), by_id(K.ON_FLASHINFER_STILL_NON_CAUSAL, P.final_rtx4090())),
    (P.RTX4090_STEP4, ok(P.RTX4090_STEP4, 3.9, tokens=PARTED_CONFIDENTLY, target=(FLASHINFER,)),
     by_id(K.SAME_OUTPUT, P.RTX4090_STEP4)),
    (P.STEP4_GRAPHS, ok(P.STEP4_GRAPHS, 4.0, graphs="FULL_AND_PIECEWISE"), by_id(K.GRAPH_MODES, P.FLASH_ATTN_GRAPHS)),
    (G(6), ok(G(6), 4.0, graphs="PIECEWISE"), by_id(K.GRAPH_MODES, G(6))),
    (GF(FINAL), ok(GF(FINAL), 3.9, graphs="PIECEWISE"), by_id(K.GRAPH_MODES, G(FINAL))),
    (G(6), ok(G(6), 3.8, graphs="FULL_AND_PIECEWISE"), by_id(K.SAME_TAU, G(6))),
    (G(FINAL), ok(G(FINAL), 4.0, tokens=PARTED_CONFIDENTLY, graphs="FULL_AND_PIECEWISE"),
     by_id(K.SAME_OUTPUT, G(FINAL), P.NO_SPEC_GRAPHS)),
    (GF(6), ok(GF(6), 3.9, tokens=PARTED_CONFIDENTLY, graphs="FULL_AND_PIECEWISE"),
     by_id(K.SAME_OUTPUT, GF(6), P.STEP4_GRAPHS_FI_TARGET)),
    (GF(6), failed(GF(6), "RuntimeError", Phase.GENERATION, "illegal memory access"), by_id(K.SAME_OUTPUT, GF(6), P.NO_SPEC_GRAPHS_FI_TARGET)),
    (G(FINAL), ok(G(FINAL), 4.0, graphs="FULL_AND_PIECEWISE", mixed=output(PARTED_CONFIDENTLY, 4.0)),
     by_id(K.MIXED_SAME_OUTPUT, G(FINAL))),
    (G(6), ok(G(6), 4.0, graphs="FULL_AND_PIECEWISE", mixed=output(tau=4.0, larger=0)),
     by_id(K.MIXED_SAME_TAU, G(6))),  # the batch never outgrew the captured graphs
    (GF(FINAL), ok(GF(FINAL), 3.9, graphs="FULL_AND_PIECEWISE", mixed=output(tau=3.5)),
     by_id(K.MIXED_SAME_TAU, GF(FINAL))),
])
def test_a_broken_step_fails_its_check(run, change, failing):
    records = good_records()
    records[run] = change
    failed = [c.id for c in check_records(records, REFERENCE, MARGIN) if c.verdict is Verdict.FAIL]
    assert failing in failed


def test_outputs_that_part_at_near_ties_pass_and_say_so():
    records = good_records()
    records[S(3)] = ok(S(3), 4.0, tokens=PARTED_AT_A_TIE)
    wanted = by_id(K.SAME_OUTPUT, S(3), P.NO_SPEC)
    check = next(c for c in check_records(records, REFERENCE, MARGIN) if c.id == wanted)
    assert check.passed and "1 of 2 requests parted" in check.detail and "largest gap at a parting 0.050" in check.detail
    no_margin = next(c for c in check_records(records, REFERENCE, None) if c.id == wanted)
    assert no_margin.verdict is Verdict.FAIL


def test_partings_find_the_first_differing_position_and_the_baselines_gap():
    base, run = ok(P.NO_SPEC, None), ok(P.FLASH_ATTN, 4.0, tokens=((1, 2), (4, 5, 7)))
    assert partings(run, base) == [{"request": 0, "position": 2, "gap": None},  # ran out: parts where it ends
                                   {"request": 1, "position": 2, "gap": 0.5}]
    without = replace(base, generates={"uniform": replace(base.generate(), near_ties=None)})
    passed, detail = near_tie_verdict(run, without, MARGIN)
    assert passed is False and "recorded no logprobs" in detail


def test_the_margin_is_measured_from_correct_pairs():
    records = good_records()
    records[P.NO_SPEC_GRAPHS] = ok(P.NO_SPEC_GRAPHS, None, tokens=PARTED_AT_A_TIE, graphs="FULL_AND_PIECEWISE")
    measured = measure_margin(records)
    assert measured["partings"] >= 1 and measured["largest_gap"] == 0.05 and measured["margin"] == pytest.approx(0.1)
    assert measured["partings_at_confident_tokens"] == 0


def test_a_missing_record_is_not_run_rather_than_passed():
    records = good_records()
    del records[G(6)]
    results = {c.id: c for c in check_records(records, REFERENCE, MARGIN)}
    assert results[by_id(K.GRAPH_MODES, G(6))].verdict is Verdict.NOT_RUN
    assert results[by_id(K.GRAPH_MODES, G(6))].line().startswith("NOT RUN")


def test_a_record_without_the_workload_a_check_reads_is_not_run_and_a_notebook_does_not_ask():
    """A notebook's live engines generate the uniform workload only: the mixed-batch checks on them are not run."""
    records = good_records()
    records[G(6)] = replace(records[G(6)], generates={"uniform": records[G(6)].generate("uniform")})
    results = {c.id: c for c in check_records(records, REFERENCE, MARGIN)}
    mixed = results[by_id(K.MIXED_SAME_TAU, G(6))]
    assert mixed.verdict is Verdict.NOT_RUN and "no mixed workload" in mixed.detail
    assert results[by_id(K.GRAPH_MODES, G(6))].verdict is Verdict.PASS
    spec = next(c for c in checks() if c.id == mixed.id)
    assert spec.missing(records) and spec.missing(good_records()) is None


def test_tau_is_compared_within_1pct_on_the_same_output_and_within_5pct_where_outputs_parted():
    """The FLASH_ATTN draft's graphs run can part from plain decoding at a near-tie where the FlashInfer draft does
    not: the two drafts are then scored on other text."""
    wanted = by_id(K.SAME_TAU, G(6))
    parted = ((1, 2, 3), (4, 5, 7))

    def judged(tau, tokens=TOKENS):
        records = good_records()
        records[G(6)] = ok(G(6), tau, tokens=tokens, graphs="FULL_AND_PIECEWISE")
        return {c.id: c for c in check_records(records, REFERENCE, MARGIN)}[wanted]

    assert judged(4.1).verdict is Verdict.FAIL and judged(4.1).numbers["tolerance"] == KERNEL_TOLERANCE  # 2.5%
    ok_parted = judged(4.1, parted)
    assert ok_parted.verdict is Verdict.PASS and "outputs parted on 1 of 2 requests" in ok_parted.detail
    assert ok_parted.numbers["tolerance"] == REFERENCE_TOLERANCE
    assert judged(4.3, parted).verdict is Verdict.FAIL  # 7.5%: more than other text explains


def test_every_run_gets_the_same_kv_cache_and_asks_for_logprobs():
    specs = walkthrough_plan()
    sizes = {spec.num_gpu_blocks for spec in specs}
    assert len(sizes) == 1 and sizes.pop() >= 32 * -(-(97 + 128 + 16) // 16)
    assert {spec.logprobs for spec in specs} == {2} and {spec.workloads for spec in specs} == {P.WORKLOADS}
    assert len({spec.run for spec in specs}) == len(specs)  # every run is one engine
    for spec in specs:
        spec.validate()


def test_every_check_names_runs_of_the_plan_and_baselines_differ_in_one_thing():
    planned = {spec.run for spec in walkthrough_plan()}
    assert all(set(check.needs) <= planned for check in checks())
    compared = ("step", "draft_backend", "target_backend", "kv_cache_dtype", "flash_attn_version", "speculative",
                "cuda_graphs")
    for run, baselines in P.baselines().items():
        for baseline in baselines:
            differ = [f for f in compared if getattr(run, f) != getattr(baseline, f)]
            # speculation (and with it the draft's step and backend), or the graph mode: never the target's setup
            assert {"target_backend", "kv_cache_dtype", "flash_attn_version"}.isdisjoint(differ), (run, baseline)


def test_tables_have_a_row_per_run_and_no_speed():
    records = good_records()
    records[S(3)] = ok(S(3), 4.0, tokens=PARTED_AT_A_TIE)
    same = sameness_rows(records)
    table = render_table({run: compact(r) for run, r in records.items()}, same)  # as the summary keeps them
    assert len(table.splitlines()) == 2 + len(walkthrough_plan()) and "tokens/s" not in table
    assert f"| {label(S(1))} | AssertionError at first draft step |" in table
    assert "1/2 identical to 'no speculation'; parted at gaps up to 0.050" in table
    assert "| FlashAttention | FlashInfer (step 4) |" in table  # backends by name, rendered here
    mixed = render_mixed_table(records, same)
    assert len(mixed.splitlines()) == 2 + len(P.mixed_rows()) and "| 3 (graphs up to 512 tokens) |" in mixed


def test_every_check_has_its_own_id_and_a_judged_check_round_trips_as_data():
    ids = [c.id for c in checks()]
    assert len(set(ids)) == len(ids)
    judged = check_records(good_records(), REFERENCE, MARGIN)
    assert [Check.from_json(c.to_json()) for c in judged] == judged
    assert CheckId.from_json(ids[0].to_json()) == ids[0]


def test_the_names_shown_state_the_tolerances_the_judges_use():
    """A name says 'within 1%' from KERNEL_TOLERANCE itself: change the constant and the names follow."""
    import dflash_fi.evidence.checks as C

    old = C.KERNEL_TOLERANCE
    try:
        C.KERNEL_TOLERANCE = 0.02
        assert any("within 2%" in c.name for c in C.checks()) and not any("within 1%" in c.name for c in C.checks())
    finally:
        C.KERNEL_TOLERANCE = old
