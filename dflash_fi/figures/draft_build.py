"""Notebook 07's listing, table, figure and verdicts: what a DFlash draft's metadata build costs the host, steps 7-9.

    build_outline()               vLLM 0.22.1's FlashInferMetadataBuilder.build in outline, the lines that cost the
                                  host marked with the step that cuts them
    route_table(shapes)           per heads and requests, XQA's time over kept-plan fa2's at each context, the route
                                  step 9's rule takes and whether its pick is the faster (`lab.draft_route.ShapeRoute`)
    route_verdict(shapes, gpu)    the table's counts, and what "level" means
    build_rows(kernels)           the kernel benchmark's host-build rows of one KV dtype (either file layout)
    final_paths(builds)           (requests, context) -> the final step's path there, 'XQA' or 'kept plan'
    build_figure(builds, paths)   host ms per draft build, GPU busy: step 6 (when timed), step 7, the final step,
                                  the FLASH_ATTN draft, under the kernel queued before each build
    build_verdict(builds)         the figure's sentence; busy_ranges(builds) its ranges in one line
"""

from __future__ import annotations

# The kernel benchmark's row names (step 6's only in passes that timed it).
STEP6, STEP7, FLASH_ATTN = "build: step 6 FLASHINFER draft", "build: step 7 FLASHINFER draft", "build: FLASH_ATTN draft"
# What each line of the outline is, and the step that cuts it ('' for the lines that only frame it).
_OUTLINE = {r"def build\(": "", r"num_actual_tokens = common": "<- step 9 (XQA) and step 8 (plan kept) return here",
            r"seq_lens_cpu = common_attn_metadata\.seq": "<- step 7: the host bounds instead",
            r"paged_kv_indices = self\._compute_flashinfer": "page table: numpy on the host, copied to the GPU",
            r"^\s*prefill_wrapper\.plan\($": "the schedule, made on the host, copied to the GPU",
            r"^\s*return attn_metadata$": ""}


def build_outline():
    import inspect
    import re

    from vllm.v1.attention.backends.flashinfer import FlashInferMetadataBuilder

    from dflash_fi.figures.listings import code_block

    source = inspect.getsource(FlashInferMetadataBuilder.build).splitlines()
    lines = [(next(line for line in reversed(source) if re.search(p, line)).split(" if ")[0], note)
             for p, note in _OUTLINE.items()]
    return code_block("\n    ...\n".join(line + (f"  # {note}" if note else "") for line, note in lines),
                      "FlashInferMetadataBuilder.build, vLLM 0.22.1, in outline",
                      tuple(2 * k + 1 for k, (_, note) in enumerate(lines) if note))


def _picks(at: dict, contexts: list[int]) -> str:
    """'faster', or the contexts where the pick is level (within the tie band, see route_verdict) and where slower."""
    level = [str(c) for c in contexts if at[c].level]
    slower = [f"{c} ({at[c].picked_ms / at[c].other_ms - 1:.0%})" for c in contexts
              if not at[c].faster and not at[c].level]
    return ", ".join(([f"level at {', '.join(level)}"] if level else [])
                     + ([f"**slower** at {', '.join(slower)}"] if slower else [])) or "faster"


def route_table(shapes) -> str:
    from dflash_fi.lab.routes import Prefill

    contexts = sorted({r.context for r in shapes})
    groups: dict[tuple, dict] = {}  # (query heads, KV heads, requests) -> its shapes by context (the rule reads none)
    for r in shapes:
        groups.setdefault((r.num_qo_heads, r.num_kv_heads, r.batch), {})[r.context] = r
    lines = ["| heads, query / KV | requests | " + " | ".join(f"XQA / fa2 at {c}" for c in contexts)
             + " | the rule takes | its pick is |", "|---|---|" + "---|" * (len(contexts) + 2)]
    for (qo, kv, reqs), at in groups.items():
        other = _picks(at, contexts)
        lines.append(f"| {qo} / {kv} | {reqs} | " + " | ".join(f"{at[c].xqa_ms / at[c].fa2_ms:.2f}" for c in contexts)
                     + f" | {'XQA' if at[contexts[0]].route is Prefill.XQA else 'fa2'} | {other} |")
    return "\n".join(lines)


