"""Notebook 07's listing, tables, figure and verdicts: what a DFlash draft's metadata build costs the host, steps 7-9.

    build_outline()               vLLM 0.22.1's FlashInferMetadataBuilder.build in outline, the lines that cost the
                                  host marked with the step that cuts them
    lengths_verdict, plans_table, reuse_verdict, gpu_verdict   the lab's runs of steps 6-8 (`lab.host_work`) in words
    route_table(shapes)           per heads and requests, XQA's time over kept-plan fa2's at each context, the route
                                  step 9's rule takes and whether its pick is the faster (`lab.draft_route.ShapeRoute`)
    route_verdict(shapes, gpu)    the table's counts, and what "level" means
    build_rows(kernels)           the kernel benchmark's host-build rows of one KV dtype (either file layout)
    final_paths(builds)           (requests, context) -> the final step's path there, 'XQA' or 'kept plan'
    build_figure(builds, paths)   host ms per draft build: GPU idle, step 7, the final step, the FLASH_ATTN draft;
                                  a kernel queued first, step 6 (when timed) against step 7: the wait
    build_verdict(builds, paths)  the figure's sentence; closing_verdict(builds) the notebook's close
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
# The kernel benchmark's heads: Qwen3-4B's shape, and the embedded pair's (whatever else it timed).
QWEN3_4B_HEADS = (32, 8)


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
    lines = ["| heads, query / KV (model) | requests | " + " | ".join(f"XQA / fa2 at {c}" for c in contexts)
             + " | the rule takes | its pick is |", "|---|---|" + "---|" * (len(contexts) + 2)]
    for (qo, kv, reqs), at in groups.items():
        model = "Qwen3-4B shape" if (qo, kv) == QWEN3_4B_HEADS else "embedded pair"
        lines.append(f"| {qo} / {kv} ({model}) | {reqs} | "
                     + " | ".join(f"{at[c].xqa_ms / at[c].fa2_ms:.2f}" for c in contexts)
                     + f" | {'XQA' if at[contexts[0]].route is Prefill.XQA else 'fa2'} | {_picks(at, contexts)} |")
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


def _times(builds: list[dict], field: str = "host_ms_idle") -> dict:
    """Row name -> host ms per build by (requests, context): `host_ms_idle`, or `host_ms_busy` (a kernel queued
    first, which a build that reads the GPU's lengths waits for; the others' busy times swing with the host)."""
    at: dict[str, dict] = {}
    for r in builds:
        at.setdefault(r["kernel"], {})[r["batch"], r["context"]] = r[field]
    return at


def _span(values) -> str:
    return f"{min(values):.3f}-{max(values):.3f} ms"


def build_figure(builds: list[dict], paths: dict):
    """Left, GPU idle: host ms per draft build of step 7, the final step (its path per group, `paths`) and the
    FLASH_ATTN draft. Right, a kernel queued first: step 6's and step 7's builds per shape, step 6's where timed."""
    from dflash_fi.figures.style import SERIES_COLORS as C, pyplot

    final, idle, busy = _final(builds), _times(builds), _times(builds, "host_ms_busy")
    cells = sorted({(r["batch"], r["context"]) for r in builds})
    shown = {STEP7: "step 7: plans at every draft step",
             final: "final step: step 8's kept plan or step 9's XQA (under each group)",
             FLASH_ATTN: "FLASH_ATTN draft (vLLM's FlashAttention)"}
    colors = {STEP6: C[3], STEP7: C[0], final: C[1], FLASH_ATTN: C[2]}
    fig, (ax, wait) = pyplot().subplots(1, 2, figsize=(11, 2.9), width_ratios=(4, 1), layout="constrained")
    width = 0.8 / len(shown)
    for i, name in enumerate(shown):
        ax.bar([j + (i - 1) * width for j in range(len(cells))], [idle[name][c] for c in cells], width,
               label=shown[name], color=colors[name])
    ax.set_xticks(range(len(cells)), [f"{b} x {c}\n({paths[b, c]})" for b, c in cells], fontsize=8)
    ax.set(yscale="log", ylabel="host ms per draft build\n(log scale)", title="GPU idle: what each build costs",
           xlabel="requests x context (the final step's path there)")
    queued = builds[0]["busy_ms"]
    wait.axhline(queued, color="grey", linestyle="--", linewidth=1,
                 label=f"the kernel queued before each build ({queued:g} ms): what a wait costs")
    for x, name in enumerate((STEP6, STEP7)):
        if name in busy:
            wait.plot([x] * len(cells), [busy[name][c] for c in cells], "o", color=colors[name], alpha=0.6)
        else:
            wait.text(x, queued / 8, "not timed\nin this pass", ha="center", va="top", fontsize=8)
    wait.set(yscale="log", xlim=(-0.6, 1.6), ylim=(0.1, 3 * queued), title=f"{queued:g} ms queued: the wait",
             ylabel="host ms, GPU busy")
    wait.set_xticks((0, 1), ("step 6", "step 7"))
    wait.set_xlabel("each dot a shape", fontsize=8)
    handles, labels = ax.get_legend_handles_labels()
    line, words = wait.get_legend_handles_labels()
    fig.legend(handles + line, labels + words, loc="outside upper center", ncol=2, fontsize=8, frameon=False)
    return fig


