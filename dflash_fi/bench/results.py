"""The committed benchmark results, summarised: the tables README and notebook 05 show, and the targets."""

from __future__ import annotations

import json

from dflash_fi.errors import NoRecord
from dflash_fi.stack import REPO_ROOT

RUNS_DIR = REPO_ROOT / "runs"


# What makes two rows the same measurement: a later file's row replaces an earlier file's.
ROW_KEYS = {"kernels": ("kernel", "kv_dtype", "batch", "context", "num_qo_heads", "num_kv_heads"),
            "e2e": ("model", "run", "kv_cache_dtype", "batch", "cuda_graphs")}


def latest_results(kind: str) -> dict:
    """The `runs/*.bench-<kind>*.json` files of the GPU that ran last, read together: `bench e2e` run in parts
    (`--kv-cache-dtype`, `--only`) writes a file per part, and a rerun writes a new file (runs/ is
    append-only). Where two files measured the same thing, the later one's row is kept. `parts` says where
    each kept row came from; every row carries its file in `part`."""
    files = sorted(RUNS_DIR.glob(f"*.bench-{kind}*.json"))
    if not files:
        raise NoRecord(f"no {kind} benchmark is recorded under runs/: run `dflash-fi bench {kind} --record` on a GPU")
    results = {f.name: json.loads(f.read_text()) for f in files}
    newest = max(results.values(), key=lambda r: r["finished_at"])
    parts = {name: r for name, r in results.items() if r["gpu"] == newest["gpu"]}
    ordered = sorted(parts.items(), key=lambda item: item[1]["finished_at"])
    kept: dict[tuple, dict] = {}
    for name, r in ordered:
        for row in r["rows"]:
            kept[tuple(row[k] for k in ROW_KEYS[kind])] = {**row, "part": name}
    used = {row["part"] for row in kept.values()}
    return {**newest, "rows": list(kept.values()),
            "engines": [e for name, r in ordered if name in used for e in r.get("engines", [])],
            "parts": [{"file": name, "git_commit": r["git_commit"], "finished_at": r["finished_at"],
                       "rows": sum(row["part"] == name for row in kept.values()),
                       "engines_at_once": r.get("engines_at_once")}
                      for name, r in ordered if name in used]}


def _median_ms(rows, **where) -> float | None:
    hits = [r["median_ms"] for r in rows if "median_ms" in r and all(r[k] == v for k, v in where.items())]
    return hits[0] if hits else None


def kernel_summary(results: dict, heads=(32, 8)) -> str:
    """Markdown: per shape with 32/8 heads, each kernel's time, the final step's speed-up over `auto`, the
    final kernel's share of the copy bandwidth, and its `plan()`'s host time."""
    rows = [r for r in results["rows"] if (r["num_qo_heads"], r["num_kv_heads"]) == heads]
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


def e2e_row(rows, model, run, batch, graphs, kv="bf16") -> dict | None:
    """The e2e results row of one engine at one batch size, or None where it was not measured."""
    hit = [r for r in rows if r["model"] == model and r["run"] == run and r["batch"] == batch
           and r["cuda_graphs"] == graphs and r["kv_cache_dtype"] == kv]
    return hit[0] if hit else None


