"""Pictures of the benchmarks: every kernel's time per call, kernels over fa2's (notebook 05), and what the final
draft costs end to end (notebook 08's one figure).

They take the benchmark's results as the evidence summary keeps them (`{"gpu", "rows"}`); a row that timed a kernel
has `median_ms`, one where the kernel failed `error`, and the benchmark's host-build rows have neither.
`write_benchmark_figures` (`dflash-fi figures`) writes them and notebook 08's figure as SVG under docs/figures/ (text
files, so the tree stays free of binaries).
"""

from __future__ import annotations

from pathlib import Path

from dflash_fi.figures.style import figure_legend, pyplot, series_styles

FIGURES_DIR = Path(__file__).resolve().parents[2] / "docs" / "figures"


def kernel_rows(results: dict) -> list[dict]:
    """The rows that timed a kernel, or say why it could not run (not the host-build rows)."""
    return [r for r in results["rows"] if "median_ms" in r or "error" in r]


def _kernel_label(kernel: str, rows: list[dict]) -> str:
    """The kernel's name and what it ran per KV dtype (`flashinfer-auto` picks fa2 or fa3), so that lines
    lying on each other say why."""
    ran = {}
    for r in rows:
        if r["kernel"] == kernel and r.get("ran"):
            ran.setdefault(r["kv_dtype"], set()).add(r["ran"])
    variants = {kv: "/".join(sorted(backends)) for kv, backends in ran.items()}
    if not variants:
        return kernel
    if len(set(variants.values())) == 1:
        return f"{kernel} (ran {next(iter(variants.values()))})"
    return f"{kernel} (ran " + ", ".join(f"{b} on {kv} KV" for kv, b in variants.items()) + ")"


def kernel_times(results: dict, num_qo_heads: int = 32, num_kv_heads: int = 8,
                 kv_dtypes: tuple[str, ...] | None = None):
    """Median time per call by batch: one row of panels per KV dtype (`kv_dtypes`, default every one in the
    results), one column per context length, one line per kernel. Kernels with no time in a panel (they
    failed there) are named in its title."""
    from matplotlib.ticker import NullFormatter, NullLocator

    from dflash_fi.vocabulary import DRAFT_BLOCK_SIZE

    plt = pyplot()
    rows = [r for r in kernel_rows(results) if (r["num_qo_heads"], r["num_kv_heads"]) == (num_qo_heads, num_kv_heads)]
    kv_dtypes = list(kv_dtypes or dict.fromkeys(r["kv_dtype"] for r in rows))
    contexts = sorted({r["context"] for r in rows})
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))  # in the benchmark's order
    styles = dict(zip(kernels, series_styles(len(kernels))))
    size = (4.4 * len(contexts), 3.4 * len(kv_dtypes) + 0.8)
    fig, axes = plt.subplots(len(kv_dtypes), len(contexts), figsize=size, squeeze=False, layout="constrained")
    handles = {}
    for axes_row, kv in zip(axes, kv_dtypes):
        for ax, context in zip(axes_row, contexts):
            here = [r for r in rows if r["kv_dtype"] == kv and r["context"] == context]
            missing = []
            for kernel in kernels:
                points = sorted((r["batch"], r["median_ms"]) for r in here
                                if r["kernel"] == kernel and "median_ms" in r)
                if not points:
                    # rows recorded before error types were kept name none: "error" says that much
                    errors = {r.get("error_type", "error") for r in here if r["kernel"] == kernel and "error" in r}
                    missing.append(f"{kernel} ({', '.join(sorted(errors))})" if errors else kernel)
                    continue
                handles[kernel], = ax.plot(*zip(*points), **styles[kernel])
            batches = sorted({r["batch"] for r in here})
            ax.set_xscale("log", base=2), ax.set_yscale("log")
            ax.set_xticks(batches, [str(b) for b in batches])
            ax.xaxis.set_minor_locator(NullLocator())
            ax.yaxis.set_minor_formatter(NullFormatter())  # log-axis minor labels crowd the panel
            ax.grid(alpha=0.3, which="both")
            ax.set_title(f"{kv} KV, context {context}" + "".join(f"\nno point: {m}" for m in missing), fontsize=9)
            ax.set_xlabel(f"batch (requests of {DRAFT_BLOCK_SIZE} queries)", fontsize=8)
        axes_row[0].set_ylabel(f"{kv} KV\nms per call (median)")
    ordered = [k for k in kernels if k in handles]
    figure_legend(fig, [handles[k] for k in ordered], [_kernel_label(k, rows) for k in ordered],
                  title="kernel (and the attention kernel it ran)")
    fig.suptitle(f"{results.get('gpu', 'GPU')}: non-causal paged attention at DFlash shapes, {num_qo_heads}/"
                 f"{num_kv_heads} heads", fontsize=11)
    return fig


