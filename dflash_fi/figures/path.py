"""The path a DFlash draft layer's attention takes through vLLM's FlashInfer backend, and where each step's hunks
land on it (notebook 01 draws it; later notebooks refer back to it, or draw it again with their steps highlighted).

    start-up, once:      selector -> the builder's CUDA-graph claim
    every decoding step: the metadata builder's build() (decode/prefill split) -> the wrapper's plan() -> run(),
                         once per layer -> the kernel
"""

from __future__ import annotations

from pathlib import Path

from dflash_fi.figures.style import SERIES_COLORS, pyplot

# (key, title, what happens there, when): the boxes, left to right.
STAGES = (
    ("select", "selector", "get_attn_backend():\nthe backend asked for,\nor the priority list;\n"
     "validate_configuration()\ndraft: speculative_config\n[\"attention_backend\"]", "start-up, once per layer"),
    ("claim", "CUDA-graph claim", "builder's\nget_cudagraph_support()\n-> the engine's\nCUDAGraphMode",
     "start-up, once per engine"),
    ("build", "metadata builder", "build(): decode/prefill\nsplit, TRTLLM or not,\nmetadata.causal",
     "every step, per layer group"),
    ("plan", "wrapper plan()", "batch shape and causal\n-> kernel and work\nschedule (host)", "every step, in build()"),
    ("run", "wrapper run()", "FlashInferImpl.forward()\nlaunches the planned\nkernel", "every step, every layer"),
    ("kernel", "kernel", "FlashInfer's fa2 or fa3,\nor TRTLLM (Blackwell)", "GPU"),
)
# Where each hunk of each step lands, in the order of the step's hunks (tests/test_lesson.py checks the counts
# against the steps). Step 8's Triton kernel writes the page table from inside build(): build()'s, not the attention
# kernel's.
LANDS = {
    1: ("select",),
    2: ("build", "build", "build"),
    3: ("plan", "plan", "build", "plan", "plan", "run"),
    4: ("build", "build"),
    5: ("kernel", "kernel", "claim"),
    6: ("plan", "plan", "claim", "build", "build"),
    7: ("build", "build", "build", "build", "build", "plan", "build", "plan", "plan", "plan", "run"),
    8: ("plan", "build", "build", "plan", "build", "plan", "build"),
    9: ("kernel", "build", "build", "build", "build", "build", "build", "run"),
}


def marks_of(lands: dict[int, tuple[str, ...]]) -> dict[int, dict[str, int]]:
    """step -> {stage: how many of its hunks land there}."""
    return {step: {key: stages.count(key) for key in dict.fromkeys(stages)} for step, stages in lands.items()}


def draft_layer_path(marks: dict[int, dict[str, int]] | None = None, highlight: tuple[int, ...] = (),
                     title: str = "A DFlash draft layer's path through vLLM's FlashInfer backend, and where each "
                                  "step's hunks land"):
    """The stages as boxes, in order, with one badge per step whose hunks land there ('step 3: 4 hunks'). `marks`:
    step -> {stage key: hunks}, default every step (`LANDS`); `highlight`: steps drawn strong, the others faint
    (empty: all strong)."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    marks = marks_of(LANDS) if marks is None else marks
    plt = pyplot()
    badges = {key: [(step, n) for step, where in sorted(marks.items()) for k, n in where.items() if k == key]
              for key, *_ in STAGES}
    rows = max(1, max(map(len, badges.values())))
    width, box_w, box_h, gap = len(STAGES), 0.86, 1.3, 0.14
    fig, ax = plt.subplots(figsize=(12, 2.6 + 0.25 * rows), layout="constrained")
    colors = {step: SERIES_COLORS[(step - 1) % len(SERIES_COLORS)] for step in marks}  # a step's colour everywhere
    for x, (key, name, what, when) in enumerate(STAGES):
        ax.add_patch(FancyBboxPatch((x + gap / 2, 0), box_w, box_h, boxstyle="round,pad=0.02", fc="#f6f8fa",
                                    ec="#57606a", lw=1.2))
        ax.text(x + 0.5, box_h - 0.1, name, ha="center", va="top", fontsize=10, weight="bold")
        ax.text(x + 0.5, box_h - 0.3, what, ha="center", va="top", fontsize=7.5, family="monospace", linespacing=1.2)
        ax.text(x + 0.5, -0.1, when, ha="center", va="top", fontsize=8, style="italic", color="#57606a")
        if x < width - 1:
            ax.add_patch(FancyArrowPatch((x + gap / 2 + box_w, box_h / 2), (x + 1 + gap / 2, box_h / 2),
                                         arrowstyle="-|>", mutation_scale=14, color="#57606a", lw=1.2))
        for row, (step, count) in enumerate(badges[key]):
            strong = not highlight or step in highlight
            ax.text(x + 0.5, -0.42 - 0.27 * row, f"step {step}: {count} hunk{'s' if count > 1 else ''}",
                    ha="center", va="top", fontsize=8.5, color="white" if strong else colors[step],
                    bbox=dict(boxstyle="round,pad=0.25", fc=colors[step] if strong else "white", ec=colors[step],
                              alpha=1.0 if strong else 0.6))
    ax.plot([gap / 2, 2 - gap / 2], [box_h + 0.18] * 2, color="#57606a", lw=1)
    ax.text(1, box_h + 0.24, "when the engine starts", ha="center", va="bottom", fontsize=9)
    ax.plot([2 + gap / 2, width - gap / 2], [box_h + 0.18] * 2, color="#57606a", lw=1)
    ax.text(2 + (width - 2) / 2, box_h + 0.24, "every decoding step of the draft", ha="center", va="bottom",
            fontsize=9)
    ax.set_xlim(0, width)
    ax.set_ylim(-0.55 - 0.27 * rows, box_h + 0.5)
    ax.axis("off")
    ax.set_title(title, fontsize=11)
    return fig


def write_path_figure(out_dir: Path | None = None) -> Path:
    """docs/figures/draft-layer-path.svg (`dflash-fi figures`), every step marked: stable ids, so the same file."""
    from dflash_fi.figures.benchmarks import FIGURES_DIR

    path = Path(out_dir or FIGURES_DIR) / "draft-layer-path.svg"
    path.parent.mkdir(parents=True, exist_ok=True)
    with pyplot().rc_context({"svg.hashsalt": "dflash-fi"}):
        draft_layer_path().savefig(path, format="svg", metadata={"Date": None})
    return path
