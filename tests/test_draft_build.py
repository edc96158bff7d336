"""Notebook 07's listing, table and figure (dflash_fi.figures.draft_build), on made-up rows: no GPU, no evidence."""

from dflash_fi.figures.draft_build import FLASH_ATTN, STEP7, build_figure, build_outline, route_table
from dflash_fi.lab.draft_route import ShapeRoute
from dflash_fi.lab.routes import Prefill


def test_the_outline_marks_the_lines_that_cost_the_host_with_the_step_that_cuts_them():
    text = build_outline().text
    for where in ("step 7", "step 8", "step 9", "plan("):
        assert where in text


def test_the_route_table_has_one_row_per_heads_and_requests_and_says_where_a_pick_is_not_the_faster():
    shapes = [ShapeRoute("bf16", 4, 2, 8, c, xqa, 1.0, Prefill.XQA) for c, xqa in ((512, 1.01), (2048, 0.9))]
    shapes += [ShapeRoute("bf16", 32, 8, 8, c, 1.5, 1.0, Prefill.NON_CAUSAL) for c in (512, 2048)]
    rows = route_table(shapes).splitlines()[2:]
    assert len(rows) == 2
    assert "| XQA | level at 512 (slower by 1%, 0.01 ms: level by the 2% rule) |" in rows[0]
    assert rows[1].endswith("| fa2 | faster |")


def test_the_build_figure_draws_step_7_the_final_step_and_flash_attn():
    rows = [{"kernel": k, "batch": b, "context": 512, "host_ms_busy": ms}
            for b in (1, 8) for k, ms in ((STEP7, 0.8), ("build: step 9 FLASHINFER draft", 0.05), (FLASH_ATTN, 0.03))]
    fig, final = build_figure(rows, {(1, 512): "kept plan", (8, 512): "XQA"})
    assert final == "build: step 9 FLASHINFER draft"
    assert len(fig.axes[0].patches) == 6 and fig.axes[0].get_yscale() == "log"
