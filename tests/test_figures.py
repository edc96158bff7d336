"""The tutorial's pictures hide nothing: titles, labelled axes, legends off the data, every run and kernel shown.

Drawn from the committed records (walkthrough, kernel benchmark) and vLLM's real selector, on the CPU.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from dflash_fi import figures  # noqa: E402

from dflash_fi.records.runs import label  # noqa: E402
from dflash_fi.records import runs as P  # noqa: E402

FLASH_ATTN = P.FLASH_ATTN
EAGER_RUNS = [FLASH_ATTN, *(P.step_run(s) for s in range(7)), P.FP8]


@pytest.fixture(scope="module")
def recorded():
    import dflash_fi.records.summary as S

    walkthrough = S.read().walkthrough()
    return walkthrough.reference, walkthrough.records


@pytest.fixture(scope="module")
def walkthrough(recorded):
    return recorded[1]


@pytest.fixture(scope="module")
def reference(recorded):
    recorded = recorded[0]
    if "per_position_acceptance" in recorded:
        return recorded
    from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_TARGET, load_prompts
    from dflash_fi.reference.evaluate import evaluate_pair

    return evaluate_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=4), 32)


@pytest.fixture
def drawn():
    """Figures made in a test, closed after it."""
    made = []
    yield made.append
    for fig in made:
        plt.close(fig)


def data_artists(ax):
    return [a for a in (*ax.lines, *ax.patches, *ax.collections, *ax.images) if a.get_visible()]


def extent(artist, renderer):
    """Where an artist lies on the figure; an error bar's line collection reports no window extent, so its data's."""
    import numpy as np

    box = artist.get_window_extent(renderer)
    if not np.isfinite(box.get_points()).all() and hasattr(artist, "get_datalim"):
        box = artist.get_datalim(artist.axes.transData).transformed(artist.axes.transData)
    return box


def legend_texts(fig) -> list[str]:
    return [t.get_text() for legend in all_legends(fig) for t in legend.get_texts()]


def all_legends(fig):
    return [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]


def assert_reads_well(fig, legend_expected=True):
    """A title per panel (or for the figure), labelled axes, and legends covering neither data nor panels."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        assert ax.get_title() or fig.get_suptitle(), "a panel without a title"
        assert ax.get_xlabel(), f"no x label on {ax.get_title()!r}"
    rows = {}
    for ax in fig.axes:  # a y label on each row of panels at least (shared y axes label only the first)
        rows.setdefault(ax.get_subplotspec().rowspan.start, []).append(ax.get_ylabel())
    assert all(any(labels) for labels in rows.values()), rows
    legends = all_legends(fig)
    assert legends or not legend_expected
    for legend in legends:
        box = legend.get_window_extent(renderer)
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0, "legend cut off"
        for ax in fig.axes if legend in fig.legends else [legend.axes]:
            assert not box.overlaps(ax.get_window_extent(renderer)), "legend over a panel"
            for artist in data_artists(ax):
                assert not box.overlaps(extent(artist, renderer)), f"legend over {artist}"


def test_block_masks_have_a_key_and_a_labelled_divider(drawn):
    fig = figures.block_masks(num_context=8)
    drawn(fig)
    assert_reads_well(fig)
    texts = " | ".join(legend_texts(fig))
    assert "may attend to this key" in texts and "may not" in texts and "divider" in texts
    for ax in fig.axes:
        assert any(set(line.get_xdata()) == {7.5} for line in ax.lines), "the context | block divider"


def test_the_selector_grid_explains_its_three_colours_in_plain_words(drawn):
    from dflash_fi.lab.selector import selector_matrix
    from dflash_fi.vocabulary import BLACKWELL, HOPPER, RTX_4090

    rows = [r for r in selector_matrix(steps=(0, 1), capabilities=(RTX_4090, HOPPER, BLACKWELL))
            if r["role"] == "draft"]
    fig = figures.selector_grid(rows)
    drawn(fig)
    assert_reads_well(fig)
    (ax,) = fig.axes
    cells = {tuple(p.get_facecolor()) for p in ax.patches}
    keys = {tuple(h.get_facecolor()) for h in fig.legends[0].legend_handles}
    assert len(cells) == 3 and cells <= keys and len(keys) == 3
    texts = [t.get_text() for t in ax.texts]
    assert not any("unasked" in t for t in texts)
    assert len(texts) == len(rows)
    assert any("no backend at all" in t for t in texts) and any("vLLM picks: FLASH_ATTN" in t for t in texts)
    assert "no backend at all" in " ".join(legend_texts(fig))