def route_verdict(shapes, gpu: str) -> str:
    """How often the rule's pick is the faster kernel, level or slower; what level means, on the widest level loss;
    where it takes XQA, and fa2's record at more query heads per KV head."""
    from dflash_fi.lab.draft_route import TIE_MS, TIE_SHARE
    from dflash_fi.lab.routes import Prefill

    slower = [r for r in shapes if not r.faster and not r.level]
    level = [r for r in shapes if r.level]
    on_xqa = [r for r in shapes if r.route is Prefill.XQA]
    wide = [r.xqa_ms > r.fa2_ms for r in shapes if r.num_qo_heads > 2 * r.num_kv_heads]
    text = (f"on {gpu}, the rule's pick is the faster kernel at {sum(r.faster for r in shapes)} of {len(shapes)} "
            f"shapes, level at {len(level)}, slower at {len(slower)}")
    text += f" (by at most {max(r.picked_ms / r.other_ms - 1 for r in slower):.0%})." if slower else "."
    if level:
        worst = max(level, key=lambda r: r.picked_ms / r.other_ms)
        text += (f" Level: slower by at most {TIE_SHARE:.0%} or {TIE_MS} ms, the larger, which is the resolution the "
                 f"benchmark is held to (a difference below it is not told from noise); so "
                 f"{'XQA' if worst.route is Prefill.XQA else 'fa2'}'s {worst.picked_ms / worst.other_ms - 1:.0%} "
                 f"({worst.picked_ms - worst.other_ms:.4f} ms) at {worst.batch} requests and {worst.context} counts "
                 "as level.")
    if on_xqa:
        text += (f" It takes XQA at {len(on_xqa)} shapes, each with at most "
                 f"{max(r.num_qo_heads // r.num_kv_heads for r in on_xqa)} query heads per KV head and at least "
                 f"{min(r.batch for r in on_xqa)} requests")
        text += (f"; with more query heads per KV head (Qwen3-4B's 32 / 8) fa2 is the faster at {sum(wide)} of "
                 f"{len(wide)} shapes." if wide else ".")
    return text


def build_rows(kernels: dict | None, kv_dtype: str = "bf16") -> list[dict]:
    """The host-build rows of the kernel benchmark's results (`build_rows`, or among `rows` in older passes)."""
    if not kernels:
        return []
    rows = kernels.get("build_rows") or [r for r in kernels["rows"] if "host_ms_busy" in r]
    return [r for r in rows if r["kv_dtype"] == kv_dtype]


def final_paths(builds: list[dict], capability: tuple[int, int] = (9, 0)) -> dict:
    """(requests, context) -> the final step's path there by step 9's rule at the rows' heads: 'XQA' or 'kept plan'."""
    from dflash_fi.lab.draft_route import final_draft_route
    from dflash_fi.lab.routes import Prefill

    heads = (builds[0]["num_qo_heads"], builds[0]["num_kv_heads"])
    return {(b, c): "XQA" if final_draft_route(capability, "auto", *heads, b) is Prefill.XQA else "kept plan"
            for b, c in sorted({(r["batch"], r["context"]) for r in builds})}


def _final(builds: list[dict]) -> str:
    return next(r["kernel"] for r in builds if r["kernel"] not in (STEP6, STEP7, FLASH_ATTN))


def _busy(builds: list[dict]) -> dict:
    """Row name -> host ms per build with the GPU busy, by (requests, context)."""
    at: dict[str, dict] = {}
    for r in builds:
        at.setdefault(r["kernel"], {})[r["batch"], r["context"]] = r["host_ms_busy"]
    return at


