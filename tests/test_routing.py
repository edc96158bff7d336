"""The real FlashInferMetadataBuilder.build() of every step, on the embedded pair (FlashInfer wrappers are doubles)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_fi.routing import STANDARD_BATCHES, Batch, RoutingLab, routing_report

DRAFT = STANDARD_BATCHES[0]
TARGETS = [b for b in STANDARD_BATCHES if b.causal]


def draft_row(report):
    return next(r for r in report["batches"] if r["batch"] == DRAFT.name)


def target_rows(report):
    return [{k: v for k, v in r.items() if k != "metadata_causal"} for r in report["batches"] if r["role"] == "target"]


@pytest.fixture(scope="module")
def reports():
    return {(step, trtllm): routing_report(step, trtllm=trtllm) for step in range(5) for trtllm in (False, True)}


def test_step0_rejects_flashinfer_for_the_draft(reports):
    row = draft_row(reports[0, False])
    assert row["selection"].startswith("rejected:") and "non-causal attention not supported" in row["selection"]
    # Forced onto stock FlashInfer anyway, the draft is planned causal and fails DFlash's check.
    assert row["plan_causal"] is True and row["dflash_check"].startswith("fail")


def test_step1_accepts_flashinfer_but_fails_dflash_check(reports):
    row = draft_row(reports[1, False])
    assert row["selection"] == "FLASHINFER accepted"
    assert row["metadata_causal"] == "absent"
    assert row["dflash_check"].startswith("fail: Attention metadata for layer model.layers.4.self_attn.attn")


@pytest.mark.parametrize("trtllm", [False, True])
def test_step2_all_prefill_check_passes_but_planned_causal(reports, trtllm):
    row = draft_row(reports[2, trtllm])
    assert (row["num_decodes"], row["num_prefills"]) == (0, len(DRAFT.query_lens))
    assert row["metadata_causal"] is False and row["dflash_check"] == "pass"
    if trtllm:  # Blackwell: stock treats the 16-token draft as a spec decode; now it is prefill, on TRTLLM (causal)
        assert row["prefill"] == "TRTLLM prefill"
        assert draft_row(reports[1, True])["decode"] == "TRTLLM decode"
    else:
        assert row["prefill"] == "FlashInfer prefill (shared causal wrapper)" and row["plan_causal"] is True


def test_step3_separate_wrapper_planned_non_causal(reports):
    row = draft_row(reports[3, False])
    assert row["prefill"] == "FlashInfer prefill (separate non-causal wrapper)" and row["plan_causal"] is False
    assert row["dflash_check"] == "pass"
    # ...but without the gating of step 4, Blackwell still sends the draft to (causal) TRTLLM prefill.
    assert draft_row(reports[3, True])["prefill"] == "TRTLLM prefill"


def test_step3_dcp_raises():
    with RoutingLab(3, (9, 0), dcp=True) as lab:
        builder = lab.builders["draft"][0]
        assert builder.use_dcp
        with pytest.raises(NotImplementedError, match="no non-causal prefill with decode context parallelism"):
            builder._get_prefill_wrapper(causal=False)
        assert lab.route(DRAFT)["error"].startswith("NotImplementedError: FlashInfer has no non-causal prefill")


def test_step3_nvfp4_raises():
    # An NVFP4 FlashInferImpl allocates CUDA buffers when constructed, so the builder is made for a bf16
    # cache and then given the one flag its NVFP4 branch reads.
    with RoutingLab(3, (10, 0)) as lab:
        builder = lab.builders["draft"][0]
        builder.is_kvcache_nvfp4 = True
        with pytest.raises(NotImplementedError, match="no non-causal prefill for an NVFP4 KV cache"):
            builder._get_prefill_wrapper(causal=False)
        from vllm.config import set_current_vllm_config

        with set_current_vllm_config(lab.builders["draft"][2]):
            assert builder._get_prefill_wrapper(causal=True) is not None  # causal batches unaffected


def test_step4_gates_trtllm_for_non_causal_and_warns_once(reports):
    row = draft_row(reports[4, True])
    assert row["prefill"] == "FlashInfer prefill (separate non-causal wrapper)" and row["decode"] is None
    assert row["plan_causal"] is False and row["dflash_check"] == "pass"
    assert len(reports[4, True]["dflash_warnings"]) == 1  # two draft batches were built, one warning
    assert reports[4, False]["dflash_warnings"] == []
    assert all(r["dflash_warnings"] == [] for (s, _), r in reports.items() if s < 4)


@pytest.mark.parametrize("trtllm", [False, True])
def test_causal_target_batches_routed_exactly_as_stock(reports, trtllm):
    for step in range(1, 5):
        assert target_rows(reports[step, trtllm]) == target_rows(reports[0, trtllm])


batches = st.lists(
    st.tuples(st.booleans(), st.integers(1, 40), st.integers(0, 700)), min_size=1, max_size=8,
).map(lambda reqs: sorted(reqs, key=lambda r: (not r[0], r[1])))  # runner order: decodes first


@pytest.fixture(scope="module")
def labs():
    with RoutingLab(4, (10, 0), trtllm=True) as step4, RoutingLab(0, (10, 0), trtllm=True) as stock:
        yield step4, stock


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=batches, draft_reqs=st.integers(1, 8), draft_ctx=st.lists(st.integers(1, 900), min_size=8, max_size=8))
def test_property_step4_non_causal_never_decode_trtllm_or_cascade(labs, requests, draft_reqs, draft_ctx):
    step4, stock = labs
    draft = Batch("draft", (16,) * draft_reqs, tuple(draft_ctx[:draft_reqs]), False)
    row = step4.route(draft)
    assert row["num_decodes"] == 0 and row["decode"] is None and row["cascade"] is False
    assert row["prefill"] == "FlashInfer prefill (separate non-causal wrapper)" and row["plan_causal"] is False
    assert row["metadata_causal"] is False and row["dflash_check"] == "pass"

    target = Batch("target", tuple(1 if is_decode else q for is_decode, q, _ in requests),
                   tuple(c for _, _, c in requests), True)
    ours, theirs = step4.route(target), stock.route(target)
    assert ours.pop("metadata_causal") is True and theirs.pop("metadata_causal") == "absent"
    assert ours == theirs


def test_routing_cli_prints_clean_json():
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "dflash_fi.cli", "routing", "--step", "4", "--trtllm", "--json"],
                         capture_output=True, text=True, check=True).stdout
    report = json.loads(out)  # vLLM's own logging goes to stderr
    assert report["capability"] == "10.0" and len(report["dflash_warnings"]) == 1