def test_acceptance_by_position_shows_coinciding_runs_and_the_reference(drawn, walkthrough, reference):
    runs = [FLASH_ATTN, P.step_run(2), P.step_run(3)]
    fig = figures.acceptance_by_position(walkthrough, runs, reference=reference)
    drawn(fig)
    assert_reads_well(fig)
    (ax,) = fig.axes
    assert ax.get_title() and ax.get_xlabel().startswith("draft position") and "share of drafts" in ax.get_ylabel()
    assert len(ax.lines) == len(runs) + 2
    run_lines, reference_lines = ax.lines[:len(runs)], ax.lines[len(runs):]
    assert len({(line.get_marker(), line.get_linestyle()) for line in run_lines}) == len(runs)
    assert [line.get_linestyle() for line in reference_lines] == ["--", "--"]
    for line, key in zip(reference_lines, ("noncausal", "causal")):
        assert list(line.get_ydata()) == reference["per_position_acceptance"][key]
    texts = legend_texts(fig)
    assert any(t.startswith("reference decoder, non-causal") for t in texts)
    assert any(t.startswith("reference decoder, causal") for t in texts)
    step3 = next(t for t in texts if t.startswith("step 3"))
    difference = max(abs(a - b) for a, b in zip(walkthrough[runs[0]].generate().acceptance.per_position,
                                                 walkthrough[runs[2]].generate().acceptance.per_position))
    assert f"lies on {label(FLASH_ATTN)}: max difference {difference:.3f}" in step3
    assert not any("lies on" in t for t in texts if t.startswith("step 2"))


def test_acceptance_by_position_takes_a_title_and_names_runs_with_nothing_to_draw(drawn, walkthrough):
    fig = figures.acceptance_by_position(walkthrough, [FLASH_ATTN, P.step_run(0)], title="Two runs")
    drawn(fig)
    assert_reads_well(fig)
    assert fig.axes[0].get_title() == "Two runs" and len(fig.axes[0].lines) == 1
    assert any("step 0" in t and "ValueError" in t for t in legend_texts(fig))


def test_tau_by_step_keeps_every_run_and_says_why_a_run_has_no_tau(drawn, walkthrough, reference):
    fig = figures.tau_by_step(walkthrough, reference, EAGER_RUNS)
    drawn(fig)
    assert_reads_well(fig)
    (ax,) = fig.axes
    assert len(ax.get_xticks()) == len(EAGER_RUNS)
    assert len([t for t in ax.get_xticklabels() if t.get_text()]) == len(EAGER_RUNS)
    texts = [t.get_text() for t in ax.texts]
    failed = [walkthrough[run] for run in EAGER_RUNS if walkthrough[run].tau is None]
    assert len(failed) == 2 and all(not r.ok for r in failed)
    for record in failed:
        assert any(record.failure.type in t and record.failure.phase.value in t for t in texts)
    taus = [walkthrough[run].tau for run in EAGER_RUNS if walkthrough[run].tau is not None]
    assert len(ax.patches) == len(taus)
    assert all(f"{tau:.2f}" in texts for tau in taus)


def committed_kernels() -> dict:
    import dflash_fi.records.summary as S

    return S.read().rows(S.Section.BENCH_KERNELS)


