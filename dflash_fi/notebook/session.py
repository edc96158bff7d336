"""A notebook's session: its first cell (`setup`), its evidence line, and its engines, which run live only on a
GPU (`dflash_fi.proof.evidence.live`, imported then and only then). Without a GPU, the evidence is the committed
summary's, as the records package reads it. Nothing here runs at import."""

from __future__ import annotations

from dataclasses import dataclass, field

from dflash_fi.notebook.cells import check, show, skip, wrapped_lines
from dflash_fi.notebook.steps import STEPS_OF_NOTEBOOK

LIVE_PROMPTS, LIVE_NEW_TOKENS = 16, 96  # live runs, smaller than the walkthrough's: engine start-up dominates


@dataclass
class Session:
    name: str
    gpu: object = None  # dflash_fi.stack.Gpu (.name, .sm, .capability), None without one
    live: dict = field(default_factory=dict)  # RunId -> EngineRecord, from this notebook's own GPU runs
    live_reference: dict | None = None
    _pending: dict = field(default_factory=dict, repr=False)  # runs -> Future of (records, reference)

    @property
    def on_gpu(self) -> bool:
        return self.gpu is not None

    def gpu_cell(self) -> bool:
        """True on a GPU; elsewhere says that the cell's GPU part is skipped (JupyterLab's Run All goes on)."""
        if not self.on_gpu:
            print("no CUDA GPU here: this cell's GPU part is skipped")
        return self.on_gpu

    def start_live(self, runs: list) -> None:
        """Start the engines of the walkthrough's `runs` now, in the background (`run_live` collects them); nothing
        without a GPU."""
        if self.on_gpu and tuple(runs) not in self._pending:
            from dflash_fi.proof.evidence.live import start

            self._pending[tuple(runs)] = start(self.name, runs)

    def run_live(self, runs: list) -> dict | None:
        """The walkthrough's `runs`, run here, small, once finished, one line each (its outcome, and whether that is
        the expected one); None (and a note) without a GPU."""
        if not self.on_gpu:
            print("no CUDA GPU here: nothing run live; the checks below are the evidence summary's")
            return None
        from dflash_fi.proof.evidence.live import collect

        self.start_live(runs)
        records, self.live_reference = collect(self._pending.pop(tuple(runs)), runs)
        self.live.update(records)
        return records

    def _is_live(self, runs) -> bool:
        return bool(self.live) and all(run in self.live for run in runs)

    def evidence(self, runs: list) -> tuple[dict, dict, str]:
        """(records by run, reference, where they came from): this notebook's live runs, or the evidence summary's
        walkthrough."""
        import dflash_fi.records.summary as S

        if self._is_live(runs):
            return ({run: self.live[run] for run in runs}, self.live_reference,
                    f"live, in this notebook, on {self.gpu.name} ({LIVE_PROMPTS} prompts x {LIVE_NEW_TOKENS} tokens)")
        walkthrough = S.read().walkthrough()
        return ({run: walkthrough.records[run] for run in runs if run in walkthrough.records}, walkthrough.reference,
                f"the evidence summary's walkthrough, not run here: {S.describe(walkthrough.provenance)}")

    def check(self, records: dict, reference: dict) -> list:
        """The walkthrough's checks of these records (by RunId): judged now on live records, or as the evidence pass
        judged them; one line each."""
        import dflash_fi.records.summary as S

        walkthrough = S.read().walkthrough()
        if self._is_live(records):
            from dflash_fi.proof.evidence.live import judge

            found = judge(records, reference, walkthrough.margin)
        else:
            found = [c for c in walkthrough.checks if set(c.id.runs) <= set(records)]
        for c in found:
            print(c.line())
        return found

    def check_walkthrough(self, runs: list) -> list:
        """`check` on `runs`' evidence, wrapped; then whether all passed, and which runs were not recorded yet."""
        records, reference, _ = self.evidence(runs)
        with wrapped_lines():
            ran = self.check(records, reference)
        if absent := [run for run in runs if run not in records]:
            skip(f"the checks that need {len(absent)} more of these engines", "not recorded yet (a GPU runs them live)")
        check(f"these {len(ran)} walkthrough checks pass", bool(ran) and all(c.passed for c in ran),
              "live" if self.live else "as the evidence pass judged them")
        return ran


