"""What README.md and docs/RESULTS.md say that is generated: never typed in, never read back.

README.md holds generated blocks, each between `<!-- NAME -->` and `<!-- /NAME -->`: the step table (from the step
modules), a short verdict of the results and the list of notebooks. docs/RESULTS.md is generated whole: every evidence table, from
the files committed under runs/. `dflash-fi report --update-readme` rewrites both; tests/test_readme.py checks that
they hold exactly what they render to now.
"""

from __future__ import annotations

import re
from pathlib import Path

from dflash_fi.stack import REPO_ROOT

README = REPO_ROOT / "README.md"
RESULTS = REPO_ROOT / "docs" / "RESULTS.md"


def step_table() -> str:
    """Markdown: each step, what it changes (its module's title), its hunks, module, notebook and tests."""
    from dflash_fi.evidence.notebooks import NOTEBOOK_OF_STEP
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
    """Markdown: each notebook and its title (its first heading), in reading order; one whose cells changed after its
    recorded execution says so, with the commit its outputs come from."""
    import nbformat

    from dflash_fi.errors import BadInput
    from dflash_fi.evidence.notebooks import METADATA_KEY, NOTEBOOKS_DIR, source_sha256

    lines = []
    for path in sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.py")):
        title = next((line[4:].strip() for line in path.read_text().splitlines() if line.startswith("# # ")), "")
        again = f"`dflash-fi notebooks --only {path.stem[:2]}` on a GPU"
        if not path.with_suffix(".ipynb").is_file():
            raise BadInput(f"{path.stem}.ipynb is missing beside {path.name}: run `.venv/bin/jupytext --sync "
                           f"notebooks/{path.name}`, then {again}")
        nb = nbformat.read(path.with_suffix(".ipynb"), as_version=4)
        executed = nb.metadata.get(METADATA_KEY) or {}
        stale = "" if executed.get("source_sha256") == source_sha256(nb) else (
            f" (**not re-executed**: its outputs come from the run on the {executed.get('executed_on')} at "
            f"{executed.get('commit', '')[:7]}, and its cells changed since: {again})" if executed
            else f" (**not executed**: {again})")
        lines.append(f"- [`{path.stem}`](notebooks/{path.stem}.ipynb): {title}{stale}")
    return "\n".join(lines)


def _walkthrough() -> tuple | None:
    from dflash_fi.errors import NoRecord
    from dflash_fi.evidence.checks import check_records
    from dflash_fi.evidence.report import recorded_walkthrough

    try:
        manifest, records, source = recorded_walkthrough()
    except NoRecord:
        return None
    margin = manifest.margin
    if margin is None:  # recorded before manifests named their margin
        from dflash_fi.evidence.near_ties import committed_margin

        margin = committed_margin()
    return manifest, records, source, check_records(records, manifest.reference, margin), margin


def _turns():
    from dflash_fi.bench.turns import latest_turns
    from dflash_fi.errors import NoRecord

    try:
        return latest_turns()
    except NoRecord:
        return None


def verdict() -> str:
    """At most ten lines: what the committed evidence says, and where the tables are."""
    from dflash_fi.bench.stats import Verdict
    from dflash_fi.bench.turns import targets
    from dflash_fi.evidence.checks import Verdict as CheckVerdict

    lines = []
    walkthrough = _walkthrough()
    if walkthrough:
        manifest, records, source, checks, _ = walkthrough
        counts = {v: sum(c.verdict is v for c in checks) for v in CheckVerdict}
        made = next(iter(records.values())).provenance
        lines.append(f"- The walkthrough: {counts[CheckVerdict.PASS]} of {len(checks)} checks pass on its records, "
                     f"judged by this commit's checks ({counts[CheckVerdict.FAIL]} fail, {counts[CheckVerdict.NOT_RUN]} "
                     f"not run); {len(records)} engines, walkthrough {manifest.id} on {made.gpu}, commit "
                     f"{(made.git_commit or '?')[:10]} (its own verdicts: its transcript under `runs/`).")
    else:
        lines.append("- The walkthrough: no GPU walkthrough is recorded yet.")
    turns = _turns()
    if turns:
        found = targets(turns)
        counts = {v: sum(t.verdict is v for t in found) for v in Verdict}
        lines.append(f"- The performance targets (engines in turns, 95% intervals, `runs/{turns.file}`): "
                     + ", ".join(f"{counts[v]} {v.value}" for v in Verdict if counts[v]) + f" of {len(found)}.")
    else:
        lines.append("- The performance targets: no engine benchmark with intervals is recorded yet.")
    lines.append("- Every table behind these lines: [`docs/RESULTS.md`](docs/RESULTS.md) (generated from `runs/`).")
    return "\n".join(lines)