def test_kernel_times_show_both_kv_dtypes_and_every_kernel_distinct(drawn):
    from dflash_fi.figures.benchmarks import kernel_rows

    kernels = committed_kernels()
    fig = figures.kernel_times(kernels)
    drawn(fig)
    assert_reads_well(fig)
    assert fig.get_suptitle()
    kv_dtypes, contexts = ("bf16", "fp8-e4m3"), sorted({r["context"] for r in kernels["rows"]})
    assert len(fig.axes) == len(kv_dtypes) * len(contexts)
    for kv in kv_dtypes:
        assert sum(ax.get_title().startswith(f"{kv} KV") for ax in fig.axes) == len(contexts)
    rows = [r for r in kernel_rows(kernels) if (r["num_qo_heads"], r["num_kv_heads"]) == (32, 8)]
    timed = {kv: {r["kernel"] for r in rows if r["kv_dtype"] == kv and "median_ms" in r} for kv in kv_dtypes}
    every = timed["bf16"] | timed["fp8-e4m3"]
    styles = {(line.get_marker(), line.get_linestyle()) for ax in fig.axes for line in ax.lines}
    assert len(styles) == len(every) and len(fig.legends[0].get_texts()) == len(every)
    untimed = every - timed["fp8-e4m3"]  # fa3: no form for an FP8 cache; XQA: not built, step 9 keeps FP8 on fa2
    assert {"flashinfer-fa3", "flashinfer-xqa"} <= untimed
    fp8 = [ax for ax in fig.axes if ax.get_title().startswith("fp8-e4m3")]
    assert all(all(f"no point: {k}" in ax.get_title() for k in untimed) and len(ax.lines) == len(timed["fp8-e4m3"])
               for ax in fp8)


def test_the_path_picture_gives_a_step_the_same_colour_whichever_steps_it_marks(drawn):
    from dflash_fi.figures.path import LANDS, marks_of

    def badge_colours(fig):
        return {t.get_text().split(":")[0]: t.get_bbox_patch().get_facecolor() for t in fig.axes[0].texts
                if t.get_text().startswith("step ") and t.get_bbox_patch() is not None}

    every, later = figures.draft_layer_path(), figures.draft_layer_path(marks_of({s: LANDS[s] for s in (6, 7, 8)}))
    drawn(every), drawn(later)
    assert set(badge_colours(later)) == {"step 6", "step 7", "step 8"}
    assert all(badge_colours(every)[step] == colour for step, colour in badge_colours(later).items())


def test_an_outline_shows_the_lines_asked_for_in_order_each_with_its_note():
    from dflash_fi.figures.listings import outline

    def build(batch):
        split = len(batch)  # where decodes end
        if split:
            plan = "causal"
        return split, plan

    listing = outline(build, {r"def build": "", r"split = ": "the split", r"plan = ": "", r"return": "done"})
    assert listing.text.splitlines()[1:] == ["def build(batch):", "    split = len(batch)  # the split", "        ...",
                                             '        plan = "causal"', "    return split, plan  # done"]
    assert "test_figures" in listing.text.splitlines()[0] and listing.text.count("#") == 2


def test_the_benchmark_figures_still_write(tmp_path, capsys):
    import dflash_fi.records.summary as S

    paths = figures.write_benchmark_figures(S.read(), tmp_path)  # the committed summary: kernels, no draft cost yet
    assert [p.name for p in paths] == ["bench-kernels.svg"] and "bench-draft-cost.svg not drawn" in capsys.readouterr().out
    paths = figures.write_benchmark_figures(fresh_summary(tmp_path), tmp_path)
    assert [p.name for p in paths] == ["bench-draft-cost.svg"]
    assert all(p.parent == tmp_path and p.read_text().lstrip().startswith("<?xml") for p in paths)
    plt.close("all")


def test_no_two_series_share_a_style():
    styles = figures.style.series_styles(32)
    assert len({(s["marker"], s["linestyle"]) for s in styles}) == 32


