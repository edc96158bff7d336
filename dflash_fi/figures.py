"""The tutorial's pictures, drawn from data the rest of the package produces or the committed records hold.

Each function returns a matplotlib Figure; notebooks show it inline, `dflash-fi figures` writes the
benchmark ones as SVG under docs/figures/ (text files, so the tree stays free of binaries).
"""

from __future__ import annotations

from pathlib import Path

FIGURES_DIR = Path(__file__).resolve().parent.parent / "docs" / "figures"
COLORS = {"accepted": "#4c9a2a", "refused": "#c0392b", "none": "#7f1d1d", "auto": "#888888"}


def _plt():
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "figure.dpi": 100, "axes.spines.top": False,
                         "axes.spines.right": False})
    return plt


def block_masks(num_context: int = 8):
    """Which keys the 16 block queries may see: context (strictly before the anchor) and the block itself."""
    import torch

    from dflash_fi.reference.drafter import CAUSAL, NON_CAUSAL, block_attention_mask

    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    anchor = torch.tensor([[num_context]])
    for ax, mode, title in ((axes[0], NON_CAUSAL, "non-causal (what DFlash is trained for)"),
                            (axes[1], CAUSAL, "causal (what step 2 computes)")):
        mask = block_attention_mask(anchor, num_context, mode)[0].int()
        ax.imshow(mask, cmap="Greens", vmin=0, vmax=1.4, aspect="auto")
        ax.axvline(num_context - 0.5, color="black", lw=1)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(f"keys: {num_context} context tokens | the block: anchor (A) and masks 1-15")
        ax.set_xticks([(num_context - 1) / 2, *range(num_context, num_context + 16, 3)])
        ax.set_xticklabels(["context", *("A" if k == 0 else str(k) for k in range(0, 16, 3))], fontsize=8)
        ax.set_yticks(range(0, 16, 3))
        ax.set_yticklabels(["A" if k == 0 else str(k) for k in range(0, 16, 3)], fontsize=8)
    axes[0].set_ylabel("queries: anchor (A) and masks 1-15")
    fig.tight_layout()
    return fig


def selector_grid(rows: list[dict]):
    """selector_matrix rows (draft role) as a grid: FLASHINFER's verdict, and what vLLM picks unasked."""
    plt = _plt()
    cols = sorted({(r["capability"], r["kv_cache_dtype"]) for r in rows}, key=lambda c: (float(c[0]), c[1]))
    steps = sorted({r["step"] for r in rows})
    fig, ax = plt.subplots(figsize=(1.9 * len(cols) + 1.5, 0.9 * len(steps) + 1.2))
    for i, step in enumerate(steps):
        for j, col in enumerate(cols):
            r = next(x for x in rows if x["step"] == step and (x["capability"], x["kv_cache_dtype"]) == col)
            fi_ok = r["flashinfer"] == "accepted"
            color = COLORS["accepted"] if fi_ok else (COLORS["none"] if r["auto_backend"] is None else COLORS["refused"])
            ax.add_patch(plt.Rectangle((j, i), 0.96, 0.92, color=color))
            text = ("FLASHINFER ok" if fi_ok else "FLASHINFER refused") + f"\nunasked: {r['auto_backend'] or 'NONE'}"
            ax.text(j + 0.48, i + 0.46, text, ha="center", va="center", color="white", fontsize=8)
    ax.set_xlim(0, len(cols)), ax.set_ylim(len(steps), 0)
    ax.set_xticks([j + 0.48 for j in range(len(cols))])
    ax.set_xticklabels([f"SM {c}\n{'fp8' if kv == 'fp8' else 'bf16'} KV" for c, kv in cols], fontsize=8)
    ax.set_yticks([i + 0.46 for i in range(len(steps))])
    ax.set_yticklabels([f"step {s}" for s in steps])
    ax.set_title("vLLM's selector for the DFlash draft (use_non_causal=True)", fontsize=10)
    for spine in ax.spines.values():
        spine.set_visible(False)
    fig.tight_layout()
    return fig


