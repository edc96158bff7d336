"""The kernel benchmark's results as the evidence summary keeps them, and their summaries (README, notebook 09).

The engine benchmark's summaries (engines in turns, pairs of rounds, the targets) are `dflash_fi.bench.turns`.
"""

from __future__ import annotations

import dflash_fi.summary as S


# What makes two rows the same measurement (no two rows of a results file share them).
ROW_KEYS = {"kernels": ("kernel", "kv_dtype", "batch", "context", "num_qo_heads", "num_kv_heads")}


def latest_kernels(summary: S.Summary | None = None) -> dict:
    """The kernel benchmark of the evidence summary, whole (its rows are the summary's compressed rows; `file`: the
    summary's name)."""
    summary = summary or S.read()
    return {**summary.rows(S.Section.BENCH_KERNELS), "file": summary.path.name}


def kernel_rows(results: dict) -> list[dict]:
    """The kernel rows of a kernel results file, without its host-build rows (`dflash_fi.bench.builds`)."""
    return [r for r in results["rows"] if "what" not in r]


def build_rows(results: dict, kv_dtypes: tuple[str, ...] | None = None) -> list[dict]:
    """The host-build rows of a kernel results file (`dflash_fi.bench.builds`), of `kv_dtypes` (default all); NoRecord
    for a file recorded before it had them."""
    from dflash_fi.bench.builds import WHAT
    from dflash_fi.errors import NoRecord

    rows = [r for r in results["rows"] if r.get("what") == WHAT]
    if not rows:
        raise NoRecord(f"{results.get('file', 'the kernel benchmark')} has no host-build rows: run `dflash-fi bench "
                       "kernels --record` on a GPU")
    return [r for r in rows if kv_dtypes is None or r["kv_dtype"] in kv_dtypes]