def test_kernels_over_fa2_draws_each_kernels_time_over_fa2s(drawn):
    import math

    from dflash_fi.figures.benchmarks import kernel_rows

    kernels, kvs = committed_kernels(), ("bf16", "fp8-e4m3")
    fig, over = figures.kernels_over_fa2(kernels, {"flashinfer-fa3": "fa3", "vllm-flash-attn": "FA"}, kvs)
    drawn(fig)
    assert_reads_well(fig)
    ms = {(r["kernel"], r["kv_dtype"], r["batch"], r["context"]): r["median_ms"] for r in kernel_rows(kernels)
          if (r["num_qo_heads"], r["num_kv_heads"]) == (32, 8) and "median_ms" in r}
    (b, c), = [s for s in over["vllm-flash-attn", "bf16"]][:1]
    assert over["vllm-flash-attn", "bf16"][b, c] == ms["vllm-flash-attn", "bf16", b, c] / ms["flashinfer-fa2", "bf16", b, c]
    for ax, kv in zip(fig.axes, kvs):
        assert [list(line.get_ydata()) for line in ax.lines] == [[1, 1]]  # fa2, the reference
        bars = [1 + p.get_height() for p in ax.patches]  # each bar from fa2's line at 1
        want = [*over["flashinfer-fa3", kv].values(), *over["vllm-flash-attn", kv].values()]
        assert len(bars) == len(want) and all(math.isclose(x, y) or (math.isnan(x) and math.isnan(y)) for x, y in zip(bars, want))
    plt.close("all")


# Notebook 08's figure, tables and bottom line, on draft-cost data of the shape `dflash-fi bench e2e --record` writes.
def estimate(value, half):
    return {"value": value, "low": value - half, "high": value + half}


def draft_cost_data():
    """Two pairs x batches 1/8/32: the embedded pair's final draft level on attention and cheaper to build; the
    Qwen3-4B shape's attention slower (the kernel's), growing with the batch; its batch 1 straddling 0."""
    rows = []
    for pair, heads in (("embedded", (4, 2)), ("qwen3-4b-shape", (32, 8))):
        for batch in (1, 8, 32):
            route = "flashinfer-xqa" if heads == (4, 2) and batch >= 8 else "dflash-fi-final"
            attention = 0.0 if pair == "embedded" else (0.001 if batch == 1 else 0.004 * batch ** 0.5)
            rows.append({
                "pair": pair, "batch": batch, "num_qo_heads": heads[0], "num_kv_heads": heads[1],
                "flash_attn": {"attention_ms": 0.1, "build_ms": 0.2, "draft_build_ms": 0.05, "kernel": "vllm-flash-attn"},
                "final": {"attention_ms": 0.1 + attention, "build_ms": 0.197, "draft_build_ms": 0.04, "kernel": route},
                "attention": estimate(attention, 0.002), "attention_aa": estimate(0.0, 0.002),
                "build": estimate(-0.003 if pair == "embedded" else 0.001, 0.002), "build_aa": estimate(0.0, 0.003), "aa_bound_ms": 0.005,
                "aa_within": True, "build_outcome": "MET",
                "kernels": [{"kernel": "vllm-flash-attn", "ms": 0.0125, "share_of_copy": 0.82},
                            {"kernel": "dflash-fi-final", "ms": 0.014, "share_of_copy": 0.74},
                            {"kernel": "flashinfer-xqa", "ms": 0.0125 if route == "flashinfer-xqa" else 0.015,
                             "share_of_copy": 0.45}],
                "fastest_flashinfer": route, "kernel_outcome": "MET"})  # the route runs the fastest: met
    gains = [{"batch": b, "no_speculation": 900.0, "step4": 1900.0, "final": 2000.0, "step4_gain": estimate(2.1, 0.1),
              "final_gain": estimate(2.2, 0.1), "final_over_step4": estimate(1.05, 0.02), "tau_step4": 4.2,
              "tau_final": 4.2} for b in (1, 8, 32)]
    method = {"rounds": 13, "warm_up_rounds": 1, "aa_share": 0.02, "aa_ms": 0.005, "build_ceiling_ms": 0.005,
              "kernel_tolerance": 1.02, "kernel_context": 512, "new_tokens": {"embedded": 256, "qwen3-4b-shape": 128}}
    return {"draft_cost": rows, "rtx4090": gains, "method": method}