def acceptance_by_position(records: dict[str, dict], labels: list[str]):
    """Per-position acceptance of the runs named, from vLLM's spec-decode counters."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4))
    for label in labels:
        pos = (records.get(label) or {}).get("per_position_acceptance")
        if pos:
            ax.plot(range(1, len(pos) + 1), pos, marker="o", ms=3, label=f"{label} (tau {records[label]['tau']:.2f})")
    ax.set_xlabel("draft position"), ax.set_ylabel("acceptance rate")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def tau_by_step(records: dict[str, dict], reference: dict, labels: list[str]):
    """tau of each run, against the reference decoder's two predictions."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.8))
    names = [label for label in labels if (records.get(label) or {}).get("tau") is not None]
    ax.bar(range(len(names)), [records[n]["tau"] for n in names], color="#4c72b0")
    ax.axhline(reference["tau_noncausal"], color=COLORS["accepted"], ls="--",
               label=f"reference, non-causal block ({reference['tau_noncausal']:.2f})")
    ax.axhline(reference["tau_causal"], color=COLORS["refused"], ls="--",
               label=f"reference, causal block ({reference['tau_causal']:.2f})")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([n.replace(" FLASHINFER draft", "").replace(" draft", "") for n in names], rotation=20,
                       fontsize=8, ha="right")
    ax.set_ylabel("acceptance length tau")
    ax.set_ylim(1, max(reference["tau_noncausal"], *(records[n]["tau"] for n in names)) * 1.15)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def kernel_times(results: dict, num_qo_heads: int = 32, num_kv_heads: int = 8, kv_dtype: str = "bf16"):
    """Median time per call by batch, one panel per context length, one line per kernel."""
    plt = _plt()
    rows = [r for r in results["rows"] if r["num_qo_heads"] == num_qo_heads and r["num_kv_heads"] == num_kv_heads
            and r["kv_dtype"] == kv_dtype and "median_ms" in r]
    contexts = sorted({r["context"] for r in rows})
    fig, axes = plt.subplots(1, len(contexts), figsize=(4.2 * len(contexts), 3.6), squeeze=False)
    for ax, context in zip(axes[0], contexts):
        for kernel in sorted({r["kernel"] for r in rows}):
            pts = sorted((r["batch"], r["median_ms"]) for r in rows if r["kernel"] == kernel and r["context"] == context)
            ax.plot(*zip(*pts), marker="o", ms=3, label=kernel)
        ax.set_xscale("log", base=2), ax.set_yscale("log")
        ax.set_title(f"context {context}", fontsize=10)
        ax.set_xlabel("batch (requests of 16 queries)")
    axes[0][0].set_ylabel("ms per call (median)")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(f"{results['gpu']}: non-causal paged attention, {kv_dtype} KV, {num_qo_heads}/{num_kv_heads} heads",
                 fontsize=10)
    fig.tight_layout()
    return fig


def e2e_throughput(results: dict, model: str = "embedded", kv_dtype: str = "bf16"):
    """tokens/s per run and batch, eager and with CUDA graphs: the fastest repeat, and a bar down to the slowest."""
    plt = _plt()
    rows = [r for r in results["rows"] if r["model"] == model and r["kv_cache_dtype"] == kv_dtype]
    runs = list(dict.fromkeys(r["run"] for r in rows))
    batches = sorted({r["batch"] for r in rows})
    fig, axes = plt.subplots(1, len(batches), figsize=(4.4 * len(batches), 3.8), squeeze=False)
    for ax, batch in zip(axes[0], batches):
        for k, graphs in enumerate((False, True)):
            hits = [next((r for r in rows if r["run"] == run and r["batch"] == batch and r["cuda_graphs"] == graphs),
                         None) for run in runs]
            best = [h["tokens_per_s"] if h else 0 for h in hits]
            slowest = [min(h.get("repeats_tokens_per_s") or [h["tokens_per_s"]]) if h else 0 for h in hits]
            ax.bar([i + 0.4 * k for i in range(len(runs))], best, width=0.4,
                   yerr=[[b - s for b, s in zip(best, slowest)], [0] * len(best)], capsize=2,
                   label="CUDA graphs" if graphs else "eager", color="#4c72b0" if graphs else "#bbbbbb")
        ax.set_xticks([i + 0.2 for i in range(len(runs))])
        ax.set_xticklabels([run.replace(" FLASHINFER draft", "").replace(" draft", "") for run in runs],
                           rotation=25, fontsize=8, ha="right")
        ax.set_title(f"batch {batch}", fontsize=10)
    axes[0][0].set_ylabel("output tokens/s")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(f"{results['gpu']}: the embedded pair, {kv_dtype} KV", fontsize=10)
    fig.tight_layout()
    return fig


