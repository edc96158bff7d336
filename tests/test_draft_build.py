"""Notebook 07's listing, table, figure and verdicts (dflash_fi.figures.draft_build), on made-up rows: no GPU."""

import pytest

from dflash_fi.figures.draft_build import (FLASH_ATTN, STEP6, STEP7, build_figure, build_outline, build_rows,
                                           build_verdict, closing_verdict, final_paths, gpu_verdict, lengths_verdict,
                                           plans_table, reuse_verdict, route_table, route_verdict)
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
    assert rows[0].startswith("| 4 / 2 (embedded pair) | 32 |") and rows[1].startswith("| 32 / 8 (Qwen3-4B shape) |")
    assert rows[2].endswith("| fa2 | level at 2048, **slower** at 512 (25%) |")  # at 2048 only 0.004 ms: level
    text = route_verdict(shapes, "NVIDIA H200")
    assert text.startswith("on NVIDIA H200, the rule's pick is the faster kernel at 3 of 6 shapes, level at 2, slower "
                           "at 1 (by at most 25%).")
    assert "0.005 ms, the larger, which is the resolution" in text
    assert "fa2's 25% (0.0040 ms) at 8 requests and 2048 counts as level" in text
    assert "XQA at 2 shapes" in text and "fa2 is the faster at 2 of 2 shapes" in text


def rows(step6: bool, layout: str = "build_rows"):
    """Busy times that swing with the host where idle ones do not (as recorded): the figure and verdict read idle."""
    made = [{"kernel": k, "kv_dtype": kv, "batch": b, "context": 512, "num_qo_heads": 4, "num_kv_heads": 2,
             "host_ms_idle": ms * (2 if kv == "fp8-e4m3" else 1), "host_ms_busy": busy, "busy_ms": 5.0}
            for kv in ("bf16", "fp8-e4m3") for b in (1, 32)
            for k, ms, busy in ((STEP7, 0.6, 0.8), (FINAL, 0.018 if b == 1 else 0.016, 0.07 if b == 1 else 0.014),
                                (FLASH_ATTN, 0.006, 0.005 if b == 1 else 0.035))
            + (((STEP6, 0.7, 5.6 + b / 100),) if step6 else ())]
    return {"build_rows": made, "rows": []} if layout == "build_rows" else {"rows": made}  # older passes: in rows


@pytest.mark.parametrize("step6", [False, True])
def test_the_build_figure_compares_idle_builds_and_shows_the_wait_busy_where_step_6_was_timed(step6):
    builds = build_rows(rows(step6))
    assert builds == build_rows(rows(step6, "rows")) and {r["kv_dtype"] for r in builds} == {"bf16"}
    paths = final_paths(builds)
    assert paths == {(1, 512): "kept plan", (32, 512): "XQA"}  # step 9's rule at 4 / 2 heads
    fig = build_figure(builds, paths)
    idle, wait = fig.axes
    assert len(idle.patches) == 2 * 3 and idle.get_yscale() == "log"  # step 7, final, FLASH_ATTN: idle, per shape
    assert sorted(round(p.get_height(), 3) for p in idle.patches) == [0.006, 0.006, 0.016, 0.018, 0.6, 0.6]
    dots = [[round(ms, 3) for ms in line.get_ydata()] for line in wait.lines[1:]]
    assert wait.lines[0].get_ydata()[0] == 5.0 and wait.get_ylim()[1] >= 2 * 5.0
    assert dots == ([[5.61, 5.92]] if step6 else []) + [[0.8, 0.8]]
    assert ("not timed\nin this pass" in [t.get_text() for t in wait.texts]) is not step6
    text = build_verdict(builds, paths)
    assert ("GPU idle, step 7's build takes 0.600-0.600 ms; the final step's takes 97% to 97% less (XQA "
            "0.016-0.016 ms, kept plan 0.018-0.018 ms). What is left") in text  # ranges apart: nothing said of them
    assert "above the FLASH_ATTN draft's at 2 of 2 shapes, by up to 0.012 ms (with the GPU busy these two swing up " \
           "to 7x over the shapes: host noise, so the bars are idle)" in text
    same = [dict(r, host_ms_idle=0.016) if r["kernel"] == FINAL else r for r in builds]
    assert "kept plan 0.016-0.016 ms, ranges that overlap: the page-table launch XQA skips costs the host little). " \
        "What is left" in build_verdict(same, paths)
    if step6:
        assert text.endswith("step 6's takes 5.610-5.920 ms: it waits for the kernel; step 7's 0.800-0.800 ms: "
                             "no wait.")
    else:
        assert text.endswith("step 7's build takes 0.800-0.800 ms: no wait; this pass did not time step 6's, the one "
                             "that waits (the GPU cell below does).")
    close = closing_verdict(builds)
    assert "GPU idle: step 7 0.600-0.600 ms; the final step 0.016-0.018 ms; the FLASH_ATTN draft 0.006-0.006 ms." \
        in close
    assert "not recorded yet" in closing_verdict([]) and build_rows(None) == []


