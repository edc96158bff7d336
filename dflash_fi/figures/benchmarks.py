"""Pictures of the benchmarks (notebooks 05, 08, 09, README): kernel times, the final kernel against vLLM's FlashAttention,
engine throughput, a decoding step's time.

`write_benchmark_figures` (`dflash-fi figures`) writes them as SVG under docs/figures/ (text files, so the tree
stays free of binaries), from the committed results (`dflash_fi.bench.results.latest_kernels`, `dflash_fi.bench.turns.latest_turns`).
"""

from __future__ import annotations

from pathlib import Path

from dflash_fi.figures.style import figure_legend, pyplot, series_styles

FIGURES_DIR = Path(__file__).resolve().parents[2] / "docs" / "figures"


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

    from dflash_fi.bench.kernels import KERNELS
    from dflash_fi.bench.results import kernel_rows
    from dflash_fi.vocabulary import DRAFT_BLOCK_SIZE

    plt = pyplot()
    rows = [r for r in kernel_rows(results) if (r["num_qo_heads"], r["num_kv_heads"]) == (num_qo_heads, num_kv_heads)]
    kv_dtypes = list(kv_dtypes or dict.fromkeys(r["kv_dtype"] for r in rows))
    contexts = sorted({r["context"] for r in rows})
    known = {kernel: i for i, kernel in enumerate(KERNELS)}
    kernels = sorted({r["kernel"] for r in rows}, key=lambda k: (known.get(k, len(known)), k))
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


def kernel_against_flash_attn(results: dict, batches: tuple[int, ...] | None = None, heads=(32, 8)):
    """The final FlashInfer kernel's time over vLLM's FlashAttention's (what the FLASH_ATTN draft runs), by batch: one
    panel per KV dtype, one line per context; FlashAttention is the thick reference line at 1."""
    from dflash_fi.bench.results import final_draft_kernel, kernel_ratios, kernel_rows

    plt = pyplot()
    kv_dtypes = list(dict.fromkeys(r["kv_dtype"] for r in kernel_rows(results)))
    fig, axes = plt.subplots(1, len(kv_dtypes), figsize=(5.2 * len(kv_dtypes), 3.8), squeeze=False, sharey=True,
                             layout="constrained")
    handles = {}
    for ax, kv in zip(axes[0], kv_dtypes):
        final = final_draft_kernel(results, kv)
        ratios = kernel_ratios(results, final, "vllm-flash-attn", kv, heads, batches)
        contexts = sorted({r["context"] for r in ratios})
        handles["reference"] = ax.axhline(1.0, color="black", linewidth=3.5, zorder=1)
        for context, style in zip(contexts, series_styles(len(contexts))):
            points = sorted((r["batch"], r["ratio"]) for r in ratios if r["context"] == context)
            handles[f"context {context}"], = ax.plot(*zip(*points), **{**style, "linewidth": 1.6, "markersize": 7})
        shown = sorted({r["batch"] for r in ratios})
        ax.set_xscale("log", base=2)
        ax.set_xticks(shown, [str(b) for b in shown])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
        ax.set_title(f"{kv} KV cache: the final draft runs {final}", fontsize=10)
        ax.set_xlabel("batch (requests of one 16-query block)", fontsize=9)
    axes[0][0].set_ylabel("time over vLLM's FlashAttention's\n(above 1: FlashInfer slower)")
    labels = {"reference": "vLLM's FlashAttention, what the FLASH_ATTN draft runs (= 1)",
              **{k: f"the final draft's kernel, {k} tokens" for k in handles if k != "reference"}}
    figure_legend(fig, list(handles.values()), [labels[k] for k in handles], ncol=2)
    fig.suptitle(f"{results.get('gpu', 'GPU')}: the final FlashInfer draft kernel against vLLM's FlashAttention, "
                 f"{heads[0]}/{heads[1]} heads", fontsize=11)
    return fig


