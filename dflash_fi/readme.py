"""The README's generated blocks: what the committed records and results files say, never typed in.

Each block sits between `<!-- NAME -->` and `<!-- /NAME -->` in README.md; `dflash-fi report --update-readme`
rewrites them, and tests/test_readme.py checks that README.md holds exactly what they render to now.
"""

from __future__ import annotations

import re
from pathlib import Path

from dflash_fi.stack import REPO_ROOT

README = REPO_ROOT / "README.md"


def blocks() -> dict[str, str]:
    from dflash_fi.bench.e2e import SHAPE_MODEL
    from dflash_fi.bench.results import (build_breakdown, build_profiles, draft_overhead, e2e_pivot, e2e_summary,
                                         kernel_summary, latest_results, targets_table)
    from dflash_fi.evidence.report import recorded_walkthrough, render_table

    records, provenance = recorded_walkthrough()
    kernels, e2e = latest_results("kernels"), latest_results("e2e")
    parts = ", ".join(f"`runs/{p['file']}` (commit {p['git_commit'][:10]}, {p['finished_at']})" for p in e2e["parts"])
    return {
        "walkthrough-table": f"<!-- {provenance} -->\n{render_table(records)}",
        "performance-targets": targets_table(kernels, e2e),
        "kernel-summary": (f"{kernels['gpu']} (SM {kernels['compute_capability']}), `runs/{kernels['parts'][0]['file']}` "
                           f"(commit {kernels['git_commit'][:10]}); device-to-device copy {kernels['copy_GBps']:.0f} GB/s "
                           f"(read + written).\n\n{kernel_summary(kernels)}"),
        "e2e-summary": (f"{e2e['gpu']} (SM {e2e['compute_capability']}): {parts}. Output tokens/s, the fastest of the "
                        f"repeats (the slowest in brackets).\n\nbf16 KV cache:\n\n{e2e_pivot(e2e, 'bf16')}\n\n"
                        f"fp8-e4m3 KV cache:\n\n{e2e_pivot(e2e, 'fp8-e4m3')}"),
        "draft-overhead": (f"Embedded pair, bf16, graphs:\n\n{draft_overhead(kernels, e2e)}\n\nAt batch 1, by builder:\n\n"
                           f"{build_breakdown(e2e, batch=1)}\n\nThe Qwen3-4B shape (random weights, tau 1):\n\n"
                           f"{e2e_summary(e2e, model=SHAPE_MODEL)}\n\n{build_breakdown(e2e, batch=1, model=SHAPE_MODEL)}"
                           f"\n\nProfiled drafter builds at that shape, costliest functions by own time:\n\n"
                           f"{build_profiles(top=4)}"),
    }


def pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- {re.escape(name)} -->\n)(.*?)(\n<!-- /{re.escape(name)} -->)", re.S)


def update_readme(path: Path = README) -> list[str]:
    text = path.read_text()
    for name, body in blocks().items():
        if not pattern(name).search(text):
            raise KeyError(f"README.md has no <!-- {name} --> block")
        text = pattern(name).sub(lambda m: m.group(1) + body + m.group(3), text)
    path.write_text(text)
    return list(blocks())
