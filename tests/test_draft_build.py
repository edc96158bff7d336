"""Notebook 07's listing, table, figure and verdicts (dflash_fi.figures.draft_build), on made-up rows: no GPU."""

import pytest

from dflash_fi.figures.draft_build import (FLASH_ATTN, STEP6, STEP7, build_figure, build_outline,
                                           build_rows, build_verdict, busy_ranges, final_paths, route_table,
                                           route_verdict)
from dflash_fi.lab.draft_route import ShapeRoute
from dflash_fi.lab.routes import Prefill

FINAL = "build: step 9 FLASHINFER draft"


def test_the_outline_marks_the_lines_that_cost_the_host_with_the_step_that_cuts_them():
    text = build_outline().text
    for where in ("step 7", "step 8", "step 9", "plan("):
        assert where in text


def test_the_route_table_has_one_short_row_per_heads_and_requests_and_the_verdict_says_what_level_means():
    shapes = [ShapeRoute("bf16", 4, 2, 32, c, xqa, 0.1, Prefill.XQA) for c, xqa in ((512, 0.101), (2048, 0.09))]
    shapes += [ShapeRoute("bf16", 32, 8, 8, c, 1.5, 1.0, Prefill.NON_CAUSAL) for c in (512, 2048)]
    shapes += [ShapeRoute("bf16", 4, 2, 8, c, fa2 * 0.8, fa2, Prefill.NON_CAUSAL)
               for c, fa2 in ((512, 1.0), (2048, 0.02))]
    rows = route_table(shapes).splitlines()[2:]
    assert len(rows) == 3
    assert rows[0].endswith("| XQA | level at 512 |") and rows[1].endswith("| fa2 | faster |")
    assert rows[2].endswith("| fa2 | level at 2048, **slower** at 512 (25%) |")  # at 2048 only 0.004 ms: level
    text = route_verdict(shapes, "NVIDIA H200")
    assert text.startswith("on NVIDIA H200, the rule's pick is the faster kernel at 3 of 6 shapes, level at 2, slower "
                           "at 1 (by at most 25%).")
    assert "0.005 ms, the larger, which is the resolution" in text
    assert "fa2's 25% (0.0040 ms) at 8 requests and 2048 counts as level" in text
    assert "XQA at 2 shapes" in text and "fa2 is the faster at 2 of 2 shapes" in text


def rows(step6: bool, layout: str = "build_rows"):
    made = [{"kernel": k, "kv_dtype": kv, "batch": b, "context": 512, "num_qo_heads": 4, "num_kv_heads": 2,
             "host_ms_busy": ms * (2 if kv == "fp8-e4m3" else 1), "busy_ms": 5.0}
            for kv in ("bf16", "fp8-e4m3") for b in (1, 32)
            for k, ms in ((STEP7, 0.8), (FINAL, 0.05 if b == 1 else 0.02), (FLASH_ATTN, 0.03))
            + (((STEP6, 5.6 + b / 100),) if step6 else ())]
    return {"build_rows": made, "rows": []} if layout == "build_rows" else {"rows": made}  # older passes: in rows


@pytest.mark.parametrize("step6", [False, True])
def test_the_build_figure_draws_step_6_where_timed_and_the_verdict_says_whether_it_waited(step6):
    builds = build_rows(rows(step6))
    assert builds == build_rows(rows(step6, "rows")) and {r["kv_dtype"] for r in builds} == {"bf16"}
    paths = final_paths(builds)
    assert paths == {(1, 512): "kept plan", (32, 512): "XQA"}  # step 9's rule at 4 / 2 heads
    fig = build_figure(builds, paths)
    ax = fig.axes[0]
    assert len(ax.patches) == 2 * (4 if step6 else 3) and ax.get_yscale() == "log"
    assert [line.get_ydata()[0] for line in ax.lines] == [5.0] and ax.get_ylim()[1] >= 2 * 5.0
    text = build_verdict(builds)
    assert "The final step cuts step 7's build by 94% to 98%, and is above the FLASH_ATTN draft's at 1 of 2 shapes, " \
           "by up to 0.020 ms." in text
    if step6:
        assert "step 6's build takes 5.61 to 5.92 ms: it waits for that kernel. Step 7's takes 0.800 to 0.800 ms: " \
               "no wait." in text
        assert busy_ranges(builds).startswith("step 6 5.610-5.920 ms; step 7 0.800-0.800 ms; the final step")
    else:
        assert "this pass did not time step 6's" in text and busy_ranges(builds).startswith("step 7 ")
    assert busy_ranges([]) == "not recorded yet" and build_rows(None) == []


def test_the_note_under_the_benchmark_says_which_pass_and_whether_it_ran_this_code(tmp_path):
    import dflash_fi.records.summary as S
    from dflash_fi.freshness import inputs
    from dflash_fi.records.provenance import Provenance

    def summary(ran):
        made = Provenance("NVIDIA H200", "9.0", {}, "0123456789abcdef", S.Section.BENCH_KERNELS.command,
                          "2026-12-04T21:00:00Z", inputs=ran)
        entry = S.Entry(S.Section.BENCH_KERNELS, made, {})
        return S.Summary(tmp_path / "nvidia-h200.json", {S.Section.BENCH_KERNELS: entry})
    now = inputs(S.Section.BENCH_KERNELS)
    head = "Kernel benchmark: NVIDIA H200 pass of 2026-12-04 (commit 0123456789), "
    from dflash_fi.notebook import section_note

    note = lambda ran: section_note(S.Section.BENCH_KERNELS, summary(ran))  # noqa: E731
    assert note(now) == head + "this code."
    later = ": its numbers may change."
    assert note({}) == head + "older code (that pass did not record what it ran)" + later
    assert note({**now, "bench": "0"}) == head + "older code (changed since: bench)" + later
