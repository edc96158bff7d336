"""The host-work lab's results as markdown tables (notebook 07): each takes what a `dflash_fi.lab.host_work` function
returned, keyed by step (or KV dtype), so that a notebook computes once and both shows and checks the same rows."""

from __future__ import annotations


def _table(header: list[str], rows: list[list]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                      *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)])


DRAFT_BUILD_ROWS = (("`seq_lens` copied from the GPU (waits for it)", "copied_from_gpu"),
                    ("page offsets `plan()` schedules from (host)", "planned_indptr"),
                    ("page offsets the kernel reads (GPU)", "kernel_indptr"),
                    ("`max_token_per_sequence` told to `plan()`", "max_token_per_sequence"),
                    ("`disable_split_kv` told to `plan()`", "disable_split_kv"))


def draft_build_table(builds: dict[int, dict]) -> str:
    """step -> `draft_build_reads_gpu_lengths(step)`: one column per step."""
    return _table(["a DFlash draft batch's build", *(f"step {s}" for s in builds)],
                  [[name, *(b[key] for b in builds.values())] for name, key in DRAFT_BUILD_ROWS])


def runner_table(runner: dict[int, list[dict]]) -> str:
    """step -> `runner_builds_for_draft_layers(step)`: per target batch, whether each step planned for the draft
    layers."""
    steps = list(runner)
    return _table(["target batch, built for the draft layers", *(f"step {s}: planned" for s in steps)],
                  [[rows[0]["batch"], *(r["planned"] for r in rows)] for rows in zip(*runner.values())])


def plans_table(over: dict[int, list[dict]]) -> str:
    """step -> `plans_over_draft_steps(step)`: totals over the draft steps, one column per step."""
    totals = (("`plan()` calls", lambda rows: sum(r["plans"] for r in rows)),
              ("copies of `seq_lens` from the GPU", lambda rows: sum(r["copied_from_gpu"] for r in rows)),
              ("launches of step 8's page-table kernel", lambda rows: sum(r["page_table_launches"] or 0 for r in rows)),
              ("steps whose `run()` reads the exact page table",
               lambda rows: sum(r["reads_exact_page_table"] for r in rows)),
              ("steps that keep rows of requests that left", lambda rows: sum(r["empty_rows"] > 0 for r in rows)),
              ("... whose rows read no query and no page",
               lambda rows: sum(r["empty_rows"] > 0 and r["empty_rows_read_nothing"] for r in rows)))
    return _table(["over one decode's draft steps", *(f"step {s}" for s in over)],
                  [[name, *(total(rows) for rows in over.values())] for name, total in totals])


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
