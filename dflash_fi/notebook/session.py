"""A notebook's session: its first cell (`setup`), its evidence line, and its engines, which run live only on a
GPU (`dflash_fi.proof.evidence.live`, imported then and only then). Without a GPU, the evidence is the committed
summary's, as the records package reads it. Nothing here runs at import."""

from __future__ import annotations

from dataclasses import dataclass, field

from dflash_fi.notebook.cells import check, show, skip, wrapped_lines
from dflash_fi.notebook.steps import STEPS_OF_NOTEBOOK
from dflash_fi.records.spec import LIVE_NEW_TOKENS, LIVE_PROMPTS  # shared with the live engines


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

    def kernel_accuracy(self) -> tuple[list[dict], float, str]:
        """GPU only: FlashInfer's non-causal paged prefill against the reference attention (the GPU tests' check):
        (a row per KV dtype and backend, the error bound, the rows as a table)."""
        from dflash_fi.proof.bench.accuracy import ERROR_BOUND, error_table, kernel_errors

        rows = kernel_errors()
        return rows, ERROR_BOUND, error_table(rows)

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
                f"the evidence summary's walkthrough, not run here: {S.describe(walkthrough.provenance)}"
                + (f"; {older}" if (older := _walkthrough_older()) else ""))

    def judged(self) -> str:
        """How this notebook's walkthrough checks were judged, for a check's detail: live here, or by the evidence
        pass (on older code, when the walkthrough ran other code than the code here)."""
        if self.live:
            return "judged here, on this notebook's engines"
        return "as the evidence pass judged them" + (", on older code" if _walkthrough_older() else "")

    def check(self, records: dict, reference: dict, quiet: bool = False) -> list:
        """The walkthrough's checks of these records (by RunId): judged now on live records, or as the evidence pass
        judged them; one line each, unless `quiet` (the caller says it in one)."""
        import dflash_fi.records.summary as S

        walkthrough = S.read().walkthrough()
        if self._is_live(records):
            from dflash_fi.proof.evidence.live import judge

            found = judge(records, reference, walkthrough.margin)
        else:
            found = [c for c in walkthrough.checks if set(c.id.runs) <= set(records)]
        for c in () if quiet else found:
            print(c.line())
        return found

    def check_walkthrough(self, runs: list) -> list:
        """`check` on `runs`' evidence, wrapped; then whether all passed, and which runs were not recorded yet."""
        records, reference, _ = self.evidence(runs)
        with wrapped_lines():
            ran = self.check(records, reference)
        if absent := [run for run in runs if run not in records]:
            skip(f"the checks that need {len(absent)} more of these engines", "not recorded yet (a GPU runs them live)")
        check(f"these {len(ran)} walkthrough checks pass", bool(ran) and all(c.passed for c in ran), self.judged())
        return ran


def _changed(found: list) -> str:
    """What differs between the pass and the code here, in a few words."""
    if not all(s.recorded for s in found):
        return "older code (that pass did not record what it ran): its numbers may change"
    names = sorted({name for s in found for name in s.changed})
    return ("older code (changed since: " + ", ".join(names[:5]) + (f" +{len(names) - 5} more" if len(names) > 5
                                                                     else "") + "): its numbers may change")


_SECTION_NAMES = {"walkthrough": "Walkthrough", "bench-kernels": "Kernel benchmark", "bench-e2e": "Engine benchmark"}


def section_note(section, summary=None) -> str:
    """One line under what a notebook draws from a summary section (records.summary.Section): the GPU pass it comes
    from, and whether that ran the code here."""
    import dflash_fi.records.summary as S
    from dflash_fi.freshness import stale

    summary = summary or S.read()
    made, found = summary.entry(section).provenance, stale(summary, (section,))
    return (f"{_SECTION_NAMES.get(section.key, section.key)}: {made.gpu or 'GPU'} pass of {made.finished_at[:10]} "
            f"(commit {(made.commit or '?')[:10]}), {_changed(found) if found else 'this code'}.")


