"""The engine benchmark's results (`dflash-fi bench e2e`: engines in turns), summarised in pairs of rounds.

Round r of two engines is a pair. A ratio is computed per pair, and reported as min / median / max over the
pairs, so that a reader sees how far the machine's noise reaches. Embedded pair: tokens/s, final FlashInfer
draft over FLASH_ATTN draft. Qwen3-4B shape: time per decoding step, FlashInfer over FLASH_ATTN, minus 1.
Host build time: the attention metadata builds per decoding step, summed over builders, median of the rounds.
"""

from __future__ import annotations

import json
import statistics

from dflash_fi.bench.e2e import EMBEDDED, FLASH_ATTN_RUN, SHAPE_MODEL, final_run
from dflash_fi.errors import NoRecord
from dflash_fi.stack import REPO_ROOT

RUNS_DIR = REPO_ROOT / "runs"
TARGET_RATIO, TARGET_SHAPE_GAP = 0.97, 0.03


def latest_turns(runs_dir=RUNS_DIR) -> dict:
    """The newest committed `runs/*.bench-turns*.json` (one run of every engine, in turns)."""
    files = sorted(runs_dir.glob("*.bench-turns*.json"))
    if not files:
        raise NoRecord("no engine benchmark in turns is recorded under runs/: run `dflash-fi bench e2e --record` "
                       "on a GPU")
    results = {f.name: json.loads(f.read_text()) for f in files}
    name, newest = max(results.items(), key=lambda item: item[1]["finished_at"])
    return {**newest, "file": name}


def rounds_of(turns: dict, model: str, run: str, batch: int) -> dict[int, dict]:
    return {r["round"]: r for r in turns["rows"] if (r["model"], r["run"], r["batch"]) == (model, run, batch)}


def batches(turns: dict, model: str) -> list[int]:
    return sorted({r["batch"] for r in turns["rows"] if r["model"] == model})


def pair_ratios(turns: dict, model: str, run: str, baseline: str, batch: int, metric: str = "tokens_per_s") -> list[float]:
    """run / baseline, one value per round both engines completed."""
    ours, theirs = rounds_of(turns, model, run, batch), rounds_of(turns, model, baseline, batch)
    return [ours[k][metric] / theirs[k][metric] for k in sorted(ours) if k in theirs]


def spread(values: list[float]) -> dict | None:
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "pairs": len(values)} \
        if values else None


def build_ms(row: dict | None) -> float | None:
    builds = (row or {}).get("metadata_build_ms_per_step")
    return sum(builds.values()) if builds else None


def median_of_rounds(turns: dict, model: str, run: str, batch: int, value) -> float | None:
    values = [v for v in (value(r) for r in rounds_of(turns, model, run, batch).values()) if v is not None]
    return statistics.median(values) if values else None


def _fmt(s: dict | None, fmt: str = "{:.2f}") -> str:
    return "-" if s is None else " / ".join(fmt.format(s[k]) for k in ("min", "median", "max"))


