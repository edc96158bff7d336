"""Notebooks 02-04's figure, listing and verdict helpers: what they draw and say follows the data, and names the
reference curves as the legends do."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from dflash_fi.records import runs as P  # noqa: E402


@pytest.fixture(scope="module")
def recorded():
    import dflash_fi.records.summary as S

    return S.read().walkthrough()


def test_tau_labels_stay_off_the_dashed_reference_lines(recorded):
    from dflash_fi.figures import tau_by_step

    runs = [run for run in (P.FLASH_ATTN, *(P.step_run(s) for s in range(5))) if run in recorded.records]
    fig = tau_by_step(recorded.records, recorded.reference, runs)
    try:
        (ax,) = fig.axes
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        lines = [line.get_ydata()[0] for line in ax.lines if line.get_linestyle() == "--"]
        labels = [t for t in ax.texts if t.get_text().replace(".", "").isdigit()]
        assert len(lines) == 2 and labels
        clear = 0.05 * (ax.get_ylim()[1] - ax.get_ylim()[0])  # a label just under a line reads as on it
        for text in labels:
            box = text.get_window_extent(renderer).transformed(ax.transData.inverted())
            assert all(y < box.y0 - clear or y > box.y1 + clear for y in lines), f"{text.get_text()} on a line"
    finally:
        plt.close(fig)


def test_the_verdicts_name_the_reference_curves_as_the_legend_does(recorded):
    from dflash_fi.figures.acceptance import CURVE_NAME, causal_drift_verdict

    runs = [P.FLASH_ATTN, P.step_run(2)]
    if not all(recorded.records.get(run) and recorded.records[run].tau for run in runs):
        pytest.skip("the committed walkthrough has no tau for these runs")
    said = causal_drift_verdict(recorded.records, runs, recorded.reference)
    assert all(f"'{name}'" in said for name in CURVE_NAME.values())
    assert "reference's" not in said and "non-causal reference" not in said


def test_step_4_gating_keeps_the_draft_off_trtllm_and_the_targets_as_stock():
    from dflash_fi.figures.path import gating_verdict, trtllm_gating
    from dflash_fi.lab.routes import Prefill

    gating = trtllm_gating()
    assert gating.before.prefill is Prefill.TRTLLM and gating.after.prefill is Prefill.NON_CAUSAL
    assert gating.targets_as_stock and len(gating.warnings) == 1
    said = gating_verdict(gating)
    assert "logs once" in said and "same in every column" in said
    assert "a bug" in gating_verdict(gating._replace(targets_as_stock=False))


def test_a_hunk_shown_in_part_shows_that_part_and_says_how_much_is_left_out():
    from dflash_fi.figures.listings import hunk_blocks
    from dflash_fi.lab.hunks import step_hunks

    hunks = step_hunks(3, 1)
    whole = hunk_blocks(3, hunks, [2], None).text
    part = hunk_blocks(3, hunks, [2], {2: slice(-14, None)}).text
    assert "def _check_non_causal_supported" in whole and "def _check_non_causal_supported" not in part
    assert "+        if not causal:" in part and part.endswith("lines of it left out: the whole diff is in this "
                                                             "notebook's appendix")
    left = len(whole.splitlines()) - 1 - 14  # its heading, the lines shown
    assert f"... {left} lines of it left out" in part
