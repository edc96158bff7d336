"""Notebook 07's listing, table and figure: what a DFlash draft's metadata build costs the host, and steps 7-9.

    build_outline()              vLLM 0.22.1's FlashInferMetadataBuilder.build in outline, the lines that cost the host
                                 marked with the step that cuts them
    route_table(shapes)          per heads and requests, XQA's time over kept-plan fa2's at each context, the route
                                 step 9's rule takes and whether its pick is the faster (`lab.draft_route.ShapeRoute`)
    build_figure(builds, paths)  host ms per draft build, GPU busy: step 7, the final step, the FLASH_ATTN draft
"""

from __future__ import annotations

STEP7, FLASH_ATTN = "build: step 7 FLASHINFER draft", "build: FLASH_ATTN draft"  # the kernel benchmark's row names
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


def _pick(route, context: int) -> str:
    """'faster', or where the pick is not, by how much and why it counts as level or slower."""
    if route.faster:
        return "faster"
    from dflash_fi.lab.draft_route import TIE_MS, TIE_SHARE

    lost = route.picked_ms - route.other_ms
    by = f"slower by {lost / route.other_ms:.0%}, {lost:.2g} ms"
    rule = f"{TIE_MS} ms" if TIE_MS >= TIE_SHARE * route.other_ms else f"{TIE_SHARE:.0%}"
    return f"level at {context} ({by}: level by the {rule} rule)" if route.level else f"**slower** at {context} ({by})"


def route_table(shapes) -> str:
    from dflash_fi.lab.routes import Prefill

    contexts = sorted({r.context for r in shapes})
    groups: dict[tuple, dict] = {}  # (query heads, KV heads, requests) -> its shapes by context (the rule reads none)
    for r in shapes:
        groups.setdefault((r.num_qo_heads, r.num_kv_heads, r.batch), {})[r.context] = r
    lines = ["| heads, query / KV | requests | " + " | ".join(f"XQA / fa2 at {c}" for c in contexts)
             + " | the rule takes | its pick is |", "|---|---|" + "---|" * (len(contexts) + 2)]
    for (qo, kv, reqs), at in groups.items():
        other = ", ".join(_pick(at[c], c) for c in contexts if not at[c].faster)
        lines.append(f"| {qo} / {kv} | {reqs} | " + " | ".join(f"{at[c].xqa_ms / at[c].fa2_ms:.2f}" for c in contexts)
                     + f" | {'XQA' if at[contexts[0]].route is Prefill.XQA else 'fa2'} | {other or 'faster'} |")
    return "\n".join(lines)


def build_figure(builds: list[dict], paths: dict):
    """`builds`: the benchmark's host-build rows of one KV dtype; `paths`: (requests, context) -> the final step's
    path there ('XQA' or 'kept plan'). Returns (figure, the final step's row name)."""
    from dflash_fi.figures.style import pyplot

    final = next(r["kernel"] for r in builds if r["kernel"] not in (STEP7, FLASH_ATTN))
    at = {(r["kernel"], r["batch"], r["context"]): r["host_ms_busy"] for r in builds}
    cells = sorted({(r["batch"], r["context"]) for r in builds})
    shown = {STEP7: "step 7: plans at every draft step", final: "final step: step 8's kept plan or step 9's XQA "
             "(under each group)", FLASH_ATTN: "FLASH_ATTN draft (vLLM's FlashAttention)"}
    fig, ax = pyplot().subplots(figsize=(11, 2.5), layout="constrained")
    for i, name in enumerate(shown):
        ax.bar([j + (i - 1) * 0.27 for j in range(len(cells))], [at[name, *c] for c in cells], 0.27, label=shown[name])
    ax.set_xticks(range(len(cells)), [f"{b} x {c}\n({paths[b, c]})" for b, c in cells], fontsize=8)
    ax.set(yscale="log", ylabel="host ms per draft build\n(GPU busy, log scale)",
           xlabel="requests x context (the final step's path there)")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside upper center", ncol=3, fontsize=8, frameon=False)
    return fig, final