def build_verdict(builds: list[dict], paths: dict) -> str:
    """GPU idle: step 7's build, the final step's on each path (the host cost left) and against the FLASH_ATTN
    draft's; a kernel queued: step 6's wait (or that this pass did not time it) and step 7's none."""
    final, idle, busy = _final(builds), _times(builds), _times(builds, "host_ms_busy")
    cells, queued = sorted(idle[STEP7]), builds[0]["busy_ms"]
    cut = [1 - idle[final][c] / idle[STEP7][c] for c in cells]
    above = [idle[final][c] - idle[FLASH_ATTN][c] for c in cells if idle[final][c] > idle[FLASH_ATTN][c]]
    by_path = {p: ms for p in ("XQA", "kept plan") if (ms := [idle[final][c] for c in cells if paths[c] == p])}
    overlap = len(by_path) == 2 and max(map(min, by_path.values())) <= min(map(max, by_path.values()))
    swing = max(max(busy[n].values()) / min(busy[n].values()) for n in (final, FLASH_ATTN))
    text = (f"on the embedded pair ({builds[0]['num_qo_heads']} query / {builds[0]['num_kv_heads']} KV heads), GPU "
            f"idle, step 7's build takes {_span(idle[STEP7].values())}; the final step's takes {min(cut):.0%} to "
            f"{max(cut):.0%} less (" + ", ".join(f"{p} {_span(ms)}" for p, ms in by_path.items())
            + (", ranges that overlap: the page-table launch XQA skips costs the host little" if overlap else "")
            + "). What is left is the checks that pick the path and `build()`'s Python. It is above the FLASH_ATTN "
            f"draft's at {len(above)} of {len(cells)} shapes" + (f", by up to {max(above):.3f} ms" if above else "")
            + f" (with the GPU busy these two swing up to {swing:.0f}x over the shapes: host noise, so the bars are "
            f"idle). With {queued:g} ms queued, ")
    seven = "no wait" if max(busy[STEP7].values()) < queued / 2 else "it waited too"
    if STEP6 not in busy:
        return text + (f"step 7's build takes {_span(busy[STEP7].values())}: {seven}; this pass did not time step "
                       "6's, the one that waits (the GPU cell below does).")
    waits = "it waits for the kernel" if min(busy[STEP6].values()) > queued / 2 else "it did not wait here"
    return text + (f"step 6's takes {_span(busy[STEP6].values())}: {waits}; step 7's {_span(busy[STEP7].values())}: "
                   f"{seven}.")


