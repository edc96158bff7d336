"""The walkthrough's checks are real checks: they fail on the records a broken step would produce."""

import copy
import json
import re
from pathlib import Path

import pytest

from dflash_fi.walkthrough import check_records, latest_walkthrough, render_table, walkthrough_plan

REFERENCE = {"tau_noncausal": 4.0, "tau_causal": 3.0}


def ok(tau, tokens=((1, 2), (3, 4))):
    import hashlib
    import json

    toks = [list(t) for t in tokens]
    return {"ok": True, "tau": tau, "tokens": toks, "per_position_acceptance": [0.5] * 15,
            "tokens_sha256": hashlib.sha256(json.dumps(toks).encode()).hexdigest(), "output_tokens_per_s": 100.0,
            "backends": {"draft": ["dflash_fi.patched.step3.FlashInferBackend"]}, "spec": {"speculative": True}}


def failed(kind, phase, message):
    return {"ok": False, "error": {"type": kind, "phase": phase, "message": message}, "spec": {"speculative": True}}


def good_records():
    return {
        "no speculation": {**ok(None), "spec": {"speculative": False}},
        "FLASH_ATTN draft (reference)": ok(4.0),
        "step 0 FLASHINFER draft": failed("ValueError", "selection", "... Reason: ['non-causal attention not supported']"),
        "step 1 FLASHINFER draft": failed("AssertionError", "first draft step", "... does not have non-causal support, ..."),
        "step 2 FLASHINFER draft": ok(3.05),
        "step 3 FLASHINFER draft": ok(3.99),
        "step 4 FLASHINFER draft": ok(3.99),
        "step 4 FLASHINFER draft, fp8 KV": ok(3.95),
    }


def test_all_checks_pass_on_the_expected_story():
    checks = check_records(good_records(), REFERENCE)
    assert [c.name for c in checks if not c.passed] == []
    assert len(checks) == 10


@pytest.mark.parametrize("label, change, failing", [
    ("step 0 FLASHINFER draft", ok(4.0), "step 0: FLASHINFER draft rejected at selection"),
    ("step 1 FLASHINFER draft", ok(4.0), "step 1: selection passes, DFlash's non-causal check fails at the first draft step"),
    ("step 2 FLASHINFER draft", ok(3.9), "step 2: runs, tau clearly below the FLASH_ATTN reference"),
    ("step 3 FLASHINFER draft", ok(3.05), "step 3: tau equals the FLASH_ATTN reference"),
    ("step 3 FLASHINFER draft", ok(3.99, tokens=((1, 2), (3, 5))), "step 3: output equals the no-speculation output"),
    ("step 4 FLASHINFER draft", ok(3.94), "step 4: same output as step 3, tau within 1% (TRTLLM gating changes no kernel here)"),
    ("step 4 FLASHINFER draft", ok(3.99, tokens=((1, 2), (3, 5))),
     "step 4: same output as step 3, tau within 1% (TRTLLM gating changes no kernel here)"),
    ("step 4 FLASHINFER draft, fp8 KV", ok(3.3), "step 4: fp8 KV cache runs, drafting still non-causal"),
])
def test_a_broken_step_fails_its_check(label, change, failing):
    records = good_records()
    records[label] = change
    names = [c.name for c in check_records(records, REFERENCE) if not c.passed]
    assert failing in names


def test_every_run_gets_the_same_kv_cache():
    sizes = {spec.num_gpu_blocks for spec in walkthrough_plan()}
    assert len(sizes) == 1 and sizes.pop() >= 32 * -(-(97 + 128 + 16) // 16)


def test_table_has_a_row_per_run():
    table = render_table(good_records())
    assert len(table.splitlines()) == 2 + len(walkthrough_plan())
    assert "| step 1 FLASHINFER draft | AssertionError at first draft step |" in table


def test_readme_table_is_the_recorded_walkthrough():
    """README's results table is generated from the committed ledger, never typed in."""
    from dflash_fi.ledger import all_records

    latest = latest_walkthrough(all_records())
    if latest is None:
        pytest.skip("no complete GPU walkthrough recorded under runs/ yet")
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"<!-- walkthrough-table -->\n(.*?)\n<!-- /walkthrough-table -->", readme, re.S)
    assert block and render_table(latest[1]) in block.group(1)


def test_engines_of_one_step_differ_within_the_kernel_tolerance():
    """The recorded repeats behind the 1% step-4 check: tau moves between engines, the output does not."""
    from dflash_fi.ledger import RUNS_DIR
    from dflash_fi.walkthrough import KERNEL_TOLERANCE

    path = RUNS_DIR / "nvidia-h200.engine-variation.json"
    if not path.is_file():
        pytest.skip("no engine-variation record committed")
    runs = json.loads(path.read_text())["runs"]
    step3 = {r["tau"] for r in runs if r["step"] == 3}
    assert len(step3) >= 2, "the record no longer shows step 3 varying between engines"
    assert len({r["tokens_sha256"] for r in runs}) == 1
    taus = [r["tau"] for r in runs]
    assert (max(taus) - min(taus)) / min(taus) <= KERNEL_TOLERANCE