def fresh_summary(tmp_path, data=None, inputs=None, rows=None):
    """A summary whose engine benchmark ran the code at hand (or `inputs`) and recorded `data` (and `rows`, beside it,
    as `dflash-fi bench e2e --record` keeps its results: written and read back through the summary's own writer)."""
    import dflash_fi.records.summary as S
    from dflash_fi.freshness import inputs as current
    from dflash_fi.records.provenance import Provenance

    provenance = Provenance("NVIDIA H200", "9.0", {}, "0" * 40, S.Section.BENCH_E2E.command, "2026-12-04T21:00:00Z",
                            inputs=current(S.Section.BENCH_E2E) if inputs is None else inputs)
    if rows is not None:
        root = tmp_path / "evidence"
        S.write(S.Section.BENCH_E2E, draft_cost_data() if data is None else data, provenance, rows, root=root)
        return S.read(root)
    entry = S.Entry(S.Section.BENCH_E2E, provenance, draft_cost_data() if data is None else data)
    return S.Summary(tmp_path / "nvidia-h200.json", {S.Section.BENCH_E2E: entry})


def test_the_draft_cost_is_read_only_where_recorded_by_the_code_at_hand(tmp_path):
    from dflash_fi.errors import NoRecord
    from dflash_fi.figures.costs import read_costs

    costs = read_costs(fresh_summary(tmp_path))
    assert [(s.pair, s.batch) for s in costs.shapes][:2] == [("embedded", 1), ("embedded", 8)]
    assert costs.shapes[1].route == "flashinfer-xqa" and costs.gains[0].final_gain.value == 2.2
    for summary in (fresh_summary(tmp_path, data={"targets": []}), fresh_summary(tmp_path, inputs={"steps": "old"})):
        with pytest.raises(NoRecord):  # not recorded yet, or recorded by other code: no number shown
            read_costs(summary)


def test_the_cost_figure_shows_both_parts_their_noise_and_the_route(drawn, tmp_path):
    from dflash_fi.figures.costs import read_costs

    costs = read_costs(fresh_summary(tmp_path))
    fig = figures.cost_figure(costs)
    drawn(fig)
    assert_reads_well(fig)
    left, right = fig.axes
    assert len(left.containers) == 2 * 2 * len(costs.shapes)  # per shape: build and attention, each with its A/A bar
    labels = [t.get_text() for t in left.get_xticklabels()]
    assert "XQA" in labels[1] and "fa2, kept plan" in labels[0] and len(labels) == len(costs.shapes)
    assert [list(line.get_ydata()) for line in right.lines if line.get_linestyle() == "-"][-1] == [1, 1]
    texts = " | ".join(legend_texts(fig))
    assert "A/A pair" in texts and "host build" in texts and "draft attention" in texts and "RTX 4090" in texts


def test_a_difference_inside_the_aa_pairs_noise_is_level_everywhere_it_is_told(tmp_path):
    """One rule for every verdict: a build of +0.004 [+0.002, +0.005] meets its target (at most +0.005) and is level
    (within the A/A bound), never 'costs more'."""
    from dflash_fi.figures.cost_verdicts import beyond_noise, bottom_line, figure_verdict
    from dflash_fi.figures.costs import read_costs

    data = draft_cost_data()
    for row in data["draft_cost"]:
        row["attention"] = {"value": 0.0, "low": -0.001, "high": 0.001}
        row["build"] = {"value": 0.004, "low": 0.002, "high": 0.005}
    costs = read_costs(fresh_summary(tmp_path, data))
    assert {beyond_noise(s.build, s.aa_bound_ms) for s in costs.shapes} == {0}
    assert "at 0 of 6 shapes, less at 0, and is level at 6." in bottom_line(costs)
    assert "at 0 of 6 shapes; elsewhere the two drafts are level." in figure_verdict(costs)