def build_figure(builds: list[dict], paths: dict):
    """`builds`: the benchmark's host-build rows of one KV dtype; `paths`: (requests, context) -> the final step's
    path there ('XQA' or 'kept plan'). Step 6's bars only where the pass timed it."""
    from dflash_fi.figures.style import SERIES_COLORS as C, pyplot

    final, at = _final(builds), _busy(builds)
    cells = sorted({(r["batch"], r["context"]) for r in builds})
    shown = {STEP6: "step 6: reads the lengths from the GPU, so waits", STEP7: "step 7: plans at every draft step",
             final: "final step: step 8's kept plan or step 9's XQA (under each group)",
             FLASH_ATTN: "FLASH_ATTN draft (vLLM's FlashAttention)"}
    shown = {name: label for name, label in shown.items() if name in at}
    colors = dict(zip((STEP6, STEP7, final, FLASH_ATTN), (C[3], C[0], C[1], C[2])))  # the same with or without 6
    fig, ax = pyplot().subplots(figsize=(11, 2.7), layout="constrained")
    width = 0.8 / len(shown)
    for i, name in enumerate(shown):
        ax.bar([j + (i - (len(shown) - 1) / 2) * width for j in range(len(cells))], [at[name][c] for c in cells],
               width, label=shown[name], color=colors[name])
    queued = builds[0]["busy_ms"]
    ax.axhline(queued, color="grey", linestyle="--", linewidth=1,
               label=f"the kernel queued before each build ({queued:g} ms): what a wait costs")
    ax.set_xticks(range(len(cells)), [f"{b} x {c}\n({paths[b, c]})" for b, c in cells], fontsize=8)
    ax.set(yscale="log", ylabel="host ms per draft build\n(GPU busy, log scale)",
           xlabel="requests x context (the final step's path there)",
           ylim=(None, 2 * max(queued, *(ms for name in shown for ms in at[name].values()))))  # room above a wait
    handles, labels = ax.get_legend_handles_labels()  # the bars first, then the queued kernel's line
    fig.legend(handles[1:] + handles[:1], labels[1:] + labels[:1], loc="outside upper center", ncol=3, fontsize=8,
               frameon=False)
    return fig


def build_verdict(builds: list[dict]) -> str:
    """Step 6's wait (or that this pass did not time it), step 7's build against the queued kernel, the final step's
    cut of step 7's build, and where it is above the FLASH_ATTN draft's."""
    final, at = _final(builds), _busy(builds)
    cells = sorted(at[STEP7])
    cut = [1 - at[final][c] / at[STEP7][c] for c in cells]
    above = [at[final][c] - at[FLASH_ATTN][c] for c in cells if at[final][c] > at[FLASH_ATTN][c]]
    queued, step7 = builds[0]["busy_ms"], [at[STEP7][c] for c in cells]
    text = (f"on the embedded pair ({builds[0]['num_qo_heads']} query / {builds[0]['num_kv_heads']} KV heads), with a "
            f"{queued:g} ms kernel queued before each build, ")
    if STEP6 in at:
        low, high = min(at[STEP6].values()), max(at[STEP6].values())
        waits = "it waits for that kernel" if low > queued / 2 else "it did not wait for that kernel here"
        text += (f"step 6's build takes {low:.2f} to {high:.2f} ms: {waits}. Step 7's takes {min(step7):.3f} to "
                 f"{max(step7):.3f} ms: {'no wait' if max(step7) < queued / 2 else 'it waited too'}.")
    else:
        text += (f"step 7's build takes {min(step7):.3f} to {max(step7):.3f} ms, far below it (this pass did not time "
                 "step 6's, the one that waits: the GPU cell below does).")
    return text + (f" The final step cuts step 7's build by {min(cut):.0%} to {max(cut):.0%}, and is above the "
                   f"FLASH_ATTN draft's at {len(above)} of {len(cells)} shapes"
                   + (f", by up to {max(above):.3f} ms." if above else "."))


def busy_ranges(builds: list[dict]) -> str:
    """Each builder's host ms per draft build, GPU busy, lowest to highest over the shapes, in one line."""
    if not builds:
        return "not recorded yet"
    at, final = _busy(builds), _final(builds)
    names = {STEP6: "step 6", STEP7: "step 7", final: "the final step", FLASH_ATTN: "the FLASH_ATTN draft"}
    return "; ".join(f"{what} {min(at[n].values()):.3f}-{max(at[n].values()):.3f} ms" for n, what in names.items()
                     if n in at)