def turns_table(turns: dict, model: str = EMBEDDED) -> str:
    """Markdown, one row per batch: each engine's median over rounds, and each FlashInfer draft's ratio to the
    FLASH_ATTN draft per pair of rounds (tokens/s for the embedded pair, step time for the Qwen3-4B shape)."""
    runs = list(dict.fromkeys(r["run"] for r in turns["rows"] if r["model"] == model))
    drafts = [run for run in runs if "FLASHINFER" in run]
    metric, unit = ("tokens_per_s", "tokens/s") if model == EMBEDDED else ("step_ms", "ms per step")
    lines = ["| batch | " + " | ".join(f"{run}, {unit}" for run in runs) + " | "
             + " | ".join(f"{run} / FLASH_ATTN draft, min / median / max" for run in drafts) + " |",
             "|---|" + "---|" * (len(runs) + len(drafts))]
    for batch in batches(turns, model):
        values = [median_of_rounds(turns, model, run, batch, lambda r: r[metric]) for run in runs]
        cells = [f"{v:.0f}" if metric == "tokens_per_s" else f"{v:.3f}" for v in values]
        cells += [_fmt(spread(pair_ratios(turns, model, run, FLASH_ATTN_RUN, batch, metric)), "{:.3f}")
                  for run in drafts]
        lines.append(f"| {batch} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_table(turns: dict, model: str = EMBEDDED, batch: int = 1) -> str:
    """Markdown: where each engine's attention metadata builds spend host time per decoding step (median of the
    rounds), beside the step time: the breakdown before (step 6) and after (final step) removing the overhead."""
    lines = ["| run | where | builds per step | host ms per step | step ms |", "|---|---|---|---|---|"]
    for run in dict.fromkeys(r["run"] for r in turns["rows"] if r["model"] == model):
        rows = list(rounds_of(turns, model, run, batch).values())
        step = statistics.median(r["step_ms"] for r in rows)
        for where in dict.fromkeys(w for r in rows for w in (r.get("metadata_build_ms_per_step") or {})):
            ms = statistics.median(r["metadata_build_ms_per_step"].get(where, 0.0) for r in rows)
            count = statistics.median(r["metadata_builds_per_step"].get(where, 0.0) for r in rows)
            lines.append(f"| {run} | {where} | {count:.2f} | {ms:.3f} | {step:.3f} |")
    return "\n".join(lines)


def plan_ms(kernels: dict, batch: int, heads: tuple[int, int], context: int = 512) -> float | None:
    """The kernel benchmark's host time of one `plan()` of the final wrapper at this batch."""
    hits = [r["plan_ms"] for r in kernels["rows"] if r["kernel"] == "dflash-fi-final" and r["kv_dtype"] == "bf16"
            and (r["batch"], r["context"], r["num_qo_heads"], r["num_kv_heads"]) == (batch, context, *heads)
            and r.get("plan_ms") is not None]
    return hits[0] if hits else None


def targets(kernels: dict, turns: dict, embedded_heads: tuple[int, int]) -> list[dict]:
    """The final FlashInfer draft against the FLASH_ATTN draft, from the committed files (medians of pairs)."""
    out, final = [], final_run()
    for batch in batches(turns, EMBEDDED):
        s = spread(pair_ratios(turns, EMBEDDED, final, FLASH_ATTN_RUN, batch))
        out.append({"target": f"embedded pair, batch {batch}: final FlashInfer draft at least {TARGET_RATIO}x the "
                              "FLASH_ATTN draft's tokens/s (median of paired rounds)",
                    "measured": f"{_fmt(s, '{:.3f}x')} (min / median / max of {s['pairs']} pairs)" if s else "-",
                    "met": None if s is None else s["median"] >= TARGET_RATIO})
    for batch in batches(turns, SHAPE_MODEL):
        s = spread([r - 1 for r in pair_ratios(turns, SHAPE_MODEL, final, FLASH_ATTN_RUN, batch, "step_ms")])
        out.append({"target": f"Qwen3-4B shape, batch {batch}: final FlashInfer draft's step time within "
                              f"{TARGET_SHAPE_GAP:.0%} of the FLASH_ATTN draft's",
                    "measured": f"{_fmt(s, '{:+.1%}')} (min / median / max of {s['pairs']} pairs)" if s else "-",
                    "met": None if s is None else s["median"] <= TARGET_SHAPE_GAP})
    for model, heads in ((EMBEDDED, embedded_heads), (SHAPE_MODEL, (32, 8))):
        for batch in batches(turns, model):
            fi, fa = (median_of_rounds(turns, model, run, batch, build_ms) for run in (final, FLASH_ATTN_RUN))
            plan = plan_ms(kernels, batch, heads)
            ok = None if None in (fi, fa, plan) else fi <= fa + plan
            if ok is not None:
                measured = f"{fi:.3f} ms vs {fa:.3f} + {plan:.3f} ms"
            elif None in (fi, fa):
                measured = "no host build times in the engine benchmark"
            else:
                measured = (f"{fi:.3f} ms vs {fa:.3f} ms + one plan(), which the kernel benchmark did not time "
                            f"at batch {batch}")
            out.append({"target": f"{model}, batch {batch}: host build time per step at most the FLASH_ATTN "
                                  "draft's plus one plan()", "measured": measured, "met": ok})
    return out


def targets_table(kernels: dict, turns: dict, embedded_heads: tuple[int, int]) -> str:
    lines = ["| target | measured | met |", "|---|---|---|"]
    verdict = {True: "yes", False: "**no**", None: "not measured"}
    lines += [f"| {t['target']} | {t['measured']} | {verdict[t['met']]} |"
              for t in targets(kernels, turns, embedded_heads)]
    return "\n".join(lines)
