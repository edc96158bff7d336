"""What README.md and docs/RESULTS.md say that is generated: never typed in, never read back.

README.md holds generated blocks, each between `<!-- NAME -->` and `<!-- /NAME -->`: the step table (from the step
modules), a short verdict of the results and the list of notebooks. docs/RESULTS.md is generated whole: every evidence
table, from the evidence summary (`dflash_fi.summary`), as the pass judged it. `dflash-fi report --update-readme`
rewrites both; tests/test_readme.py checks that they hold exactly what they render to now.
"""

from __future__ import annotations

import re
from pathlib import Path

from dflash_fi.stack import REPO_ROOT

README = REPO_ROOT / "README.md"
RESULTS = REPO_ROOT / "docs" / "RESULTS.md"


def step_table() -> str:
    """Markdown: each step, what it changes (its module's title), its hunks, module, notebook and tests."""
    from dflash_fi.notebook import NOTEBOOK_OF_STEP
    from dflash_fi.steps import STEP_MODULES, STEPS, step_module, step_title

    lines = ["| step | what changes | hunks | module, diff | notebook | tests |", "|---|---|---|---|---|---|"]
    for step in STEPS:
        added = len(step_module(step).HUNKS) - (len(step_module(step - 1).HUNKS) if step else 0)
        module = "dflash_fi/steps/" + STEP_MODULES[step].rsplit(".", 1)[1] + ".py"
        diff = f", [`docs/steps/step{step}.diff`](docs/steps/step{step}.diff)" if step else ""
        lines.append(f"| {step} | {step_title(step).split(' - ', 1)[1].rstrip('.')} | {added} | `{module}`{diff} | "
                     f"`notebooks/{NOTEBOOK_OF_STEP[step]}` | `pytest -m step{step}` |")
    return "\n".join(lines)


def notebook_list() -> str:
    """Markdown: each notebook and its title (its first heading), in reading order; one whose cells or step modules
    changed after its recorded execution says so, with the commit its outputs come from."""
    from dflash_fi.errors import BadInput
    from dflash_fi.evidence.notebooks import METADATA_KEY, NOTEBOOKS_DIR, read_notebook, source_sha256
    from dflash_fi.summary import step_hash

    lines = []
    for path in sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.py")):
        title = next((line[4:].strip() for line in path.read_text().splitlines() if line.startswith("# # ")), "")
        again = f"`dflash-fi notebooks --only {path.stem[:2]}` on a GPU"
        if not path.with_suffix(".ipynb").is_file():
            raise BadInput(f"{path.stem}.ipynb is missing beside {path.name}: run `.venv/bin/jupytext --sync "
                           f"notebooks/{path.name}`, then {again}")
        nb = read_notebook(path.with_suffix(".ipynb"))
        executed = nb.get("metadata", {}).get(METADATA_KEY) or {}
        current = executed.get("source_sha256") == source_sha256(nb) and executed.get("step_hash") == step_hash()
        stale = "" if current else (
            f" (**not re-executed**: its outputs come from the run on the {executed.get('executed_on')} at "
            f"{executed.get('commit', '')[:7]}, and its cells or the step modules changed since: {again})" if executed
            else f" (**not executed**: {again})")
        lines.append(f"- [`{path.stem}`](notebooks/{path.stem}.ipynb): {title}{stale}")
    return "\n".join(lines)


def _summary():
    import dflash_fi.summary as S
    from dflash_fi.errors import NoRecord

    try:
        return S.read()
    except NoRecord:
        return None


def _sections(summary) -> str:
    """One line per section: what ran, where, when, how long; and whether its step modules are HEAD's."""
    import dflash_fi.summary as S

    stale = set(summary.stale())
    return "\n".join(f"- {s.key}: `{e.provenance.command}` on {S.describe(e.provenance)}"
                     + (" (**stale**: the step modules changed since)" if s in stale else "")
                     for s, e in summary.entries.items())


