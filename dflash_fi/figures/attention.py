"""Pictures of what the draft's attention must do: the block masks (notebook 00) and vLLM's selector (01)."""

from __future__ import annotations

from dflash_fi.figures.style import COLORS, figure_legend, pyplot

MASKED_OUT = "#f2f2f2"
SELECTOR_VERDICTS = {  # colour key -> legend text
    "accepted": "FLASHINFER accepted",
    "refused": "FLASHINFER refused; vLLM picks another backend",
    "none": "FLASHINFER refused; no backend at all (none accepts the draft)",
}


def _block_tick_labels(ks) -> list[str]:
    return ["A" if k == 0 else str(k) for k in ks]


def block_masks(num_context: int = 8):
    """Which keys the 16 block queries may see: context (strictly before the anchor) and the block itself."""
    import torch
    from matplotlib.colors import ListedColormap
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from dflash_fi.reference.drafter import CAUSAL, NON_CAUSAL, block_attention_mask

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True, layout="constrained")
    anchor = torch.tensor([[num_context]])
    colormap = ListedColormap([MASKED_OUT, COLORS["accepted"]])
    for ax, mode, title in ((axes[0], NON_CAUSAL, "non-causal (what DFlash is trained for)"),
                            (axes[1], CAUSAL, "causal (what a backend that ignores the flag computes)")):
        mask = block_attention_mask(anchor, num_context, mode)[0].int()
        ax.imshow(mask, cmap=colormap, vmin=0, vmax=1, aspect="auto")
        ax.axvline(num_context - 0.5, color="black", lw=1.5)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(f"keys: {num_context} context tokens | the block: anchor (A) and masks 1-15")
        ax.set_xticks([(num_context - 1) / 2, *range(num_context, num_context + 16, 3)])
        ax.set_xticklabels(["context", *_block_tick_labels(range(0, 16, 3))], fontsize=8)
        ax.set_yticks(range(0, 16, 3))
        ax.set_yticklabels(_block_tick_labels(range(0, 16, 3)), fontsize=8)
    axes[0].set_ylabel("queries: anchor (A) and masks 1-15")
    key = [Patch(facecolor=COLORS["accepted"], edgecolor="black", lw=0.5),
           Patch(facecolor=MASKED_OUT, edgecolor="black", lw=0.5), Line2D([], [], color="black", lw=1.5)]
    figure_legend(fig, key, ["filled: the query may attend to this key", "empty: the query may not (masked out)",
                             "divider: context (left) | the block (right)"])
    fig.suptitle("Which keys each query of a DFlash block may attend to", fontsize=11)
    return fig


def _verdict(row: dict) -> tuple[str, str]:
    """(colour key, cell text) of one selector_matrix row."""
    picks = f"vLLM picks: {row['auto_backend']}" if row["auto_backend"] else "no backend at all"
    if not row["flashinfer_reasons"]:
        return "accepted", f"FLASHINFER accepted\n{picks}"
    return ("refused" if row["auto_backend"] else "none"), f"FLASHINFER refused\n{picks}"


def selector_grid(rows: list[dict]):
    """selector_matrix rows (draft role) as a grid: does FLASHINFER accept the draft, and what does vLLM pick
    when no backend is asked for."""
    from matplotlib.patches import Patch

    plt = pyplot()
    cols = sorted({(r["capability"], r["kv_cache_dtype"]) for r in rows}, key=lambda c: (float(c[0]), c[1]))
    steps = sorted({r["step"] for r in rows})
    fig, ax = plt.subplots(figsize=(1.9 * len(cols) + 1.8, 0.9 * len(steps) + 1.8), layout="constrained")
    for i, step in enumerate(steps):
        for j, col in enumerate(cols):
            row = next(x for x in rows if x["step"] == step and (x["capability"], x["kv_cache_dtype"]) == col)
            verdict, text = _verdict(row)
            ax.add_patch(plt.Rectangle((j, i), 0.96, 0.92, color=COLORS[verdict]))
            ax.text(j + 0.48, i + 0.46, text, ha="center", va="center", color="white", fontsize=8)
    ax.set_xlim(0, len(cols)), ax.set_ylim(len(steps), 0)
    ax.set_xticks([j + 0.48 for j in range(len(cols))])
    ax.set_xticklabels([f"SM {c}\n{'fp8' if kv == 'fp8' else 'bf16'} KV" for c, kv in cols], fontsize=8)
    ax.set_yticks([i + 0.46 for i in range(len(steps))])
    ax.set_yticklabels([f"step {s}" for s in steps])
    ax.set_xlabel("GPU (compute capability) and KV cache dtype")
    ax.set_ylabel("patch step")
    ax.set_title("vLLM's selector for the DFlash draft (use_non_causal=True)", fontsize=10)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    figure_legend(fig, [Patch(color=COLORS[k]) for k in SELECTOR_VERDICTS], list(SELECTOR_VERDICTS.values()),
                  ncol=3, title="FLASHINFER asked for by name; \"vLLM picks\": its choice when none is asked for")
    return fig