def test_the_bottom_line_says_where_the_final_draft_stands_and_why(tmp_path):
    from dflash_fi.figures.cost_verdicts import bottom_line, figure_verdict, targets_verdict
    from dflash_fi.figures.costs import cost_table, read_costs, recorded_on
    from dflash_fi.figures.gains import gain_table, gain_verdict

    costs = read_costs(fresh_summary(tmp_path))
    line = bottom_line(costs)
    # the Qwen3-4B shape's batches 8 and 32 cost more (attention beyond the A/A bound); the embedded pair's builds
    # (-0.003 [-0.005, -0.001]) stay inside the noise: level
    assert "at 2 of 6 shapes, less at 0, and is level at 4." in line
    assert "it is the kernel. The largest gap" in line and "Qwen3-4B shape, batch 32" in line and "74% of copy bandwidth" in line
    assert ("2.20x no speculation's tokens/s at every batch; with the PR's own step-4 draft at 2.10x no speculation's "
            "tokens/s at every batch") in line
    assert cost_table(costs).count("\n") == len(costs.shapes) + 1 and gain_table(costs).count("\n") == 4
    assert "high end at most +0.005 ms) is met at 6 of 6" in targets_verdict(costs) and "(within 2%) at 6" in \
        targets_verdict(costs)
    assert "12 measured rounds after 1 warm-up" in recorded_on(costs) and "context 512" in recorded_on(costs)
    assert "[2.00x, " in gain_table(costs) and "/ FlashAttention 0.0125 (82%)" in cost_table(costs)
    assert figure_verdict(costs).endswith(
        "at 2 of 6 shapes: Qwen3-4B shape, batch 8; Qwen3-4B shape, batch 32; elsewhere the two drafts are level.")
    assert "2.20x no speculation's tokens/s at every batch" in gain_verdict(costs) and "time per step" in \
        gain_verdict(costs)
    assert bottom_line(None).endswith("not recorded yet: the GPU pass measures it.")


def test_the_recorded_route_is_checked_against_the_final_steps_rule(tmp_path):
    from dflash_fi.figures.cost_engines import route_agrees, routes_checked
    from dflash_fi.figures.costs import read_costs
    from dflash_fi.lab.draft_route import final_draft_route
    from dflash_fi.lab.routes import Prefill

    data = draft_cost_data()
    for row in data["draft_cost"]:  # the route step 9's rule gives on an H200
        rule = final_draft_route((9, 0), "auto", row["num_qo_heads"], row["num_kv_heads"], row["batch"])
        row["final"]["kernel"] = "flashinfer-xqa" if rule is Prefill.XQA else "dflash-fi-final"
    costs = read_costs(fresh_summary(tmp_path, data))
    assert all(route_agrees(costs, s) for s in costs.shapes)
    first = data["draft_cost"][0]["final"]  # the embedded pair at batch 1: fa2, whatever the rule's threshold
    first["kernel"] = "flashinfer-xqa"
    wrong = read_costs(fresh_summary(tmp_path, data))
    assert not route_agrees(wrong, wrong.shapes[0]) and route_agrees(wrong, wrong.shapes[1])
    assert routes_checked(costs) == (True, "") and routes_checked(wrong) == (False, wrong.shapes[0].name)
    # Each build judged at the requests it drafted for: a batch drains as its requests finish, so a turn at a batch the
    # rule sends to XQA also drafts for fewer requests, which the rule sends to fa2.
    row = next(r for r in data["draft_cost"]
               if final_draft_route((9, 0), "auto", r["num_qo_heads"], r["num_kv_heads"], r["batch"]) is Prefill.XQA)
    row["final"]["kernel"] = "dflash-fi-final"  # most builds: fa2
    row["final"]["routes"] = [{"kernel": "flashinfer-xqa", "num_reqs": row["batch"], "builds": 11},
                              {"kernel": "dflash-fi-final", "num_reqs": 1, "builds": 65}]
    def judged() -> bool:
        read = read_costs(fresh_summary(tmp_path, data))
        return route_agrees(read, next(s for s in read.shapes if (s.batch, s.heads) == (
            row["batch"], (row["num_qo_heads"], row["num_kv_heads"]))))
    assert judged()
    row["final"]["routes"][1]["num_reqs"] = row["batch"]  # fa2 at the full batch: against the rule
    assert not judged()
    del data["draft_cost"][0]["num_qo_heads"]  # a shape whose drafter's heads were not recorded: nothing to judge
    assert routes_checked(None) is None and routes_checked(read_costs(fresh_summary(tmp_path, data))) is None


