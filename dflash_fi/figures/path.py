"""The path a DFlash draft layer's attention takes through vLLM's FlashInfer backend, and where each step's hunks
land on it (notebook 01 draws it; later notebooks refer back to it, or draw it again with their steps highlighted).

    start-up, once:      selector -> the builder's CUDA-graph claim
    every decoding step: the metadata builder's build() (decode/prefill split) -> the wrapper's plan() -> run(),
                         once per layer -> the kernel
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

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


# Stock build() in outline: a regex for each line shown, in order, and what it does (notes naming a step: it changes
# there). Notebook 02 shows it where the builder is first taught.
BUILD_OUTLINE = {
    r"def build\(": "",
    r"split_decodes_and_prefills\(": "decodes first, then prefills (step 2)",
    r"prefill_use_trtllm = ": "TRTLLM or not, for the prefills (step 4)",
    r"decode_use_trtllm = ": "and for the decodes (step 4)",
    r"if num_prefills > 0:": "",
    r"prefill_wrapper = self\._get_prefill_wrapper\(": "one prefill wrapper for every batch (step 3)",
    r"^\s+causal=True,$": "every prefill planned causal, whatever the batch (step 3)",
    r"^\s*return attn_metadata$": "",
}


def build_outline():
    """vLLM's own `FlashInferMetadataBuilder.build()` (as installed) in outline, `BUILD_OUTLINE`'s lines noted."""
    from vllm.v1.attention.backends.flashinfer import FlashInferMetadataBuilder

    from dflash_fi.figures.listings import outline

    return outline(FlashInferMetadataBuilder.build, BUILD_OUTLINE)


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


class Course(NamedTuple):
    table: str  # markdown: each notebook, what it teaches, the steps it writes
    hunks: dict  # step -> how many hunks it adds
    live: list  # the notebooks ('01') that start vLLM engines on a GPU
    after: list  # the notebooks that write steps beyond PR #43081


def course_map() -> Course:
    """The course: each notebook's title (its file's heading), the steps it writes (`STEPS_OF_NOTEBOOK`) and their
    hunks, counted from the step modules."""
    import re

    from dflash_fi.stack import REPO_ROOT
    from dflash_fi.steps import PR_43081_STEPS as PR, STEPS, step_module, step_name
    from dflash_fi.steps.course import NOTEBOOK_OF_STEP, STEPS_OF_NOTEBOOK

    hunks = {s: len(step_module(s).HUNKS) - len(step_module(s - 1).HUNKS if s else ()) for s in STEPS}
    files = {nb: REPO_ROOT / "notebooks" / f"{nb}.py" for nb in STEPS_OF_NOTEBOOK}
    texts = {nb: f.read_text() if f.exists() else "" for nb, f in files.items()}
    titles = {nb: m[1] if (m := re.search(r"^# # \S+ · (.*)$", t, re.M)) else nb for nb, t in texts.items()}
    taught = {nb: [s for s in STEPS if s and NOTEBOOK_OF_STEP[s] == nb] for nb in STEPS_OF_NOTEBOOK}
    writes = {nb: "; ".join(f"{s}: {step_name(s)} ({hunks[s]} hunk{'s' * (hunks[s] > 1)}{', PR #43081' * (s in PR)})"
                            for s in steps) or "none" for nb, steps in taught.items()}
    table = "| notebook | what it teaches | the steps it writes |\n|---|---|---|\n" + "\n".join(
        f"| {nb[:2]} | {titles[nb]} | {writes[nb]} |" for nb in STEPS_OF_NOTEBOOK)
    live = [nb[:2] for nb, t in texts.items() if re.search(r"setup\([^)]*live=", t)]
    after = [nb[:2] for nb, steps in taught.items() if any(s not in PR for s in steps)]
    return Course(table, hunks, live, after)


class Gating(NamedTuple):
    stock: object  # the draft batch's `lab.routes` route at step 0
    before: object  # at step 3
    after: object  # at step 4
    warnings: tuple  # what step 4 logs
    targets_as_stock: bool  # step 4 routes every target batch as stock does, metadata.causal aside


def trtllm_gating() -> Gating:
    """Steps 0, 3 and 4 in the CPU lab's Blackwell with TRTLLM (notebook 04): the draft batch's route, step 4's
    warnings, and whether step 4's target routes equal stock's (but for `metadata_causal`: True where stock has no
    field)."""
    from dataclasses import replace

    from dflash_fi.lab.routing import routing_report

    reports = {s: routing_report(s, trtllm=True) for s in (0, 3, 4)}
    targets = {s: [replace(r, metadata_causal=None) for r in reports[s].routes if r.role == "target"] for s in (0, 4)}
    return Gating(*(reports[s].routes[0] for s in (0, 3, 4)), reports[4].step_warnings, targets[0] == targets[4])


def gating_verdict(g: Gating) -> str:
    from dflash_fi.lab.routes import path_label

    logs = "once" if len(g.warnings) == 1 else f"{len(g.warnings)} times"
    return (f"stock would run the draft on {path_label(g.stock.decode)}, step 3 on {path_label(g.before.prefill)} "
            f"(both causal); step 4 keeps it on {path_label(g.after.prefill)}, planned causal={g.after.plan_causal}, "
            f"and logs {logs}: '{'; '.join(w.message for w in g.warnings)}'. "
            + ("The target rows are the same in every column (random batches: the appendix's property test)."
               if g.targets_as_stock else "The target rows differ: a bug."))


def write_path_figure(out_dir: Path | None = None) -> Path:
    """docs/figures/draft-layer-path.svg (`dflash-fi figures`), every step marked: stable ids, so the same file."""
    from dflash_fi.figures.benchmarks import FIGURES_DIR

    path = Path(out_dir or FIGURES_DIR) / "draft-layer-path.svg"
    path.parent.mkdir(parents=True, exist_ok=True)
    with pyplot().rc_context({"svg.hashsalt": "dflash-fi"}):
        draft_layer_path().savefig(path, format="svg", metadata={"Date": None})
    return path


def selector_listings() -> list[tuple]:
    """Notebook 01's listings of vLLM's selector, (function, blocks, mark) for `show_source`: `get_attn_backend_cls`
    (a backend asked for alone, else the walk and the raise when none is valid), the walk itself
    (`get_valid_backends`), where the draft's backend comes from, and the non-causal refusal."""
    from vllm.v1.attention.backend import AttentionBackend
    from vllm.v1.spec_decode.dflash import DFlashProposer
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    from dflash_fi.lab.pretend_gpu import cuda_platform_class

    cuda = cuda_platform_class()
    return [
        (cuda.get_attn_backend_cls,
         [(r"if selected_backend is not None:", r":"), (r"invalid_reasons = backend_class\.validate_", r"\("),
          (r"if invalid_reasons:", r"is not valid for"), (r"= cls\.get_valid_backends\(", r"\("),
          (r"if len\(valid_backends_priorities\) == 0", r"No valid"), (r"selected_index = sorted_", r"selected_")],
         (r"get_valid_backends\(", r"raise ValueError\(")),
        (cuda.get_valid_backends,
         [(r"for priority, backend in enumerate", r"for priority"),
          (r"invalid_reasons_i = backend_class\.validate_configuration", r"\("),
          (r"if invalid_reasons_i:", r"valid_backends_priorities\.append")], (r"validate_configuration\(",)),
        (SpecDecodeBaseProposer._create_draft_vllm_config, [(r"\bbackend=spec_cfg\.attention_", r"backend=")],
         (r"\bbackend=spec_cfg\.attention_backend",)),
        (DFlashProposer._create_draft_vllm_config, [(r"base = super", r"base = super"),
                                                    (r"use_non_causal", r"use_non_causal")], ()),
        (AttentionBackend.validate_configuration, [(r"if use_non_causal and", r"non-causal attention not supported")],
         ()),
    ]
