"""The host-work lab's results as markdown tables (notebook 07): each takes what a `dflash_fi.lab.host_work` function
returned (its rows, or its rows per KV dtype), so that a notebook computes once and both shows and checks the same
rows."""

from __future__ import annotations


def _table(header: list[str], rows: list[list]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                      *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)])


def bound_planning_table(rows: list[dict]) -> str:
    """`bound_planning_errors` rows of every KV dtype: one row per KV dtype, the largest differences over its batches."""
    by_kv = {kv: [r for r in rows if r["kv_dtype"] == kv] for kv in dict.fromkeys(r["kv_dtype"] for r in rows)}
    return _table(["KV", "draft batches", "copied from the GPU", "planned from bounds vs exact plan",
                   "bounds vs reference", "exact vs reference"],
                  [[kv, len(kv_rows), sum(r["copied_from_gpu"] for r in kv_rows),
                    *(f"{max(r[key] for r in kv_rows):.1e}"
                      for key in ("bounds_vs_exact", "bounds_vs_reference", "exact_vs_reference"))]
                   for kv, kv_rows in by_kv.items()])


def plan_reuse_table(by_kv: dict[str, list[dict]]) -> str:
    """KV dtype -> `plan_reuse_errors(kv)`: one row per KV dtype, the largest differences over its draft steps."""
    return _table(["KV", "draft steps", "`plan()` calls (expected)", "exact page tables", "steps with empty rows",
                   "writes past the batch", "kept plan vs fresh, same schedule", "kept vs reference",
                   "fresh default vs reference"],
                  [[kv, len(rows), f"{sum(r['planned'] for r in rows)} ({sum(r['expects_plan'] for r in rows)})",
                    sum(r["page_table_exact"] for r in rows), sum(r["empty_rows"] > 0 for r in rows),
                    sum(r["writes_past_output"] for r in rows),
                    *(f"{max(r[key] for r in rows):.1e}"
                      for key in ("reused_vs_fresh_unsplit", "reused_vs_reference", "fresh_vs_reference"))]
                   for kv, rows in by_kv.items()])