def e2e_pivot(results: dict, kv_dtype: str = "bf16", model: str = "embedded") -> str:
    """Markdown: tokens/s per run (rows) and mode x batch (columns), as "fastest (slowest)" of the repeats."""
    rows = [r for r in results["rows"] if r["model"] == model and r["kv_cache_dtype"] == kv_dtype]
    columns = sorted({(r["cuda_graphs"], r["batch"]) for r in rows})
    lines = ["| run (graph mode) | " + " | ".join(f"{'graphs' if g else 'eager'}, batch {b}" for g, b in columns)
             + " |", "|---|" + "---|" * len(columns)]
    for run in dict.fromkeys(r["run"] for r in rows):
        mode = next((r["cudagraph_mode"] for r in rows if r["run"] == run and r["cuda_graphs"]), "-")
        cells = []
        for graphs, batch in columns:
            r = next((x for x in rows if x["run"] == run and x["cuda_graphs"] == graphs and x["batch"] == batch), None)
            cells.append(f"{r['tokens_per_s']:.0f} ({min(r['repeats_tokens_per_s']):.0f})" if r else "-")
        lines.append(f"| {run} ({mode}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _build_ms(row: dict | None) -> str:
    """A row's attention metadata build time per decoding step (host), summed over where it happened."""
    builds = (row or {}).get("metadata_build_ms_per_step")
    return f"{sum(builds.values()):.3f}" if builds else "not measured"


def draft_overhead(kernels: dict, e2e: dict, context: int = 512) -> str:
    """Markdown: per batch (embedded pair, bf16, graphs), the time per decoding step of the FLASH_ATTN draft and
    of the final FlashInfer draft, their gap, the host time of each engine's attention metadata builds per step,
    and what one FlashInfer `plan()` of the draft's shape costs (kernel benchmark: embedded heads, `context`
    tokens, about the benchmark prompts' length)."""
    from dflash_fi.models import DEFAULT_TARGET
    from dflash_fi.steps import FINAL_STEP

    config = json.loads((DEFAULT_TARGET / "config.json").read_text())
    heads = (config["num_attention_heads"], config["num_key_value_heads"])
    lines = [f"| batch | ms per step: FLASH_ATTN draft | step {FINAL_STEP} FlashInfer draft | gap | metadata builds "
             "per step, FLASH_ATTN draft | the same, FlashInfer draft | one FlashInfer plan() |", "|---|---|---|---|---|---|---|"]
    for batch in sorted({r["batch"] for r in e2e["rows"] if r["model"] == "embedded"}):
        fa = e2e_row(e2e["rows"], "embedded", "FLASH_ATTN draft", batch, True)
        fi = e2e_row(e2e["rows"], "embedded", f"step {FINAL_STEP} FLASHINFER draft", batch, True)
        plan = next((r.get("plan_ms") for r in kernels["rows"] if r["kernel"] == "dflash-fi-final"
                     and r["kv_dtype"] == "bf16" and r["batch"] == batch and r["context"] == context
                     and (r["num_qo_heads"], r["num_kv_heads"]) == heads), None)
        if fa and fi:
            lines.append(f"| {batch} | {fa['step_ms']:.3f} | {fi['step_ms']:.3f} | {fi['step_ms'] - fa['step_ms']:+.3f} | "
                         f"{_build_ms(fa)} | {_build_ms(fi)} | "
                         + (f"{plan:.3f} |" if plan is not None else "not measured |"))
    return "\n".join(lines)


def build_breakdown(e2e: dict, batch: int = 1, model: str = "embedded") -> str:
    """Markdown: where the metadata builds of each graphs engine (bf16) spend host time per decoding step."""
    lines = ["| run | where | builds per step | ms per step |", "|---|---|---|---|"]
    for row in e2e["rows"]:
        if (row["model"], row["kv_cache_dtype"], row["cuda_graphs"], row["batch"]) == (model, "bf16", True, batch):
            for where, ms in (row.get("metadata_build_ms_per_step") or {}).items():
                count = (row.get("metadata_builds_per_step") or {}).get(where, "-")
                lines.append(f"| {row['run']} | {where} | {count} | {ms:.3f} |")
    return "\n".join(lines)


def build_profiles(where: str = "draft step", top: int = 3) -> str:
    """Markdown: the profiled engines (`runs/*.build-profile-*.json`, DFLASH_FI_PROFILE_BUILDS): per engine, the
    costliest functions inside its `where` metadata builds, by own time (the profiler slows every build)."""
    lines = ["| file | engine's builds | function | calls | own time, s |", "|---|---|---|---|---|"]
    for path in sorted(RUNS_DIR.glob("*.build-profile-*.json")):
        for engine in json.loads(path.read_text())["engines"]:
            for builder, text in (engine.get("metadata_build_profiles") or {}).items():
                if not builder.startswith(where):
                    continue
                table = text.split("filename:lineno(function)")[-1].strip().splitlines()[:top]
                for line in table:
                    ncalls, tottime, _, _, _, function = line.split(maxsplit=5)
                    lines.append(f"| `{path.name}` | {builder} | `{function.split('/')[-1]}` | {ncalls} | {tottime} |")
    return "\n".join(lines)


def e2e_summary(results: dict, model: str | None = None) -> str:
    """Markdown: every engine row (model, run, KV, mode, batch: tokens/s, TPOT, step time, tau, agreement)."""
    from dflash_fi.bench.e2e import format_rows

    return format_rows([r for r in results["rows"] if model is None or r["model"] == model])


def targets(kernels: dict, e2e: dict) -> list[dict]:
    """The performance targets of issue #10, each with what was measured and whether it is met."""
    from dflash_fi.bench.e2e import SHAPE_MODEL

    out = []
    k = [r for r in kernels["rows"] if "median_ms" in r and (r["num_qo_heads"], r["num_kv_heads"]) == (32, 8)]
    speedups = [(_median_ms(k, kernel="flashinfer-auto", kv_dtype="bf16", batch=r["batch"], context=r["context"])
                 / r["median_ms"], r["batch"], r["context"])
                for r in k if r["kernel"] == "dflash-fi-final" and r["kv_dtype"] == "bf16" and r["batch"] >= 16]
    worst = min(speedups) if speedups else None
    out.append({"target": "dflash-fi-final at least 2x faster than flashinfer-auto, every bf16 row with batch >= 16",
                "measured": f"smallest speed-up {worst[0]:.2f}x (batch {worst[1]} x {worst[2]})" if worst else "-",
                "met": bool(worst and worst[0] >= 2)})
    big = next((r for r in k if r["kernel"] == "dflash-fi-final" and r["kv_dtype"] == "bf16" and r["batch"] == 64
                and r["context"] == 8192), None)
    out.append({"target": "dflash-fi-final at least 65% of the copy bandwidth at batch 64 x 8192, bf16",
                "measured": f"{big['share_of_copy']:.0%} ({big['achieved_GBps']:.0f} of {kernels['copy_GBps']:.0f} GB/s)"
                if big else "-", "met": bool(big and big["share_of_copy"] >= 0.65)})
    rows = e2e["rows"]
    for batch in (1, 32):
        fi, fa = e2e_row(rows, "embedded", "step 6 FLASHINFER draft", batch, True), e2e_row(rows, "embedded", "FLASH_ATTN draft", batch, True)
        ratio = fi["tokens_per_s"] / fa["tokens_per_s"] if fi and fa else None
        out.append({"target": f"graphs, batch {batch}: final FlashInfer draft at least as fast as the FLASH_ATTN draft",
                    "measured": f"{ratio:.2f}x ({fi['tokens_per_s']:.0f} vs {fa['tokens_per_s']:.0f} tokens/s)"
                    if ratio else "-", "met": bool(ratio and ratio >= 1)})
    fi, base = e2e_row(rows, "embedded", "step 6 FLASHINFER draft", 1, True), e2e_row(rows, "embedded", "no speculation", 1, True)
    ratio = fi["tokens_per_s"] / base["tokens_per_s"] if fi and base else None
    out.append({"target": "graphs, batch 1: DFlash at least 3x the no-speculation tokens/s",
                "measured": f"{ratio:.2f}x" if ratio else "-", "met": bool(ratio and ratio >= 3)})
    shape = [(e2e_row(rows, SHAPE_MODEL, "step 6 FLASHINFER draft", b, True),
              e2e_row(rows, SHAPE_MODEL, "FLASH_ATTN draft", b, True)) for b in (1, 32)]
    gaps = [fi["step_ms"] / fa["step_ms"] - 1 for fi, fa in shape if fi and fa]
    out.append({"target": "Qwen3-4B shape: final FlashInfer draft's step time within 3% of the FLASH_ATTN draft's",
                "measured": ", ".join(f"{g:+.1%}" for g in gaps) + " (batch 1, 32)" if gaps else "not measured",
                "met": (max(gaps) <= 0.03) if gaps else None})
    return out


def targets_table(kernels: dict, e2e: dict) -> str:
    lines = ["| target | measured | met |", "|---|---|---|"]
    verdict = {True: "yes", False: "**no**", None: "not run"}
    lines += [f"| {t['target']} | {t['measured']} | {verdict[t['met']]} |" for t in targets(kernels, e2e)]
    return "\n".join(lines)