def plan_race_line(checks) -> str | None:
    """The plan race in the engines (docs/plan-race.md), from the walkthrough's race checks' numbers."""
    from dflash_fi.evidence.check_types import CheckKind
    from dflash_fi.evidence.plan_race import RACE_STEPS

    race = [c for c in checks if c.id.kind is CheckKind.NO_HARMFUL_REPLAN and c.numbers]
    if not race:
        return None
    total = {k: sum(c.numbers[k] for c in race) for k in ("async_scheduling", "draft_plans", "pending",
                                                           "pending_changed")}
    return (f"- The plan race ([`docs/plan-race.md`](docs/plan-race.md)): {len(race)} FlashInfer-draft engines of "
            f"steps {', '.join(map(str, RACE_STEPS))} on the mixed workload, {total['async_scheduling']} with async "
            f"scheduling: {total['draft_plans']} draft plans, {total['pending']} made while the wrapper's last plan "
            f"was still queued, {total['pending_changed']} of those with another schedule.")


def verdict() -> str:
    """At most ten lines: what the committed evidence says, and where the tables are."""
    import dflash_fi.summary as S
    from dflash_fi.bench.stats import Verdict
    from dflash_fi.bench.turns import stored_targets
    from dflash_fi.evidence.check_types import Verdict as CheckVerdict

    summary = _summary()
    if summary is None:
        return "- No GPU evidence pass is committed yet (`evidence/` is empty): see 'The evidence' below."
    lines = []
    if S.Section.WALKTHROUGH in summary.entries:
        records, _, _, checks, made = summary.walkthrough()
        counts = {v: sum(c.verdict is v for c in checks) for v in CheckVerdict}
        lines.append(f"- The walkthrough: {counts[CheckVerdict.PASS]} of {len(checks)} checks pass "
                     f"({counts[CheckVerdict.FAIL]} fail, {counts[CheckVerdict.NOT_RUN]} not run); {len(records)} "
                     f"engines on {made.gpu}, commit {(made.commit or '?')[:10]}.")
        if race := plan_race_line(checks):
            lines.append(race)
    if S.Section.BENCH_E2E in summary.entries:
        found = stored_targets(summary)
        counts = {v: sum(t.verdict is v for t in found) for v in Verdict}
        lines.append("- The performance targets (engines in turns, 95% intervals): "
                     + ", ".join(f"{counts[v]} {v.value}" for v in Verdict if counts[v]) + f" of {len(found)}.")
    if S.Section.GPU_TESTS in summary.entries:
        counts = summary.entry(S.Section.GPU_TESTS).data["counts"]
        lines.append("- `pytest tests/gpu` on the GPU: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n) + ".")
    if S.Section.NOTEBOOKS in summary.entries:
        ran = summary.entry(S.Section.NOTEBOOKS).data["notebooks"].values()
        lines.append(f"- The notebooks, executed on the GPU: {sum(n['status'] == 'ok' for n in ran)} of {len(ran)} ran "
                     "to the end.")
    lines.append(f"- Every table behind these lines: [`docs/RESULTS.md`](docs/RESULTS.md), generated from "
                 f"[`evidence/{summary.path.name}`](evidence/{summary.path.name}).")
    return "\n".join(lines)


def results_page() -> str:
    """docs/RESULTS.md, whole."""
    import dflash_fi.summary as S
    from dflash_fi.bench.results import build_summary, kernel_pivot, kernel_pivot_table, kernel_summary, latest_kernels
    from dflash_fi.bench.turns import build_table, idle_cpu, latest_turns, stored_targets, targets_table, turns_table, \
        vcpu_summary
    from dflash_fi.evidence.report import render_mixed_table, render_table

    parts = ["# Results", "", "Generated by `dflash-fi report --update-readme` from the evidence summary; do not edit. "
             "What each check and benchmark is: the README and the notebooks.", ""]
    summary = _summary()
    if summary is None:
        return "\n".join(parts + ["No GPU evidence pass is committed yet."]) + "\n"
    parts += ["## The evidence pass", "", f"`evidence/{summary.path.name}`, one section per command:", "",
              _sections(summary), ""]
    if S.Section.WALKTHROUGH in summary.entries:
        records, _, margin, checks, made = summary.walkthrough()
        same = summary.entry(S.Section.WALKTHROUGH).data["sameness"]
        parts += ["## The walkthrough", "", render_table(records, same), "",
                  "### Mixed batches (the same engines' second workload)", "", render_mixed_table(records, same), "",
                  "### Its checks", "", "As the walkthrough judged them when it ran.", "",
                  *(f"- {c.line()}" for c in checks), ""]
        if margin and margin.get("margin") is not None:
            parts += [f"Near-tie margin: {margin['margin']:.3f} nats ({margin['rule']}; this walkthrough's calibration "
                      f"pairs parted {margin['partings']} times, at gaps up to {margin['largest_gap']}).", ""]
    if S.Section.BENCH_E2E in summary.entries:
        turns = latest_turns(summary)
        cpu = idle_cpu(turns)
        parts += ["## Engines in turns", "", f"Round 1 warms up and is not measured. Idle engines used "
                  f"{cpu['free']:.2f} CPU s (median) during another engine's round while running free (the first "
                  f"round) and {cpu['stopped']:.2f} CPU s while stopped (the later rounds). {vcpu_summary(turns)}", "",
                  "### Targets", "", targets_table(stored_targets(summary)), ""]
        for pair in turns.pairs():
            parts += [f"### {pair.value}", "", turns_table(turns, pair), ""]
            for batch in turns.batches(pair):
                parts += [f"Where the host time of a decoding step goes, {pair.value}, batch {batch}:", "",
                          build_table(turns, pair, batch), ""]
    if S.Section.PROFILE in summary.entries:
        from dflash_fi.bench.profile import BATCHES, anatomy, gap_table, latest_profile

        profile = latest_profile(summary)
        parts += ["## Where a draft build's host time goes", "", "cProfile inside every metadata build, which slows what "
                  "it watches; read where the time goes, not how much.", ""]
        for batch in BATCHES:
            parts += [f"Batch {batch}:", "", anatomy(profile, batch), "", f"The host-build gap by cause, batch {batch}: "
                      "the final draft's builders against the FLASH_ATTN draft's, role by role:", "",
                      gap_table(profile, batch), ""]
    if S.Section.BENCH_KERNELS in summary.entries:
        kernels = latest_kernels(summary)
        parts += ["## Kernels", "", kernel_pivot_table(kernel_pivot(kernels)), "", "All kernels, 32/8 heads:", "",
                  kernel_summary(kernels), ""]
        if any(r.get("what") for r in kernels["rows"]):
            parts += ["### One draft step's metadata build, on the host", "", build_summary(kernels), ""]
    return "\n".join(parts).rstrip() + "\n"


def blocks() -> dict[str, str]:
    return {"step-table": step_table(), "results-verdict": verdict(), "notebook-list": notebook_list()}


def pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- {re.escape(name)} -->\n)(.*?)(\n<!-- /{re.escape(name)} -->)", re.S)


def update_readme(path: Path = README) -> list[str]:
    """Rewrite the generated blocks; a README without one of them is refused (and left as it was)."""
    from dflash_fi.errors import BadInput

    text, generated = path.read_text(), blocks()
    missing = [name for name in generated if not pattern(name).search(text)]
    if missing:
        raise BadInput(f"{path.name} has no <!-- {missing[0]} --> ... <!-- /{missing[0]} --> block: put one back where "
                       "the generated text belongs, then run `dflash-fi report --update-readme` again")
    for name, body in generated.items():
        text = pattern(name).sub(lambda m: m.group(1) + body + m.group(3), text)
    path.write_text(text)
    return list(generated)


def write_results_page(path: Path = RESULTS) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(results_page())
    return path