def kernels_over_fa2(results: dict, kinds: dict[str, str], kv_dtypes: tuple[str, ...], heads=(32, 8)):
    """(figure, ratios): each of `kinds` (kernel: legend label) over FlashInfer fa2's time, step 5's draft kernel, per
    batch x context; one panel per KV dtype, fa2 the thick line at 1. ratios[kernel, kv][batch, context]; NaN where a
    kernel has no time."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullLocator

    ms = {(r["kernel"], r["kv_dtype"], r["batch"], r["context"]): r["median_ms"] for r in kernel_rows(results)
          if (r["num_qo_heads"], r["num_kv_heads"]) == heads and "median_ms" in r}
    shapes = sorted({key[2:] for key in ms}, key=lambda s: s[::-1])
    over = {(k, kv): {s: ms.get((k, kv, *s), float("nan")) / ms["flashinfer-fa2", kv, *s] for s in shapes}
            for k in kinds for kv in kv_dtypes}
    fig, axes = pyplot().subplots(1, len(kv_dtypes), figsize=(11, 1.9), sharey=True, squeeze=False,
                                  layout="constrained")
    for ax, kv in zip(axes[0], kv_dtypes):
        for k, (kernel, name) in enumerate(kinds.items()):
            ax.bar([i + (k - 0.5) * 0.4 for i in range(len(shapes))], [r - 1 for r in over[kernel, kv].values()],
                   bottom=1, width=0.4, label=name)  # from fa2's line: up is slower, down faster
        missing = [kernel.removeprefix("flashinfer-") for kernel in kinds
                   if all(r != r for r in over[kernel, kv].values())]  # NaN everywhere: no bars, so say why
        if missing:
            ax.text(0.02, 0.92, f"{', '.join(missing)}: no {kv.split('-')[0]} kernel", transform=ax.transAxes,
                    fontsize=8, va="top")
        ax.axhline(1, color="black", linewidth=2, label="FlashInfer fa2, step 5's draft kernel (= 1)")
        ax.set(yscale="log", title=f"{kv} KV cache", xlabel="batch x context (requests of one 16-query block)")
        ax.set_xticks(range(len(shapes)), [f"{b}x{c}" for b, c in shapes], fontsize=8)
        ax.yaxis.set_major_locator(LogLocator(base=2)), ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_locator(NullLocator())
    axes[0][0].set_ylabel("time over fa2's")
    figure_legend(fig, *axes[0][0].get_legend_handles_labels())
    return fig, over


def _point(ax, x: float, e, style: dict, **kw):
    return ax.errorbar(x, e.value, yerr=[[e.value - e.low], [e.high - e.value]], capsize=4, color=style["color"],
                       marker=style["marker"], linestyle="none", **kw)


def cost_figure(costs):
    """Left: per shape, the final draft's host build and draft attention per decoding step minus the FLASH_ATTN
    draft's (median, 95% interval), the A/A pair's interval as a grey bar behind each. Right: the RTX 4090 path's
    tokens/s over no speculation, the step-4 draft and the final draft (median, 95% interval). `costs`:
    `dflash_fi.figures.costs.Costs` (notebook 08)."""
    from dflash_fi.figures.costs import KERNEL_NAMES, PAIR_NAMES

    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12.5, 4.4), width_ratios=(2.2, 1), layout="constrained")
    shapes = costs.shapes
    build, attention, step4, final = series_styles(4)
    handles = {}
    for i, s in enumerate(shapes):
        for dx, e, aa, bound, style, what in (
                (-0.15, s.build, s.build_aa, s.build_bound, build, "host build (the draft's metadata builds)"),
                (0.15, s.attention, s.attention_aa, s.aa_bound_ms, attention, "draft attention on the GPU (CUDA events)")):
            if aa is not None:
                handles["A/A pair: two FLASH_ATTN drafts (noise)"] = left.bar(
                    i + dx, aa.high - aa.low, bottom=aa.low, width=0.26, color="#dddddd", zorder=1)
            if bound is not None:
                handles["the A/A bound: an interval wholly beyond it is a real difference"] = left.hlines(
                    [bound, -bound], i + dx - 0.13, i + dx + 0.13, colors="#777777", linestyles="--", linewidth=1,
                    zorder=2)
            if e is not None:
                handles[what] = _point(left, i + dx, e, style, zorder=3)
    left.axhline(0, color="black", linewidth=1.5, zorder=2)
    left.set_xticks(range(len(shapes)), [f"{PAIR_NAMES.get(s.pair, s.pair)}\nbatch {s.batch}\n"
                                         f"{KERNEL_NAMES.get(s.route, s.route or '?')}" for s in shapes], fontsize=8)
    left.set(xlabel="pair of models, batch, and the kernel the final draft ran there", title="The draft's own cost "
             "per decoding step", ylabel="final FlashInfer draft - FLASH_ATTN draft\nms per decoding step (above 0: "
             "costs more)")
    batches = [g.batch for g in costs.gains]
    for k, (what, style, pick) in enumerate((("step 4 draft (the PR)", step4, lambda g: g.step4_gain),
                                             ("final draft (step 9)", final, lambda g: g.final_gain))):
        for i, g in enumerate(costs.gains):
            if (e := pick(g)) is not None:
                handles[f"RTX 4090 path: {what}"] = _point(right, i + (k - 0.5) * 0.3, e, style)
    if costs.gains:
        handles["no speculation on the same path (= 1)"] = right.axhline(1, color="black", linewidth=1.5)
    right.set_xticks(range(len(batches)), [str(b) for b in batches])
    right.set(xlabel="batch (embedded pair)", ylabel="tokens/s over no speculation", title="RTX 4090 path: FA2 "
              "forced, FP8 cache" if costs.gains else "RTX 4090 path: not recorded yet")
    for ax in (left, right):
        ax.grid(axis="y", alpha=0.3)
        ax.title.set_fontsize(10)
    figure_legend(fig, list(handles.values()), list(handles), ncol=3)
    fig.suptitle(f"{costs.gpu}: what the final FlashInfer draft costs, CUDA graphs, bf16 unless said", fontsize=11)
    return fig


def write_benchmark_figures(summary=None, out_dir: Path = FIGURES_DIR) -> list[Path]:
    """docs/figures/bench-kernels.svg (every kernel at every shape) and bench-draft-cost.svg (notebook 08's figure)
    from the evidence summary (default: the committed one), each where its section is recorded; the paths written."""
    from dflash_fi.errors import NoRecord
    from dflash_fi.figures.costs import read_costs
    from dflash_fi.records.summary import Section, read

    summary = summary or read()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in (("bench-kernels", lambda s: kernel_times(s.rows(Section.BENCH_KERNELS))),
                       ("bench-draft-cost", lambda s: cost_figure(read_costs(s)))):
        try:
            fig = make(summary)
        except NoRecord as missing:
            print(f"{name}.svg not drawn: {missing}")
            continue
        path = out_dir / f"{name}.svg"
        with pyplot().rc_context({"svg.hashsalt": "dflash-fi"}):  # stable element ids: same data, same file
            fig.savefig(path, format="svg", metadata={"Date": None})
        written.append(path)
    return written