def test_the_lab_runs_read_as_pages_per_request_and_a_table_of_draft_steps():
    lengths = {6: {"copied_from_gpu": True, "exact_seq_lens": [53, 106], "kernel_indptr": [0, 4, 11]},
               7: {"copied_from_gpu": False, "upper_bounds": [56, 121], "planned_indptr": [0, 4, 12],
                   "kernel_indptr": [0, 4, 11]}}
    runner = {6: [{"planned": True}] * 3, 7: [{"planned": False}] * 3}
    assert lengths_verdict(lengths, runner) == (
        "step 6 copies the exact lengths (53, 106) from the GPU. Step 7 copies nothing: it plans from the bounds "
        "(56, 121: 4, 8 pages of 16 tokens), and its kernel reads 4, 7 pages, what the exact lengths need, as at step "
        "6. Of 3 target batches, step 6 plans 3 for the draft layers, step 7 none.")
    def step(i, reqs, plans, empty):
        return {"draft_step": i, "requests": reqs, "plans": plans, "empty_rows": empty, "reads_exact_page_table": True}
    over = {7: [step(i, r, 1, 0) for i, r in enumerate((2, 1, 2))],
            8: [step(0, 2, 1, 0), step(1, 1, 0, 1), step(2, 2, 1, 0)]}
    assert plans_table(over).splitlines() == [
        "| draft step | 0 | 1 | 2 |", "|---|---|---|---|", "| live requests | 2 | 1 | 2 |",
        "| step 8's emptied rows | 0 | 1 | 0 |", "| step 7 plans | yes | yes | yes |",
        "| step 8 plans | yes | - | yes |"]
    assert reuse_verdict(over).startswith("step 7 plans at 3 of 3 draft steps, step 8 at 2 (0, 2): the first")
    over[8][1]["reads_exact_page_table"] = False
    assert reuse_verdict(over).endswith("exact page table: **NOT** at every step.")
    bounded, reused = [{"bounds_vs_exact": 1e-3}], [{"reused_vs_fresh_unsplit": 0.0}]
    assert gpu_verdict(bounded, reused, {6: 5.61, 7: 0.4}).endswith("takes 5.61 ms at step 6 (it waits for the "
                                                                    "queued kernel), 0.40 ms at step 7.")


def test_the_route_rule_is_checked_at_its_bounds_and_one_past_each_on_named_cases():
    from dflash_fi.lab.draft_build import route_cases, route_claim, routes_hold

    cases = route_cases()
    assert [c.expected for c in cases] == [Prefill.XQA] + [Prefill.NON_CAUSAL] * 4 and routes_hold(cases)
    assert route_claim(cases) == ("the route rule takes XQA at SM 9.0, bf16, 4 / 2 heads, 32 requests; fa2 with "
                                  "6 / 2 heads, 31 requests, an fp8 cache, SM 8.9")
    from dataclasses import replace

    assert not routes_hold(cases[:1] + (replace(cases[1], num_qo_heads=4),))  # at the bound: XQA, not fa2


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