def draft_step_time(results: dict, batch: int = 1, runs=("FLASH_ATTN draft", "step 6 FLASHINFER draft")):
    """Time per decoding step (graphs, bf16) of the FLASH_ATTN and final FlashInfer drafts, split into the host
    time of each metadata build and the rest; one panel per model (embedded pair, Qwen3-4B shape). None when
    no engine timed its builds."""
    from dflash_fi.bench.results import e2e_row

    plt = _plt()
    models = list(dict.fromkeys(r["model"] for r in results["rows"] if r.get("metadata_build_ms_per_step")))
    if not models:  # results recorded before engines timed their builds
        return None
    fig, axes = plt.subplots(1, len(models), figsize=(5.2 * len(models), 3.6), squeeze=False)
    colors = {"target step": "#dd8452", "draft step": "#c44e52"}
    for ax, model in zip(axes[0], models):
        rows = [e2e_row(results["rows"], model, run, batch, graphs=True) for run in runs]
        labelled = set()
        for i, row in enumerate(rows):
            if row is None:
                continue
            bottom = 0.0
            for where, ms in sorted((row.get("metadata_build_ms_per_step") or {}).items()):
                kind = "draft step" if where.startswith("draft step") else "target step"
                backend = "FLASHINFER" if "FLASHINFER" in where else "FLASH_ATTN"
                label = f"{kind} builds, {backend}"
                ax.bar(i, ms, bottom=bottom, width=0.6, color=colors[kind], alpha=1 if backend == "FLASHINFER" else 0.45,
                       label=None if label in labelled else label, edgecolor="white")
                labelled.add(label)
                bottom += ms
            ax.bar(i, row["step_ms"] - bottom, bottom=bottom, width=0.6, color="#bbbbbb",
                   label=None if "rest" in labelled else "rest of the step")
            labelled.add("rest")
            ax.text(i, row["step_ms"], f"{row['step_ms']:.2f} ms", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(runs)))
        ax.set_xticklabels([run.replace(" FLASHINFER draft", " FlashInfer") for run in runs], fontsize=8)
        ax.set_title(f"{model}, batch {batch}", fontsize=10)
        ax.set_ylim(0, max((r["step_ms"] for r in rows if r), default=1) * 1.15)
    axes[0][0].set_ylabel("ms per decoding step (graphs, bf16)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=7, frameon=False)
    fig.suptitle(f"{results['gpu']}: where a decoding step's time goes (metadata builds on the host)", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def write_benchmark_figures(kernels: dict | None, e2e: dict | None, out_dir: Path = FIGURES_DIR) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make, data in (("bench-kernels", kernel_times, kernels), ("bench-e2e", e2e_throughput, e2e),
                             ("bench-draft-step", draft_step_time, e2e)):
        if data is None:
            continue
        fig = make(data)
        if fig is None:
            continue
        path = out_dir / f"{name}.svg"
        with _plt().rc_context({"svg.hashsalt": "dflash-fi"}):  # stable element ids: same data, same file
            fig.savefig(path, format="svg", metadata={"Date": None})
        written.append(path)
    return written
