"""The walkthrough's checks are real checks: they fail on the records a broken step would produce."""

import hashlib
import json

import pytest

from dflash_fi.evidence import plan as P
from dflash_fi.evidence.checks import CHECKS, KERNEL_TOLERANCE, check_records
from dflash_fi.evidence.plan import walkthrough_plan
from dflash_fi.evidence.report import render_table

REFERENCE = {"tau_noncausal": 4.0, "tau_causal": 3.0}
S = P.step_label


def ok(label, tau, tokens=((1, 2), (3, 4)), graphs=None):
    toks = [list(t) for t in tokens]
    return {"label": label, "ok": True, "tau": tau, "tokens": toks, "per_position_acceptance": [0.5] * 15,
            "tokens_sha256": hashlib.sha256(json.dumps(toks).encode()).hexdigest(), "output_tokens_per_s": 100.0,
            "backends": {"draft": ["dflash_fi.patched.step3.FlashInferBackend"]}, "cudagraph_mode": graphs or "NONE",
            "spec": {"speculative": tau is not None, "cuda_graphs": graphs is not None}}


def failed(label, kind, phase, message):
    return {"label": label, "ok": False, "error": {"type": kind, "phase": phase, "message": message},
            "spec": {"speculative": True}}


def good_records():
    full = "FULL_AND_PIECEWISE"
    records = {
        P.NO_SPEC: ok(P.NO_SPEC, None),
        P.FLASH_ATTN: ok(P.FLASH_ATTN, 4.0),
        S(0): failed(S(0), "ValueError", "selection", "... Reason: ['non-causal attention not supported']"),
        S(1): failed(S(1), "AssertionError", "first draft step", "... does not have non-causal support, ..."),
        S(2): ok(S(2), 3.05),
        S(3): ok(S(3), 3.99), S(4): ok(S(4), 3.99), S(5): ok(S(5), 3.99), S(6): ok(S(6), 3.99),
        P.FP8: ok(P.FP8, 3.95),
        P.NO_SPEC_GRAPHS: ok(P.NO_SPEC_GRAPHS, None, graphs=full),
        P.FLASH_ATTN_GRAPHS: ok(P.FLASH_ATTN_GRAPHS, 4.01, graphs=full),
        P.STEP4_GRAPHS: ok(P.STEP4_GRAPHS, 3.99, graphs="PIECEWISE"),
        P.FINAL_GRAPHS: ok(P.FINAL_GRAPHS, 3.99, graphs=full),
        P.FINAL_GRAPHS_FI_TARGET: ok(P.FINAL_GRAPHS_FI_TARGET, 3.99, graphs=full),
    }
    assert set(records) == {spec.label for spec in walkthrough_plan()}
    return records


def test_all_checks_pass_on_the_expected_story():
    checks = check_records(good_records(), REFERENCE)
    assert [c.name for c in checks if c.passed is not True] == []
    assert len(checks) == len(CHECKS) == 17


def by_start(text):
    return next(c.name for c in CHECKS if c.name.startswith(text))


@pytest.mark.parametrize("label, change, failing", [
    (S(0), ok(S(0), 4.0), "step 0: FLASHINFER draft rejected"),
    (S(1), ok(S(1), 4.0), "step 1: selection passes"),
    (S(2), ok(S(2), 3.9), "step 2: runs, tau clearly below"),
    (S(3), ok(S(3), 3.05), "step 3: tau equals the FLASH_ATTN"),
    (S(3), ok(S(3), 3.99, tokens=((1, 2), (3, 5))), "step 3: output identical"),
    (S(4), ok(S(4), 3.94), "step 4: same output as step 3"),
    (S(4), ok(S(4), 3.99, tokens=((1, 2), (3, 5))), "step 4: same output as step 3"),
    (P.FP8, ok(P.FP8, 3.3), "step 4: fp8 KV cache runs"),
    (S(5), ok(S(5), 3.5), "step 5: FA2 draft kernel"),
    (S(6), ok(S(6), 3.99, tokens=((9, 9), (3, 4))), "step 6: without graphs"),
    (P.STEP4_GRAPHS, ok(P.STEP4_GRAPHS, 3.99, graphs="FULL_AND_PIECEWISE"), "CUDA graphs: the FLASH_ATTN draft keeps"),
    (P.FINAL_GRAPHS, ok(P.FINAL_GRAPHS, 3.99, graphs="PIECEWISE"), "step 6, CUDA graphs: the engine keeps"),
    (P.FINAL_GRAPHS, ok(P.FINAL_GRAPHS, 3.99, tokens=((5,), (6,)), graphs="FULL_AND_PIECEWISE"),
     "step 6, CUDA graphs: output identical"),
    (P.FINAL_GRAPHS, ok(P.FINAL_GRAPHS, 3.80, graphs="FULL_AND_PIECEWISE"), "step 6, CUDA graphs: tau within 1%"),
    (P.FINAL_GRAPHS_FI_TARGET, ok(P.FINAL_GRAPHS_FI_TARGET, 3.99, tokens=((5,), (6,)), graphs="FULL_AND_PIECEWISE"),
     "step 6, CUDA graphs, FlashInfer target too"),
    (P.FINAL_GRAPHS_FI_TARGET, failed(P.FINAL_GRAPHS_FI_TARGET, "RuntimeError", "generation", "illegal memory access"),
     "step 6, CUDA graphs, FlashInfer target too"),
])
def test_a_broken_step_fails_its_check(label, change, failing):
    records = good_records()
    records[label] = change
    names = [c.name for c in check_records(records, REFERENCE) if c.passed is False]
    assert by_start(failing) in names


def test_a_missing_record_is_not_run_rather_than_passed():
    records = good_records()
    del records[P.FINAL_GRAPHS]
    results = {c.name: c for c in check_records(records, REFERENCE)}
    assert results[by_start("step 6, CUDA graphs: the engine keeps")].passed is None
    assert results[by_start("step 6, CUDA graphs: the engine keeps")].line().startswith("NOT RUN")


def test_every_run_gets_the_same_kv_cache():
    sizes = {spec.num_gpu_blocks for spec in walkthrough_plan()}
    assert len(sizes) == 1 and sizes.pop() >= 32 * -(-(97 + 128 + 16) // 16)


def test_every_check_names_runs_of_the_plan():
    labels = {spec.label for spec in walkthrough_plan()}
    assert all(set(check.needs) <= labels for check in CHECKS)


def test_table_has_a_row_per_run():
    table = render_table(good_records())
    assert len(table.splitlines()) == 2 + len(walkthrough_plan())
    assert f"| {S(1)} | AssertionError at first draft step |" in table
    assert "| PIECEWISE |" in table and "| eager |" in table


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
