"""The places the lesson taught, read from three releases, and what upstream shipped against this project's steps."""

import pytest

from dflash_fi import upstream
from dflash_fi.lab import today
from dflash_fi.upstream import FLASHINFER, LESSON, MERGED, TODAY
from dflash_fi.vocabulary import BLACKWELL, HOPPER, RTX_4090


@pytest.mark.parametrize("capability", [RTX_4090, HOPPER, BLACKWELL])
def test_the_isolated_priority_function_agrees_with_vllm_0_22_1s_own(capability):
    assert today.priorities(LESSON, capability) == today.installed_priorities(capability)


def test_0_33_0_puts_flash_attn_first_for_a_non_causal_layer_on_blackwell_only(upstream_wheels):
    changed = {cap for cap in (RTX_4090, HOPPER, BLACKWELL)
               if today.priorities(TODAY, cap, True) != today.priorities(TODAY, cap, False)}
    assert changed == {BLACKWELL} and today.priorities(TODAY, BLACKWELL, True)[0] == "FLASH_ATTN"


@pytest.mark.parametrize("claim", upstream.CLAIMS, ids=lambda c: c.key)
def test_each_claim_about_upstream_is_what_its_code_shows(upstream_wheels, claim):
    assert claim.shown_since() == claim.since


def test_the_claims_name_each_step_after_the_lesson_once_at_least_and_their_keys_once():
    assert {c.step for c in upstream.CLAIMS} == set(range(1, 10))
    assert len({c.key for c in upstream.CLAIMS}) == len(upstream.CLAIMS)
    assert upstream.claim("xqa_draft").step == 9
    with pytest.raises(KeyError, match="no upstream claim"):
        upstream.claim("nothing")


def test_48167_is_in_0_33_0_and_not_in_0_24_0_which_is_all_the_code_shows(upstream_wheels):
    graphs = upstream.claim("noncausal_graph_claim")
    assert "#48167" in graphs.prs and graphs.since == TODAY and graphs.when() == "in 0.33.0, not in 0.24.0"


def test_a_place_that_changed_has_its_reason_and_one_that_did_not_has_none(upstream_wheels):
    for place in today.PLACES:
        for change in today.changes(place):
            assert bool(change.diff) == bool(change.why), (place.title, change.before)
    assert today.definition(LESSON, FLASHINFER, "FlashInferBackend.supports_non_causal") is None
    assert today.definition(MERGED, FLASHINFER, "FlashInferBackend.supports_non_causal") is not None


def test_the_claims_table_has_one_row_per_claim_each_with_its_verdict_and_release():
    from dflash_fi.figures.today import claims_table

    rows = claims_table(upstream.CLAIMS).splitlines()[2:]
    assert len(rows) == len(upstream.CLAIMS)
    assert all(c.agreement.value in row and c.when() in row for c, row in zip(upstream.CLAIMS, rows))


def test_step_5s_graph_claim_differs_from_upstream_on_the_xqa_gpus_and_says_so():
    graphs = upstream.claim("noncausal_graph_claim")
    assert graphs.agreement is upstream.Agreement.OTHERWISE and "SM 9.0" in graphs.theirs


def test_each_places_reason_is_short_enough_for_a_table_cell():
    assert all(len(why.split()) <= 12 for place in today.PLACES for why in place.why)


def test_the_non_causal_branch_shown_is_0_33_0s_own_lines(upstream_wheels):
    from dflash_fi.figures.today import noncausal_branch

    text = noncausal_branch().text.splitlines()
    own = upstream.definition(TODAY, upstream.CUDA, "_get_backend_priorities").splitlines()
    assert all(line in own for line in text[1:] if line.strip() != "...")
    assert any("not use_non_causal" in line for line in text)


def test_a_failing_walkthrough_check_is_the_only_line_its_detail_gives():
    from types import SimpleNamespace

    from dflash_fi.figures.upstream_next import failing

    ok, bad = (SimpleNamespace(passed=p, line=lambda p=p: f"{'PASS' if p else 'FAIL'}  x") for p in (True, False))
    assert failing([ok, bad]) == "FAIL  x" and failing([ok]) == "" and "no walkthrough check" in failing([])


def test_step_6_moves_one_batch_and_the_verdict_says_which_in_words():
    from dflash_fi.figures.upstream_next import wrapper_verdict
    from dflash_fi.lab.batches import VERIFY

    moved = today.wrappers_moved(5, 6)
    assert [r.batch for r in moved] == [VERIFY]
    claims = {(s, HOPPER): {"resolved_mode": "PIECEWISE", "resolved_mode_flashinfer_target": "PIECEWISE"} for s in (5, 6)}
    text = wrapper_verdict(claims, moved)
    assert "only the target's verify batch of 4 requests moves to the CUDA-graph prefill wrapper (batch size 4)" in text
    assert VERIFY.name not in text


def test_the_closing_verdict_gives_48167_only_the_sms_where_its_claim_changes():
    from dflash_fi.figures.upstream_next import closing_verdict

    def row(claim, draft, mode, trtllm):
        return {"flashinfer_claim": claim, "flashinfer_claim_draft_config": draft, "resolved_mode": mode,
                "trtllm_available": trtllm}

    single, uniform = "UNIFORM_SINGLE_TOKEN_DECODE", "UNIFORM_BATCH"
    claims = {**{(s, HOPPER): row(single, single, "PIECEWISE", False) for s in (4, 5)},
              (6, HOPPER): row(uniform, single, "FULL_AND_PIECEWISE", False),
              **{(s, BLACKWELL): row(uniform, uniform if s == 4 else single, "FULL_AND_PIECEWISE", True)
                 for s in (4, 5, 6)}}
    text = closing_verdict(claims, [])
    assert "PIECEWISE already at step 4" in text and "changes a claim on SM 10.0 with TRTLLM only" in text
    claims[5, HOPPER] = row(single, "NEVER", "PIECEWISE", False)
    assert "on SM 9.0 without TRTLLM and SM 10.0 with TRTLLM only" in closing_verdict(claims, [])


def test_the_priority_verdict_quotes_0_33_0s_own_comment_and_fails_without_it(upstream_wheels, monkeypatch):
    from dflash_fi.figures import today as figures

    comment = figures.upstream_comment()
    assert comment.startswith("SM100f defaults to FlashInfer") and figures.UPSTREAM_WHY in comment
    assert f'"{figures.UPSTREAM_WHY}"' in figures.priority_verdict((RTX_4090, HOPPER, BLACKWELL))
    monkeypatch.setattr(figures, "upstream_comment", lambda: "So prefer FlashAttention when non-causal on SM100f.")
    with pytest.raises(LookupError):
        figures.priority_verdict((RTX_4090, HOPPER, BLACKWELL))