def test_notebook_08_describes_the_benchmarks_engines_as_the_benchmark_runs_them(tmp_path):
    """Before a pass recorded them, notebook 08 describes the engine benchmark's engines from run ids alone: they are
    the benchmark's; once recorded, they are read back with what vLLM resolved in each."""
    from dflash_fi.errors import NoRecord
    from dflash_fi.figures.cost_engines import planned_engines, planned_table, recorded_engines, resolved_columns
    from dflash_fi.proof.bench.e2e import bench_runs, final_step
    from dflash_fi.records.engine import EngineRecord
    from dflash_fi.records.spec import RunSpec

    runs = [r for pair in (P.Pair.EMBEDDED, P.Pair.QWEN3_4B_SHAPE) for r in bench_runs(pair)]
    assert sorted(map(repr, (r for r, _ in planned_engines(final_step())))) == sorted(map(repr, runs))
    assert planned_table(final_step()).count("\n") == len(runs) + 1
    with pytest.raises(NoRecord):
        recorded_engines(fresh_summary(tmp_path))
    record = EngineRecord(RunSpec(run=runs[0], target="t", drafter="d"), True, cudagraph_mode="FULL_AND_PIECEWISE")
    with pytest.raises(NoRecord):  # the section's data does not hold the engines: the rows beside it do
        recorded_engines(fresh_summary(tmp_path, {**draft_cost_data(), "engines": [record.to_json()]}))
    engines = recorded_engines(fresh_summary(tmp_path, rows={"engines": [record.to_json()]}))
    assert [e.run for e in engines] == [runs[0]]
    assert resolved_columns(engines)[P.label(runs[0])]["CUDA-graph mode"] == "FULL_AND_PIECEWISE"


def test_notebook_08_says_whether_each_pairs_engines_differ_in_the_drafts_backend_alone():
    from dflash_fi.figures.cost_engines import engines_verdict, planned_engines
    from dflash_fi.proof.bench.e2e import final_step
    from dflash_fi.records.engine import Backend, EngineRecord
    from dflash_fi.records.spec import RunSpec

    flash_attn = Backend("vllm.v1.attention.backends.flash_attn.FlashAttentionBackend", "FLASH_ATTN")
    flashinfer = Backend("vllm.v1.attention.backends.flashinfer.FlashInferBackend", "FLASHINFER", final_step())

    def records(twin=flash_attn, path_fa=2):
        path = ("none", "pr", "path")
        return [EngineRecord(RunSpec(run=run, target="t", drafter="d"), True, cudagraph_mode="FULL_AND_PIECEWISE",
                             draft_backends=() if role == "none" else ({"a": flash_attn, "aa": twin}.get(role, flashinfer),),
                             flash_attn_version=path_fa if role in path else 3)
                for run, role in planned_engines(final_step())]
    good = engines_verdict(records(), final_step())
    assert good.endswith(". Each pair's three engines differ in the draft alone; the RTX 4090 path's run as its users "
                         "would, whatever vLLM resolves there.")
    assert "CUDA graphs FULL_AND_PIECEWISE without speculation, FULL_AND_PIECEWISE with step 4's draft" in good
    assert good.startswith("embedded pair: CUDA graphs") and "the RTX 4090 path: FlashAttention 2 in all three" in good
    assert "NOT what the comparisons need" in engines_verdict(records(twin=flashinfer), final_step())
    assert "FlashAttention NOT 2 in every engine" in engines_verdict(records(path_fa=3), final_step())


def test_acceptance_by_position_gives_a_run_its_own_style_whichever_runs_are_drawn(drawn, walkthrough):
    import re

    def style(fig, n):
        line = fig.axes[0].lines[n]
        return line.get_color(), line.get_marker(), line.get_linestyle()

    two = figures.acceptance_by_position(walkthrough, [FLASH_ATTN, P.step_run(2)])  # notebook 02's
    three = figures.acceptance_by_position(walkthrough, [FLASH_ATTN, P.step_run(2), P.step_run(3)])  # 03's
    alone = figures.acceptance_by_position(walkthrough, [P.step_run(3)])
    drawn(two), drawn(three), drawn(alone)
    assert style(two, 0) == style(three, 0) and style(two, 1) == style(three, 1)
    assert style(alone, 0) == style(three, 2) != style(three, 1)
    taus = [t.splitlines()[0] for t in legend_texts(three) if ": tau " in t]
    assert len(taus) == 3 and all(re.search(r": tau \d+\.\d{3}$", t) for t in taus)  # as the checks print tau