def results_page() -> str:
    """docs/RESULTS.md, whole."""
    from dflash_fi.bench.results import build_summary, kernel_pivot, kernel_pivot_table, kernel_summary, latest_kernels
    from dflash_fi.bench.turns import build_table, idle_cpu, targets_table, turns_table, vcpu_summary
    from dflash_fi.errors import NoRecord
    from dflash_fi.evidence.report import render_mixed_table, render_table

    parts = ["# Results", "", "Generated by `dflash-fi report --update-readme` from the files committed under `runs/`; "
             "do not edit. What each check and benchmark is: the README and the notebooks.", ""]
    walkthrough = _walkthrough()
    if walkthrough:
        manifest, records, source, checks, margin = walkthrough
        parts += ["## The walkthrough", "", source, "", render_table(records), "",
                  "### Mixed batches (the same engines' second workload)", "", render_mixed_table(records), "",
                  "### Its checks", "", "Judged now, by this commit's check code, on the records as they were written (what "
                  "the run itself judged is in its transcript, `runs/*.walkthrough-<id>.txt`).", "",
                  *(f"- {c.line()}" for c in checks), ""]
        if margin:
            parts += [f"Near-tie margin: {margin['margin']:.3f} nats (`runs/{margin['file']}`).", ""]
    turns = _turns()
    if turns:
        cpu = idle_cpu(turns)
        parts += ["## Engines in turns", "", f"{turns.gpu} (SM {turns.compute_capability}), `runs/{turns.file}` "
                  f"(commit {turns.git_commit[:10]}, {turns.finished_at}); round 1 warms up and is not measured. Idle "
                  f"engines used {cpu['free']:.2f} CPU s (median) during another engine's round while running free "
                  f"(the first round) and {cpu['stopped']:.2f} CPU s while stopped (the later rounds). "
                  f"{vcpu_summary(turns)}", "",
                  "### Targets", "", targets_table(turns), ""]
        for pair in turns.pairs():
            parts += [f"### {pair.value}", "", turns_table(turns, pair), ""]
            for batch in turns.batches(pair):
                parts += [f"Where the host time of a decoding step goes, {pair.value}, batch {batch}:", "",
                          build_table(turns, pair, batch), ""]
    try:
        from dflash_fi.bench.profile import BATCHES, anatomy, latest_profile

        profile = latest_profile()
        parts += ["## Where a draft build's host time goes", "", f"`runs/{profile['file']}` (commit "
                  f"{profile['git_commit'][:10]}): cProfile inside every metadata build, which slows what it watches; "
                  "read where the time goes, not how much.", ""]
        for batch in BATCHES:
            parts += [f"Batch {batch}:", "", anatomy(profile, batch), ""]
    except NoRecord:
        pass
    try:
        kernels = latest_kernels()
    except NoRecord:
        kernels = None
    if kernels:
        parts += ["## Kernels", "", f"{kernels['gpu']} (SM {kernels['compute_capability']}), "
                  f"`runs/{kernels['file']}` (commit {kernels['git_commit'][:10]}).", "",
                  kernel_pivot_table(kernel_pivot(kernels)), "", "All kernels, 32/8 heads:", "", kernel_summary(kernels), ""]
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
