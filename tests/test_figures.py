"""The tutorial's pictures hide nothing: titles, labelled axes, legends off the data, every run and kernel shown.

Drawn from the committed records (walkthrough, kernel benchmark) and vLLM's real selector, on the CPU.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from dflash_fi import figures  # noqa: E402

from dflash_fi.engine.identity import label  # noqa: E402
from dflash_fi.evidence import plan as P  # noqa: E402

FLASH_ATTN = P.FLASH_ATTN
EAGER_RUNS = [FLASH_ATTN, *(P.step_run(s) for s in range(7)), P.FP8]


@pytest.fixture(scope="module")
def recorded():
    import dflash_fi.summary as S

    records, reference, _, _, _ = S.read().walkthrough()
    return reference, records


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
                assert not box.overlaps(artist.get_window_extent(renderer)), f"legend over {artist}"


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


def test_kernel_times_show_both_kv_dtypes_and_every_kernel_distinct(drawn):
    from dflash_fi.bench.results import kernel_rows, latest_kernels

    kernels = latest_kernels()
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


def test_the_kernel_against_flash_attn_makes_flash_attn_the_line_that_stands_out(drawn):
    from dflash_fi.bench.kernels import BATCHES
    from dflash_fi.bench.results import final_draft_kernel, kernel_ratios, kernel_rows, latest_kernels

    kernels = latest_kernels()
    fig = figures.kernel_against_flash_attn(kernels, BATCHES)
    drawn(fig)
    assert_reads_well(fig)
    kv_dtypes = list(dict.fromkeys(r["kv_dtype"] for r in kernel_rows(kernels)))  # one panel each, in this order
    assert len(fig.axes) == len(kv_dtypes)
    for ax, kv in zip(fig.axes, kv_dtypes):
        reference, *others = ax.lines
        assert list(reference.get_ydata()) == [1.0, 1.0]
        assert others and all(reference.get_linewidth() > 2 * line.get_linewidth() for line in others)
        drawn_points = sorted(y for line in others for y in line.get_ydata())
        final = final_draft_kernel(kernels, kv)
        assert drawn_points == sorted(r["ratio"] for r in kernel_ratios(kernels, final, "vllm-flash-attn", kv,
                                                                         batches=BATCHES))
        assert {int(x) for line in others for x in line.get_xdata()} <= set(BATCHES)
    assert "vLLM's FlashAttention" in legend_texts(fig)[0]


def test_the_path_picture_gives_a_step_the_same_colour_whichever_steps_it_marks(drawn):
    from dflash_fi.figures.path import LANDS, marks_of

    def badge_colours(fig):
        return {t.get_text().split(":")[0]: t.get_bbox_patch().get_facecolor() for t in fig.axes[0].texts
                if t.get_text().startswith("step ") and t.get_bbox_patch() is not None}

    every, later = figures.draft_layer_path(), figures.draft_layer_path(marks_of({s: LANDS[s] for s in (6, 7, 8)}))
    drawn(every), drawn(later)
    assert set(badge_colours(later)) == {"step 6", "step 7", "step 8"}
    assert all(badge_colours(every)[step] == colour for step, colour in badge_colours(later).items())


def test_the_benchmark_figures_still_write(tmp_path):
    from dflash_fi.bench.results import latest_kernels
    from dflash_fi.bench.turns import latest_turns
    from dflash_fi.errors import NoRecord

    try:
        turns = latest_turns()
    except NoRecord:
        turns = None
    paths = figures.write_benchmark_figures(latest_kernels(), turns, tmp_path)
    assert [p.name for p in paths] == ["bench-kernels.svg"] + (["bench-e2e.svg", "bench-draft-step.svg"] if turns else [])
    assert all(p.parent == tmp_path and p.read_text().lstrip().startswith("<?xml") for p in paths)
    plt.close("all")


def test_no_two_series_share_a_style():
    styles = figures.style.series_styles(32)
    assert len({(s["marker"], s["linestyle"]) for s in styles}) == 32


def test_kernels_over_fa2_draws_each_kernels_time_over_fa2s(drawn):
    import math

    from dflash_fi.bench.results import kernel_rows, latest_kernels

    kernels, kvs = latest_kernels(), ("bf16", "fp8-e4m3")
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