def _walkthrough_older() -> str:
    """'' when the summary's walkthrough ran the code here, else what `_changed` says of it."""
    import dflash_fi.records.summary as S
    from dflash_fi.freshness import stale

    found = stale(S.read(), (S.Section.WALKTHROUGH,))
    return _changed(found) if found else ""


def evidence_line(name: str, reads: tuple = (), running_on: str | None = None) -> str:
    """One short line: where this notebook's evidence comes from and whether it is the code here. Without a GPU: the
    GPU pass that last ran this notebook (its steps, the plugin, the loader, the versions, its own source) and the
    summary's sections it `reads` (records.summary.Section); when they ran other code, which inputs changed.
    `running_on` (a GPU's name): this execution is the notebook's run, so only the sections it reads are judged."""
    import dflash_fi.records.summary as S
    from dflash_fi.errors import NoRecord
    from dflash_fi.freshness import stale, stale_notebook

    try:
        summary = S.read()
    except NoRecord:
        return "evidence: no GPU pass recorded yet (cells that read it say so)"
    reads = tuple(k for k in reads if k in summary.entries)
    if running_on:
        older = [s for s in stale(summary, reads) if s]
        sections = ", ".join(k.key for k in reads)
        return (f"evidence: this run, on the {running_on}" + (f"; {sections} of the GPU pass of "
                f"{summary.entries[reads[0]].provenance.finished_at[:10]}, " + (_changed(older) if older else "current")
                if reads else ""))
    made = next(summary.entries[k] for k in (*reads, S.Section.NOTEBOOKS, *summary.entries)
                if k in summary.entries).provenance
    ran = summary.notebooks().get(name) if S.Section.NOTEBOOKS in summary.entries else None
    found = [stale_notebook(summary, name, STEPS_OF_NOTEBOOK.get(name, ()))] if ran else []
    found = [s for s in found + stale(summary, reads) if s]
    verdict = _changed(found) if found else "current" if ran or reads else "this notebook not run on it"
    return f"evidence: {made.gpu or 'GPU'} pass of {made.finished_at[:10]}, {verdict}"


def setup(name: str, live: list | None = None, reads: tuple | None = None) -> Session:
    """The first cell: vLLM's log lines to a file, and one line saying what this notebook runs on and its evidence
    (judging this notebook and the summary's sections it `reads`: records.summary.Section, by default the
    walkthrough's when it has `live` runs); on a GPU, the engines of the walkthrough's `live` runs start in the
    background (the notebook's section "On the GPU" shows and collects them)."""
    from dflash_fi.records.summary import Section
    from dflash_fi.logs import quiet_vllm
    from dflash_fi.stack import cuda_gpu

    quiet_vllm(f"notebook-{name}")
    gpu = cuda_gpu()
    here = f"GPU {gpu.name} (SM {gpu.sm})" if gpu else "no GPU here (its GPU cells skip)"
    reads = (Section.WALKTHROUGH,) if reads is None and live else reads or ()
    print(f"{here} · {evidence_line(name, reads, gpu.name if gpu else None)}")
    session = Session(name=name, gpu=gpu)
    if live and gpu:
        session.start_live(live)
        print(f"{len(live)} engines for the section 'On the GPU' started in the background (most of a minute each)")
    return session


def show_engine_calls(runs: list, resolved: dict | None = None) -> None:
    """Engines as a reader would start them, one script each: the `LLM(...)` call they share, once, then a table of
    what each changes, with `resolved`'s columns (engine label -> column -> text: what vLLM made of it). `runs`:
    RunSpecs, or the walkthrough's RunIds (run at the live cells' size)."""
    from IPython.display import display

    from dflash_fi.proof.evidence.plan import engine_calls  # no live engine: the calls only

    listing, table = engine_calls(runs, resolved)
    display(listing)
    show(table)