def evidence_line(name: str, reads: tuple = ()) -> str:
    """Which evidence pass this notebook's committed outputs come from, and whether what it ran (its steps, the plugin,
    the loader, the versions, its own source) and the sections it reads (`reads`: records.summary.Section) are
    the code here; when not, which inputs changed."""
    import dflash_fi.records.summary as S
    from dflash_fi.errors import NoRecord
    from dflash_fi.freshness import stale, stale_notebook

    try:
        summary = S.read()
    except NoRecord:
        return "evidence: no GPU evidence pass committed yet (cells that read it say so)"
    made = next(summary.entries[k] for k in (S.Section.NOTEBOOKS, S.Section.WALKTHROUGH, *summary.entries)
                if k in summary.entries).provenance
    ran = summary.notebooks().get(name) if S.Section.NOTEBOOKS in summary.entries else None
    found = [stale_notebook(summary, name, STEPS_OF_NOTEBOOK.get(name, ()))] if ran else []
    found += stale(summary, tuple(reads))

    def why(s) -> str:
        return f"{s.notebook or s.section.key} " + (f"ran other {', '.join(s.changed)}" if s.recorded else
                                                    "recorded no inputs (a pass before they were hashed)")

    notes = ([] if ran else [f"it did not run {name}"]) + [why(s) for s in found if s]
    return (f"evidence: the pass at commit {(made.commit or '?')[:10]} on {made.gpu}; "
            + ("NOT the code here: " + "; ".join(notes) if notes else "what it ran is the code here"))


def setup(name: str, live: list | None = None, reads: tuple | None = None) -> Session:
    """The first cell: vLLM's log lines to a file, what this notebook runs on, and its evidence line (judging this
    notebook and the summary's sections it `reads`: records.summary.Section, by default the walkthrough's when it has
    `live` runs); on a GPU, the engines of the walkthrough's `live` runs start in the background (the notebook's
    section "On the GPU" shows and collects them)."""
    from dflash_fi.records.summary import Section
    from dflash_fi.logs import quiet_vllm
    from dflash_fi.stack import cuda_gpu, git_commit, stack_report

    quiet_vllm(f"notebook-{name}")
    report, gpu = stack_report(), cuda_gpu()
    print(f"notebook {name}: {'GPU ' + gpu.name + ' (SM ' + gpu.sm + ')' if gpu else 'no CUDA GPU (CPU parts only)'}")
    print(f"vllm {report.vllm}, flashinfer {report.flashinfer}, torch {report.torch}, python {report.python}, "
          f"commit {git_commit()}")
    print("vLLM's own log lines go to a file under artifacts/logs/ (dflash-fi's log directory), not into cells")
    print(evidence_line(name, (Section.WALKTHROUGH,) if reads is None and live else reads or ()))
    session = Session(name=name, gpu=gpu)
    if live:
        session.start_live(live)
        print(f"{len(live)} engines for the section 'On the GPU' " + (
            "started in the background: starting one takes most of a minute" if gpu else
            "not started: no GPU here, that section uses the evidence summary"))
    return session


def show_engine_calls(runs: list) -> None:
    """Engines as a reader would start them, one script each: the `LLM(...)` call they share, once, then a table of
    what each changes. `runs`: RunSpecs, or the walkthrough's RunIds (run at the live cells' size)."""
    from IPython.display import display

    from dflash_fi.proof.evidence.live import engine_calls

    listing, table = engine_calls(runs)
    display(listing)
    show(table)