def closing_verdict(builds: list[dict]) -> str:
    """The notebook's close: what each step cuts, the builds' idle ranges, and where upstream stands."""
    from dflash_fi.upstream import Agreement, claim

    said = {k: claim(k) for k in ("host_bounds", "plan_once", "xqa_draft")}
    not_done = " and ".join(str(c.step) for c in said.values() if c.agreement is Agreement.NOT_DONE)
    names = {STEP7: "step 7", _final(builds) if builds else "": "the final step", FLASH_ATTN: "the FLASH_ATTN draft"}
    idle = _times(builds)
    ranges = "; ".join(f"{what} {_span(idle[n].values())}" for n, what in names.items() if n in idle)
    return ("a FlashInfer draft's build is host work paid at every decoding step, and `plan()` is most of it. Step 7 "
            "removes the wait for the GPU, step 8 the plan while the shape holds, step 9 the plan and the page-table "
            "launch where XQA's kernel is the faster. Host ms per draft build, GPU idle: "
            + (ranges or "not recorded yet") + f". Upstream's code has not done steps {not_done}; it puts "
            f"{said['xqa_draft'].theirs} ({said['xqa_draft'].when()}), where step 9 keeps fa2 wherever it is faster. "
            "Next, notebook 08: what the final draft costs end to end against FLASH_ATTN's.")


def lengths_verdict(lengths: dict, runner: dict) -> str:
    """Steps 6 and 7 on one draft batch (`lab.host_work.draft_build_reads_gpu_lengths`, by step): what each copied,
    planned and the kernel read, in pages per request; and the target batches each planned for the draft layers."""
    from dflash_fi.vocabulary import KV_PAGE_SIZE

    def pages(indptr):
        return ", ".join(str(b - a) for a, b in zip(indptr, indptr[1:]))
    six, seven = lengths[6], lengths[7]
    planned = {step: sum(r["planned"] for r in rows) for step, rows in runner.items()}
    return (f"step 6 {'copies' if six['copied_from_gpu'] else 'does not copy'} the exact lengths "
            f"({', '.join(map(str, six['exact_seq_lens']))}) from the GPU. Step 7 "
            f"{'copies them too' if seven['copied_from_gpu'] else 'copies nothing'}: it plans from the bounds "
            f"({', '.join(map(str, seven['upper_bounds']))}: {pages(seven['planned_indptr'])} pages of "
            f"{KV_PAGE_SIZE} tokens), and its kernel reads {pages(seven['kernel_indptr'])} pages, what the exact "
            f"lengths need{', as at step 6' if seven['kernel_indptr'] == six['kernel_indptr'] else ''}. Of "
            f"{len(runner[6])} target batches, step 6 plans {planned[6]} for the draft layers, step 7 "
            f"{planned[7] or 'none'}.")


def plans_table(over: dict) -> str:
    """One decode's draft steps (`lab.host_work.plans_over_draft_steps`, by step 7 and 8): live requests, the kept
    plan's emptied rows, and where each step plans."""
    rows = over[8]
    cells = {"live requests": [r["requests"] for r in rows], "step 8's emptied rows": [r["empty_rows"] for r in rows],
             **{f"step {s} plans": ["yes" if r["plans"] else "-" for r in over[s]] for s in (7, 8)}}
    lines = [f"| draft step | {' | '.join(str(r['draft_step']) for r in rows)} |", "|---|" + "---|" * len(rows)]
    return "\n".join(lines + [f"| {k} | {' | '.join(map(str, v))} |" for k, v in cells.items()])


def reuse_verdict(over: dict) -> str:
    planned = [r["draft_step"] for r in over[8] if r["plans"]]
    return (f"step 7 plans at {sum(bool(r['plans']) for r in over[7])} of {len(over[7])} draft steps, step 8 at "
            f"{len(planned)} ({', '.join(map(str, planned))}): the first, and where requests join. Where requests "
            f"left, step 8 keeps the plan with their rows empty. Every step's kernel reads the exact page table"
            + ("." if all(r["reads_exact_page_table"] for s in over for r in over[s]) else ": **NOT** at every step."))


def gpu_verdict(bounded: list[dict], reused: list[dict], waited: dict) -> str:
    """FlashInfer's real kernel on step 7's and step 8's plans (`lab.host_work`), and the timed wait (by step)."""
    return (f"from bounds each batch computes what its exact plan does (largest difference "
            f"{max(r['bounds_vs_exact'] for r in bounded):.1e}); a kept plan what a fresh one does (largest "
            f"{max(r['reused_vs_fresh_unsplit'] for r in reused):.1e}). With the GPU busy, the fastest of 20 draft "
            f"builds takes {waited[6]:.2f} ms at step 6 (it waits for the queued kernel), {waited[7]:.2f} ms at "
            "step 7.")