def test_the_cost_table_names_the_fastest_flashinfer_kernel_where_the_route_is_not_it(tmp_path):
    from dflash_fi.figures.costs import cost_table, read_costs

    data = draft_cost_data()
    row = data["draft_cost"][0]  # the embedded pair at batch 1: fa2 with its plan kept
    row.update(fastest_flashinfer="flashinfer-xqa", kernel_outcome="MISSED")
    row["kernels"][2]["ms"] = 0.0120
    first = cost_table(read_costs(fresh_summary(tmp_path, data))).splitlines()[2]
    assert "| fa2, kept plan 0.0140 (74%) / FlashAttention 0.0125 (82%) | XQA 0.0120 (45%): **missed** |" in first
    assert "the route's: **met**" in cost_table(read_costs(fresh_summary(tmp_path))).splitlines()[2]


def test_the_acceptance_verdicts_give_every_tau_to_three_decimals(walkthrough, reference):
    import re

    from dflash_fi.figures.acceptance import noncausal_fix_verdict, pr_tau_verdict

    eager = {run: walkthrough[run] for run in (P.step_run(2), P.step_run(3), P.step_run(4)) if run in walkthrough}
    for text in (pr_tau_verdict(eager, reference),
                 noncausal_fix_verdict(walkthrough, [FLASH_ATTN, P.step_run(2), P.step_run(3)], reference)):
        numbers = re.findall(r"(?<![\w.])\d+\.\d+(?![\w.])", text)
        assert numbers and all(len(n.split(".")[1]) == 3 for n in numbers), text
    steps = noncausal_fix_verdict(walkthrough, [FLASH_ATTN, P.step_run(2), P.step_run(3)], reference)
    assert f"tau {walkthrough[P.step_run(3)].tau:.3f}" in steps and "step 2 starts below" in steps


def test_acceptance_by_position_names_the_run_each_reference_curve_is_closest_to(drawn, walkthrough, reference):
    from dflash_fi.figures.style import max_difference

    runs = [FLASH_ATTN, P.step_run(2)]  # notebook 02's figure
    fig = figures.acceptance_by_position(walkthrough, runs, reference=reference)
    drawn(fig)
    texts = legend_texts(fig)
    for key, name in (("noncausal", "reference decoder, non-causal"), ("causal", "reference decoder, causal")):
        curve = reference["per_position_acceptance"][key]
        run, difference = min(((r, max_difference(curve, walkthrough[r].generate().acceptance.per_position))
                               for r in runs), key=lambda x: x[1])
        text = next(t for t in texts if t.startswith(name + "\n") or t == name)
        assert f"{label(run)}: max difference {difference:.3f}" in text, text


def test_the_rtx4090_gain_says_when_the_engines_graphs_differ_and_the_bottom_line_weighs_a_step(tmp_path):
    from dflash_fi.figures.cost_verdicts import bottom_line
    from dflash_fi.figures.costs import read_costs
    from dflash_fi.figures.gains import gain_verdict

    data = draft_cost_data()
    for row in data["draft_cost"]:
        row["flash_attn"]["step_ms"] = 2.3
    costs = read_costs(fresh_summary(tmp_path, data))
    same = {"none": "FULL_AND_PIECEWISE", "pr": "FULL_AND_PIECEWISE", "path": "FULL_AND_PIECEWISE"}
    assert "not the draft's alone" not in gain_verdict(costs, same)
    assert "(PIECEWISE with step 4's draft, FULL_AND_PIECEWISE with the final one" in gain_verdict(
        costs, {**same, "pr": "PIECEWISE"})
    # the Qwen3-4B shape at batch 32 costs +0.023 ms of attention and +0.001 of build: 1.0% of a 2.3-ms step
    line = bottom_line(costs)
    assert "That is 1.0% of the FLASH_ATTN draft's 2.30-ms decoding step (Qwen3-4B shape, batch 32; 1.2% at the" in line
    assert "the FLASH_ATTN draft stays the better backend for the draft where they differ" in line
