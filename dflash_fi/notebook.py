"""What the notebooks share: the first cell's set-up, live GPU runs, and evidence with its checks.

A notebook's live cells run small engines on the GPU (several at once where the GPU has room) and check
them with the walkthrough's own check functions and tolerances, against a reference-decoder run on the
same prompts. On a machine without a GPU the same check cells run on the last walkthrough committed under
runs/, and say so. Nothing here runs at import.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Live runs are smaller than the walkthrough's: engine start-up dominates either way.
LIVE_PROMPTS, LIVE_NEW_TOKENS = 16, 96


@dataclass
class Session:
    name: str
    gpu: object = None
    log_file: object = None
    live: dict = field(default_factory=dict)  # label -> record, from this notebook's own GPU runs
    live_reference: dict | None = None

    @property
    def on_gpu(self) -> bool:
        return self.gpu is not None

    def gpu_cell(self) -> bool:
        """True on a GPU; elsewhere says that the cell's GPU part is skipped (JupyterLab's Run All goes on)."""
        if not self.on_gpu:
            print("no CUDA GPU here: this cell's GPU part is skipped")
        return self.on_gpu

    def run_live(self, labels: list[str]) -> dict | None:
        """Run the walkthrough's rows `labels` here, on this GPU, small; None (and a note) without a GPU."""
        from dflash_fi.engine.pool import run_engines, share_gpus
        from dflash_fi.evidence.plan import expected_to_fail, walkthrough_plan
        from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_TARGET, load_prompts
        from dflash_fi.reference.evaluate import evaluate_pair

        if not self.on_gpu:
            print("no CUDA GPU here: nothing run live; the checks below use the committed records")
            return None
        if self.live_reference is None:
            self.live_reference = evaluate_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=LIVE_PROMPTS),
                                                LIVE_NEW_TOKENS, device="cuda")
        specs = [s for s in walkthrough_plan(LIVE_PROMPTS, LIVE_NEW_TOKENS) if s.label in labels]
        slots = share_gpus(specs)
        records = run_engines(specs, slots, f"notebook {self.name}", expected_to_fail=expected_to_fail,
                              print_fn=lambda line: print(line.split("  artifacts/")[0]))
        self.live.update(records)
        return records

    def evidence(self, labels: list[str]) -> tuple[dict[str, dict], dict, str]:
        """(records, reference, where they came from): this notebook's live runs, or the committed walkthrough."""
        from dflash_fi.evidence.report import recorded_walkthrough

        if self.live and all(label in self.live for label in labels):
            return ({label: self.live[label] for label in labels}, self.live_reference,
                    f"live, in this notebook, on {self.gpu.name} ({LIVE_PROMPTS} prompts x {LIVE_NEW_TOKENS} tokens)")
        records, provenance = recorded_walkthrough()
        reference = next(iter(records.values()))["spec"]["extra"]["reference"]
        return records, reference, f"committed records, not run here: {provenance}"

    def check(self, records: dict, reference: dict, prefixes: tuple[str, ...]) -> list:
        """The walkthrough's checks whose names start with `prefixes`, on these records; printed."""
        from dflash_fi.evidence.checks import CHECKS, check_records

        names = {c.name for c in CHECKS if c.name.startswith(prefixes)}
        checks = [c for c in check_records(records, reference) if c.name in names]
        for c in checks:
            print(c.line())
        return checks


def setup(name: str) -> Session:
    """The first cell: vLLM's log lines to a file, and what this notebook runs on."""
    from dflash_fi.logs import quiet_vllm, relative
    from dflash_fi.stack import cuda_gpu, git_commit, stack_report

    log = quiet_vllm(f"notebook-{name}")
    report = stack_report()
    gpu = cuda_gpu()
    print(f"notebook {name}: {'GPU ' + gpu.name + ' (SM ' + gpu.sm + ')' if gpu else 'no CUDA GPU (CPU parts only)'}")
    print(f"vllm {report.vllm}, flashinfer {report.flashinfer}, torch {report.torch}, python {report.python}, "
          f"commit {git_commit()}")
    print(f"vLLM's log lines go to {relative(log)}")
    return Session(name=name, gpu=gpu, log_file=log)


def show(markdown: str) -> None:
    """A markdown table rendered in JupyterLab (and as its text everywhere else)."""
    from IPython.display import Markdown, display

    display(Markdown(markdown))


def step_map() -> str:
    """Markdown: each step, what its hunks change, its notebook, and the command that runs its tests."""
    from dflash_fi.evidence.notebooks import NOTEBOOKS_DIR
    from dflash_fi.steps import STEPS, step_module, step_title

    notebooks = {int(p.name[:2]): p.stem for p in NOTEBOOKS_DIR.glob("[0-9][0-9]_*.py")}
    lines = ["| step | what it is | hunks (what each changes) | notebook | tests |", "|---|---|---|---|---|"]
    for step in STEPS:
        previous = step_module(step - 1).HUNKS if step else ()
        hunks = "; ".join(h.why for h in step_module(step).HUNKS[len(previous):]) or "none: vLLM as shipped"
        notebook = notebooks.get(min(step, max(notebooks)))
        lines.append(f"| {step} | {step_title(step).split(' - ', 1)[1].rstrip('.')} | {hunks} | `{notebook}` | "
                     f"`pytest -m step{step}` |")
    return "\n".join(lines)
