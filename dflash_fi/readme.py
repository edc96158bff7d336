"""The README's generated blocks: what the committed records and results files say, never typed in.

Each block sits between `<!-- NAME -->` and `<!-- /NAME -->` in README.md; `dflash-fi report --update-readme`
rewrites them, and tests/test_readme.py checks that README.md holds exactly what they render to now.
"""

from __future__ import annotations

import re
from pathlib import Path

from dflash_fi.stack import REPO_ROOT

README = REPO_ROOT / "README.md"


def _embedded_heads() -> tuple[int, int]:
    import json

    from dflash_fi.models import DEFAULT_TARGET

    config = json.loads((DEFAULT_TARGET / "config.json").read_text())
    return config["num_attention_heads"], config["num_key_value_heads"]


def _walkthrough_sources(records: dict) -> str:
    """Where the table's run is written down whole, and the near-tie margin its checks used."""
    from dflash_fi.evidence.ledger import RUNS_DIR, gpu_slug
    from dflash_fi.evidence.near_ties import committed_margin

    first = next(iter(records.values()))
    output = RUNS_DIR / f"{gpu_slug(first['gpu'])}.walkthrough-{first['spec']['extra']['walkthrough_id']}.txt"
    margin = committed_margin()
    lines = []
    if output.is_file():
        lines.append(f"That run's whole output, with its checks: `runs/{output.name}`.")
    if margin:
        lines.append(f"Near-tie margin: {margin['margin']:.3f} nats (`runs/{margin['file']}`).")
    return ("\n\n" + " ".join(lines)) if lines else ""


def _engine_blocks(kernels: dict) -> dict[str, str]:
    from dflash_fi.bench.e2e import EMBEDDED, SHAPE_MODEL
    from dflash_fi.bench.turns import build_table, latest_turns, targets_table, turns_table
    from dflash_fi.errors import NoRecord

    try:
        turns = latest_turns()
    except NoRecord as exc:
        return {name: f"Not measured yet: {exc}" for name in ("performance-targets", "e2e-summary", "draft-overhead")}
    source = (f"{turns['gpu']} (SM {turns['compute_capability']}), `runs/{turns['file']}` (commit "
              f"{turns['git_commit'][:10]}, {turns['finished_at']}), {turns['rounds']} rounds of every engine in turn.")
    return {
        "performance-targets": f"{source}\n\n{targets_table(kernels, turns, _embedded_heads())}",
        "e2e-summary": (f"{source}\n\nThe embedded pair, output tokens/s (median of the rounds):\n\n"
                        f"{turns_table(turns, EMBEDDED)}\n\nThe Qwen3-4B shape (random weights, tau 1), ms per "
                        f"decoding step (median of the rounds):\n\n{turns_table(turns, SHAPE_MODEL)}"),
        "draft-overhead": (f"{source}\n\nEmbedded pair, batch 1:\n\n{build_table(turns, EMBEDDED, 1)}\n\nEmbedded "
                           f"pair, batch 32:\n\n{build_table(turns, EMBEDDED, 32)}\n\nThe Qwen3-4B shape, batch 1:"
                           f"\n\n{build_table(turns, SHAPE_MODEL, 1)}\n\nThe Qwen3-4B shape, batch 32:\n\n"
                           f"{build_table(turns, SHAPE_MODEL, 32)}"),
    }


def blocks() -> dict[str, str]:
    from dflash_fi.bench.results import kernel_summary, latest_results
    from dflash_fi.evidence.report import recorded_walkthrough, render_mixed_table, render_table

    records, provenance = recorded_walkthrough()
    kernels = latest_results("kernels")
    mixed = render_mixed_table(records) if any("mixed" in r for r in records.values()) else "(not recorded)"
    return {
        "walkthrough-table": f"<!-- {provenance} -->\n{render_table(records)}{_walkthrough_sources(records)}",
        "mixed-table": mixed,
        "kernel-summary": (f"{kernels['gpu']} (SM {kernels['compute_capability']}), `runs/{kernels['parts'][-1]['file']}` "
                           f"(commit {kernels['git_commit'][:10]}); device-to-device copy {kernels['copy_GBps']:.0f} GB/s "
                           f"(read + written).\n\n{kernel_summary(kernels)}"),
        **_engine_blocks(kernels),
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