def build_summary(results: dict, kv_dtypes: tuple[str, ...] | None = None) -> str:
    """Markdown: per KV dtype (`kv_dtypes`, default all), batch and context, each builder's host ms per draft-step
    metadata build, the GPU idle and busy (a build that waits for the GPU takes about the queued kernel's time when it
    is busy), and the final FlashInfer draft's build against FLASH_ATTN's plus BUILD_TARGET_MS (issue #32's target),
    the GPU busy. NoRecord without host-build rows."""
    from dflash_fi.bench.builds import builder_names
    from dflash_fi.bench.turns import BUILD_TARGET_MS

    rows = build_rows(results, kv_dtypes)
    builders = list(dict.fromkeys(r["kernel"] for r in rows))
    _, final, flash_attn = builder_names()
    lines = ["| KV | batch x context | " + " | ".join(f"{b.removeprefix('build: ')}, ms idle / busy" for b in builders)
             + f" | final - FLASH_ATTN, busy: at most {BUILD_TARGET_MS.threshold} ms? |",
             "|---|---|" + "---|" * (len(builders) + 1)]
    for key in dict.fromkeys((r["kv_dtype"], r["batch"], r["context"]) for r in rows):
        of = {r["kernel"]: r for r in rows if (r["kv_dtype"], r["batch"], r["context"]) == key}
        cells = [f"{of[b]['host_ms_idle']:.3f} / {of[b]['host_ms_busy']:.3f}" if b in of else "-" for b in builders]
        if final in of and flash_attn in of:
            over = of[final]["host_ms_busy"] - of[flash_attn]["host_ms_busy"]
            cells.append(f"{over:+.3f} ms, {'yes' if over <= BUILD_TARGET_MS.threshold else '**no**'}")
        else:
            cells.append("-")
        lines.append(f"| {key[0]} | {key[1]} x {key[2]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _median_ms(rows, **where) -> float | None:
    hits = [r["median_ms"] for r in rows if "median_ms" in r and all(r[k] == v for k, v in where.items())]
    return hits[0] if hits else None


def kernel_summary(results: dict, heads=(32, 8)) -> str:
    """Markdown: per shape with 32/8 heads, each kernel's time, the final step's speed-up over `auto`, the
    final kernel's share of the copy bandwidth, and its `plan()`'s host time."""
    rows = [r for r in kernel_rows(results) if (r["num_qo_heads"], r["num_kv_heads"]) == heads]
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    # Host time of plan(), for the final step's wrappers (files recorded before plan_ms lack it).
    planned = [k for k in ("dflash-fi-final", "dflash-fi-final-graph")
               if any(r["kernel"] == k and r.get("plan_ms") is not None for r in rows)]
    lines = ["| KV | batch x context | " + " | ".join(kernels) + " | final vs auto | final, share of copy |"
             + "".join(f" plan() of {k}, host |" for k in planned),
             "|---|---|" + "---|" * (len(kernels) + 2 + len(planned))]
    for kv in dict.fromkeys(r["kv_dtype"] for r in rows):
        for context in sorted({r["context"] for r in rows}):
            for batch in sorted({r["batch"] for r in rows}):
                where = dict(kv_dtype=kv, batch=batch, context=context)
                times = {k: _median_ms(rows, kernel=k, **where) for k in kernels}
                final, auto = times.get("dflash-fi-final"), times.get("flashinfer-auto")
                row_of = {r["kernel"]: r for r in rows if all(r[k] == v for k, v in where.items())}
                final_row = row_of.get("dflash-fi-final", {})
                cells = [f"{t:.4f} ms" if t is not None else "error" for t in times.values()]
                cells.append(f"{auto / final:.2f}x" if final and auto else "-")
                cells.append(f"{final_row['share_of_copy']:.0%}" if "share_of_copy" in final_row else "-")
                for k in planned:
                    plan = row_of.get(k, {}).get("plan_ms")
                    cells.append(f"{plan:.3f} ms" if plan is not None else "-")
                lines.append(f"| {kv} | {batch} x {context} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _shapes(results: dict, kv_dtype: str, heads, batches):
    """(rows, where) per shape of one KV dtype and head count (`batches`, default all), contexts then batches."""
    rows = [r for r in kernel_rows(results) if (r["num_qo_heads"], r["num_kv_heads"]) == heads
            and r["kv_dtype"] == kv_dtype and (batches is None or r["batch"] in batches)]
    for context in sorted({r["context"] for r in rows}):
        for batch in sorted({r["batch"] for r in rows}):
            yield rows, dict(kv_dtype=kv_dtype, batch=batch, context=context)


def kernel_ratios(results: dict, kernel: str, baseline: str, kv_dtype: str = "bf16", heads=(32, 8),
                  batches: tuple[int, ...] | None = None) -> list[dict]:
    """Per shape (`batches`, default all) where both ran: `kernel`'s median time over `baseline`'s."""
    out = []
    for rows, where in _shapes(results, kv_dtype, heads, batches):
        ours, theirs = _median_ms(rows, kernel=kernel, **where), _median_ms(rows, kernel=baseline, **where)
        if ours and theirs:
            out.append({"batch": where["batch"], "context": where["context"], "ratio": ours / theirs})
    return out


def final_draft_kernel(results: dict, kv_dtype: str) -> str:
    """The kernel the final step's draft runs at this KV dtype: XQA where it was measured (SM 9.0, bf16: step 9),
    else the final step's FlashInfer wrapper."""
    xqa = [r for r in kernel_rows(results) if r["kernel"] == "flashinfer-xqa" and r["kv_dtype"] == kv_dtype]
    return "flashinfer-xqa" if any("median_ms" in r for r in xqa) else "dflash-fi-final"


def kernel_pivot(results: dict, kv_dtype: str = "bf16", heads=(32, 8), batches: tuple[int, ...] | None = None) -> list[dict]:
    """Per shape (`batches`, default all): the final draft's kernel (`final_draft_kernel`) against what the
    FLASH_ATTN draft runs (vLLM's FlashAttention), and step 6's CUDA-graph wrapper against the plain one."""
    out, kernel = [], final_draft_kernel(results, kv_dtype)
    for rows, where in _shapes(results, kv_dtype, heads, batches):
        final, fa, wrapper, graph = (_median_ms(rows, kernel=k, **where) for k in
                                     (kernel, "vllm-flash-attn", "dflash-fi-final", "dflash-fi-final-graph"))
        if final and fa:
            out.append({"batch": where["batch"], "context": where["context"], "final_kernel": kernel,
                        "final_ms": final, "flash_attn_ms": fa, "final_over_flash_attn": final / fa,
                        "graph_over_final": graph / wrapper if graph and wrapper else None})
    return out


def kernel_pivot_table(pivot: list[dict]) -> str:
    kernel = pivot[0]["final_kernel"] if pivot else "dflash-fi-final"
    lines = [f"| batch x context | final draft ({kernel}), ms | vLLM FlashAttention, ms | final / FlashAttention | "
             "CUDA-graph wrapper / plain wrapper |", "|---|---|---|---|---|"]
    for p in pivot:
        graph = f"{p['graph_over_final']:.2f}x" if p["graph_over_final"] else "-"
        lines.append(f"| {p['batch']} x {p['context']} | {p['final_ms']:.4f} | {p['flash_attn_ms']:.4f} | "
                     f"{p['final_over_flash_attn']:.2f}x | {graph} |")
    return "\n".join(lines)