def kernels_over_fa2(results: dict, kinds: dict[str, str], kv_dtypes: tuple[str, ...], heads=(32, 8)):
    """(figure, ratios): each of `kinds` (kernel: legend label) over FlashInfer fa2's time, step 5's draft kernel, per
    batch x context; one panel per KV dtype, fa2 the thick line at 1. ratios[kernel, kv][batch, context]; NaN where a
    kernel has no time."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullLocator

    from dflash_fi.bench.results import kernel_rows

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
        ax.axhline(1, color="black", linewidth=2, label="FlashInfer fa2, step 5's draft kernel (= 1)")
        ax.set(yscale="log", title=f"{kv} KV cache", xlabel="batch x context (requests of one 16-query block)")
        ax.set_xticks(range(len(shapes)), [f"{b}x{c}" for b, c in shapes], fontsize=8)
        ax.yaxis.set_major_locator(LogLocator(base=2)), ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_locator(NullLocator())
    axes[0][0].set_ylabel("time over fa2's")
    figure_legend(fig, *axes[0][0].get_legend_handles_labels())
    return fig, over


def e2e_pairs(turns):
    """One panel per pair of models: each engine's ratio to the FLASH_ATTN draft per batch (tokens/s for the embedded
    pair, where higher is better; time per step for the Qwen3-4B shape, where lower is): the estimate with its 95%
    interval, one dot per measured round; the second FLASH_ATTN draft (the A/A pair) shows the noise; the target
    as a dashed line."""
    from dflash_fi.bench.e2e import flash_attn_draft
    from dflash_fi.bench.turns import STEP_GAP_TARGET, TOKENS_TARGET, ratio, step_ms, tokens_per_s
    from dflash_fi.engine.identity import Pair, label

    plt = pyplot()
    pairs = turns.pairs()
    fig, axes = plt.subplots(1, len(pairs), figsize=(5.6 * len(pairs), 4.0), squeeze=False, layout="constrained")
    handles = {}
    for ax, pair in zip(axes[0], pairs):
        fa = flash_attn_draft(pair)
        compared = [run for run in turns.runs(pair) if run.speculative and run != fa]
        metric = tokens_per_s if pair is Pair.EMBEDDED else step_ms
        sizes = turns.batches(pair)
        width = 0.8 / max(len(compared), 1)
        for k, (run, style) in enumerate(zip(compared, series_styles(len(compared)))):
            name = label(run).replace(", CUDA graphs", "").removeprefix("Qwen3-4B shape: ")
            for i, batch in enumerate(sizes):
                e = ratio(turns, run, fa, batch, metric)
                if e is None:
                    continue
                x = i + (k - (len(compared) - 1) / 2) * width
                handles[name] = ax.errorbar(x, e.value, yerr=[[e.value - e.low], [e.high - e.value]], capsize=4,
                                            color=style["color"], marker=style["marker"], linestyle="none")
                ax.plot([x + width * 0.25] * len(e.rounds), e.rounds, linestyle="none", marker=".",
                        color=style["color"], alpha=0.5)
        target = TOKENS_TARGET.threshold if pair is Pair.EMBEDDED else 1 + STEP_GAP_TARGET.threshold
        handles["target"] = ax.axhline(target, color="black", linestyle="--", linewidth=1)
        ax.axhline(1.0, color="#999999", linewidth=0.8)
        ax.set_xticks(range(len(sizes)), [str(b) for b in sizes])
        ax.set_xlabel("batch: requests decoded together\n(batch 1: one prompt alone per turn)", fontsize=9)
        ax.set_ylabel("over the FLASH_ATTN draft, " + ("tokens/s" if pair is Pair.EMBEDDED else "time per step"))
        ax.set_title(f"{pair.value}: " + ("higher is better" if pair is Pair.EMBEDDED else "lower is better"),
                     fontsize=10)
    labels = {"target": "target (0.97x tokens/s; step time +3%)",
              **{k: f"{k}: estimate, 95% interval, one dot per round" for k in handles if k != "target"}}
    figure_legend(fig, list(handles.values()), [labels[k] for k in handles], ncol=1)
    fig.suptitle(f"{turns.gpu}: engines against the FLASH_ATTN draft, in turns, CUDA graphs, bf16", fontsize=11)
    return fig


def draft_step_time(turns, batch: int = 1):
    """Time per decoding step of each speculative engine (median of measured rounds), split into the host time of
    each metadata builder and the rest; one panel per pair of models."""
    import statistics

    from dflash_fi.engine.identity import label

    plt = pyplot()
    pairs = turns.pairs()
    fig, axes = plt.subplots(1, len(pairs), figsize=(5.6 * len(pairs), 4.2), squeeze=False, layout="constrained")
    colors = {"target step": "#dd8452", "draft step": "#c44e52"}
    handles = {}
    for ax, pair in zip(axes[0], pairs):
        runs = [run for run in turns.runs(pair) if run.speculative and not run.replica]
        for i, run in enumerate(runs):
            rounds = list(turns.measured(run, batch).values())
            if not rounds:
                continue
            step = statistics.median(b.step_ms for b in rounds)
            bottom = 0.0
            keys = sorted({t.key for b in rounds for g in b.generates for t in g.builds},
                          key=lambda k: (k.role.value, k.backend))
            for key in keys:
                ms = statistics.median(sum(t.seconds for t in g.builds if t.key == key) * 1000 / max(g.steps, 1)
                                       for b in rounds for g in b.generates)
                name = f"{key.role.value} builds, {key.backend}"
                handles[name] = ax.bar(i, ms, bottom=bottom, width=0.6, color=colors[key.role.value],
                                       edgecolor="white", alpha=1 if key.backend == "FLASHINFER" else 0.45)
                bottom += ms
            handles["rest of the step (GPU work and the rest of the host's)"] = ax.bar(
                i, max(step - bottom, 0), bottom=bottom, width=0.6, color="#bbbbbb")
            ax.text(i, max(step, bottom), f"{step:.2f} ms\n(builds {bottom:.2f})", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(runs)), [label(r).replace(", CUDA graphs", "").removeprefix("Qwen3-4B shape: ")
                                         .replace(" FLASHINFER draft", " FlashInfer") for r in runs], fontsize=8)
        ax.set_ylabel("ms per decoding step (median of rounds)")
        ax.set_title(f"{pair.value}, batch {batch}", fontsize=10)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.15)
    figure_legend(fig, list(handles.values()), list(handles), ncol=2)
    fig.suptitle(f"{turns.gpu}: where a decoding step's time goes (host metadata builds), CUDA graphs, bf16",
                 fontsize=11)
    return fig


def write_benchmark_figures(kernels: dict | None, turns, out_dir: Path = FIGURES_DIR) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make, data in (("bench-kernels", kernel_times, kernels), ("bench-e2e", e2e_pairs, turns),
                             ("bench-draft-step", draft_step_time, turns)):
        if data is None:
            continue
        fig = make(data)
        if fig is None:
            continue
        path = out_dir / f"{name}.svg"
        with pyplot().rc_context({"svg.hashsalt": "dflash-fi"}):  # stable element ids: same data, same file
            fig.savefig(path, format="svg", metadata={"Date": None})
        written.append(path)
    return written
