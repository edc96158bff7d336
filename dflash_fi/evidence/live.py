"""A notebook's engines, run live on the GPU, and its evidence: the live runs, or the committed evidence summary.

A notebook's live cells run small engines on the GPU (several at once where the GPU has room) and check
them with the walkthrough's own check functions and tolerances, against a reference-decoder run on the
same prompts. The engines start in the background in the first cell (`setup(name, live=runs)`), while the
notebook's CPU cells run, and the live cell collects them. On a machine without a GPU the check cells show the
checks of the evidence summary's walkthrough, as that pass judged them, and say so. A live cell prints only what
every GPU prints alike (outcomes, in the notebook's order); numbers that move from engine to engine go to cells
tagged `nbval-ignore-output`. Nothing here runs at import.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from dflash_fi.notebook import check, show, skip, wrapped_lines

# Live runs are smaller than the walkthrough's: engine start-up dominates either way.
LIVE_PROMPTS, LIVE_NEW_TOKENS = 16, 96


@dataclass
class Session:
    name: str
    gpu: object = None
    log_file: object = None
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
        """Start the engines of the walkthrough's `runs` (RunIds), and the reference decoder on their prompts, now and
        in the background: an engine takes most of a minute to start, which the notebook's CPU cells can use.
        `run_live(runs)` collects them. Nothing without a GPU."""
        if self.on_gpu and tuple(runs) not in self._pending:
            pool = ThreadPoolExecutor(1, thread_name_prefix=f"dflash-fi-{self.name}")
            self._pending[tuple(runs)] = pool.submit(self._run_engines, list(runs))
            pool.shutdown(wait=False)  # the run goes on; the future holds its result

    def _run_engines(self, runs: list) -> tuple[dict, dict]:
        from dflash_fi.engine.pool import run_engines, share_gpus
        from dflash_fi.evidence.plan import expected_to_fail, live_spec
        from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_TARGET, load_prompts
        from dflash_fi.reference.evaluate import evaluate_pair

        specs, slots = share_gpus([live_spec(run, LIVE_PROMPTS, LIVE_NEW_TOKENS) for run in runs])
        with ThreadPoolExecutor(1) as pool:  # the reference decodes on this GPU while the engines start
            reference = pool.submit(evaluate_pair, DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=LIVE_PROMPTS),
                                    LIVE_NEW_TOKENS, device="cuda")
            records = {r.run: r for r in run_engines(  # completion order and times differ from run to run: not printed
                specs, slots, f"notebook {self.name}", expected_to_fail=expected_to_fail, print_fn=lambda line: None)}
            return records, reference.result()

    def run_live(self, runs: list) -> dict | None:
        """The walkthrough's `runs`, run here, on this GPU, small (started by `start_live` or now), once they have
        finished; None (and a note) without a GPU. Prints one line per run, in the order given: its outcome, and
        whether that is the expected one."""
        from dflash_fi.engine.identity import label
        from dflash_fi.evidence.plan import expected_to_fail

        if not self.on_gpu:
            print("no CUDA GPU here: nothing run live; the checks below are the evidence summary's")
            return None
        self.start_live(runs)
        records, self.live_reference = self._pending.pop(tuple(runs)).result()
        self.live.update(records)
        for run in runs:
            expected, record = not expected_to_fail(run), records[run]
            seen = live_outcome(record)
            verdict = "as expected" if record.ok == expected else f"UNEXPECTED (expected: {'runs' if expected else 'fails'})"
            print(f"{label(run)}: {seen}, {verdict}")
        return records

    def evidence(self, runs: list) -> tuple[dict, dict, str]:
        """(records by run, reference, where they came from): this notebook's live runs, or the evidence summary's
        walkthrough."""
        import dflash_fi.summary as S

        if self.live and all(run in self.live for run in runs):
            return ({run: self.live[run] for run in runs}, self.live_reference,
                    f"live, in this notebook, on {self.gpu.name} ({LIVE_PROMPTS} prompts x {LIVE_NEW_TOKENS} tokens)")
        records, reference, _, _, made = S.read().walkthrough()
        return ({run: records[run] for run in runs if run in records}, reference,
                f"the evidence summary's walkthrough, not run here: {S.describe(made)}")

    def check(self, records: dict, reference: dict) -> list:
        """The walkthrough's checks that `records` (by RunId) can answer: judged now on live records, or as the
        evidence pass judged them; one line each."""
        import dflash_fi.summary as S
        from dflash_fi.evidence.checks import check_records, checks

        wanted = {c.id for c in checks() if c.missing(records) is None}
        if self.live and all(run in self.live for run in records):
            _, _, margin, _, _ = S.read().walkthrough()  # the pass's margin: live engines hold no calibration pairs
            margin = margin if margin and margin.get("margin") is not None else None  # as the walkthrough judges
            found = [c for c in check_records(records, reference, margin) if c.id in wanted]
        else:
            found = [c for c in S.read().walkthrough()[3] if c.id in wanted]
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


def live_outcome(record) -> str:
    """'runs' or 'fails: ValueError at selection': the part of an outcome every GPU shows alike."""
    from dflash_fi.engine.records import outcome

    return "runs" if record.ok else f"fails: {outcome(record)}"


def evidence_line() -> str:
    """Which evidence pass the committed results come from, and whether its step modules are the ones here."""
    import dflash_fi.summary as S
    from dflash_fi.errors import NoRecord

    try:
        summary = S.read()
    except NoRecord:
        return "evidence: no GPU evidence pass committed yet (cells that read it say so)"
    made = summary.entry(S.Section.WALKTHROUGH).provenance if S.Section.WALKTHROUGH in summary.entries else \
        next(iter(summary.entries.values())).provenance
    same = not summary.stale()
    return (f"evidence: the pass at commit {(made.commit or '?')[:10]} on {made.gpu}; its step modules are "
            + ("the ones here" if same else "NOT the ones here (the steps changed since: its numbers are stale)"))


def setup(name: str, live: list | None = None) -> Session:
    """The first cell: vLLM's log lines to a file, and what this notebook runs on; on a GPU, the engines of the
    walkthrough's `live` runs start in the background (the notebook's section "On the GPU" shows and collects them)."""
    from dflash_fi.logs import quiet_vllm
    from dflash_fi.stack import cuda_gpu, git_commit, stack_report

    quiet_vllm(f"notebook-{name}")
    report = stack_report()
    gpu = cuda_gpu()
    print(f"notebook {name}: {'GPU ' + gpu.name + ' (SM ' + gpu.sm + ')' if gpu else 'no CUDA GPU (CPU parts only)'}")
    print(f"vllm {report.vllm}, flashinfer {report.flashinfer}, torch {report.torch}, python {report.python}, "
          f"commit {git_commit()}")
    print("vLLM's own log lines go to a file under artifacts/logs/ (dflash-fi's log directory), not into cells")
    print(evidence_line())
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

    from dflash_fi.engine.identity import label
    from dflash_fi.engine.spec import SHOWN_ARGUMENTS, RunSpec, engine_arguments
    from dflash_fi.evidence.plan import live_spec
    from dflash_fi.figures.engine_calls import engine_calls
    from dflash_fi.plugin import STEP_ENV
    from dflash_fi.stack import REPO_ROOT

    specs = [r if isinstance(r, RunSpec) else live_spec(r, LIVE_PROMPTS, LIVE_NEW_TOKENS) for r in runs]
    calls = {label(s.run): {k: v for k, v in engine_arguments(s).items() if k in SHOWN_ARGUMENTS} for s in specs}
    listing, table = engine_calls(calls, {label(s.run): s.run.step for s in specs}, STEP_ENV, SHOWN_ARGUMENTS,
                                  REPO_ROOT)
    display(listing)
    show(table)
