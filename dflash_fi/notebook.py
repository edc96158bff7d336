"""What the notebooks share: the first cell's set-up, the engine calls they show and run, and the checks.

A notebook's live cells run small engines on the GPU (several at once where the GPU has room) and check
them with the walkthrough's own check functions and tolerances, against a reference-decoder run on the
same prompts. The engines start in the background in the first cell (`setup(name, live=labels)`), while the
notebook's CPU cells run, and the live cell collects them. On a machine without a GPU the same check cells run
on the last walkthrough committed under runs/, and say so. A live cell prints only what every GPU prints alike
(outcomes, in the notebook's order); numbers that move from engine to engine go to cells tagged
`nbval-ignore-output`. Nothing here runs at import.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from dflash_fi.evidence.notebooks import lesson_map  # noqa: F401 (notebook 00 imports it from here)
from dflash_fi.figures.listings import wrapped_lines  # noqa: F401 (the notebooks import it from here)

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
            print("no CUDA GPU here: nothing run live; the checks below use the committed records")
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
        """(records by run, reference, where they came from): this notebook's live runs, or the committed walkthrough."""
        from dflash_fi.evidence.report import recorded_walkthrough

        if self.live and all(run in self.live for run in runs):
            return ({run: self.live[run] for run in runs}, self.live_reference,
                    f"live, in this notebook, on {self.gpu.name} ({LIVE_PROMPTS} prompts x {LIVE_NEW_TOKENS} tokens)")
        manifest, records, provenance = recorded_walkthrough()
        return ({run: records[run] for run in runs if run in records}, manifest.reference,
                f"committed records, not run here: {provenance}")

    def check(self, records: dict, reference: dict) -> list:
        """The walkthrough's checks that `records` (by RunId) can answer, on these records; one line each."""
        from dflash_fi.evidence.checks import check_records, checks
        from dflash_fi.evidence.near_ties import committed_margin

        wanted = {c.name for c in checks() if c.missing(records) is None}
        checks = [c for c in check_records(records, reference, committed_margin()) if c.name in wanted]
        for c in checks:
            print(c.line())
        return checks

    def check_walkthrough(self, runs: list) -> list:
        """`check` on `runs`' evidence, wrapped; then whether all passed, and which runs were not recorded yet."""
        records, reference, _ = self.evidence(runs)
        with wrapped_lines():
            ran = self.check(records, reference)
        if absent := [run for run in runs if run not in records]:
            skip(f"the checks that need {len(absent)} more of these engines", "not recorded yet (a GPU runs them live)")
        check(f"these {len(ran)} walkthrough checks pass", bool(ran) and all(c.passed for c in ran),
              "live" if self.live else "on the committed walkthrough's records")
        return ran


def live_outcome(record) -> str:
    """'runs' or 'fails: ValueError at selection': the part of an outcome every GPU shows alike."""
    from dflash_fi.engine.records import outcome

    return "runs" if record.ok else f"fails: {outcome(record)}"


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
    session = Session(name=name, gpu=gpu)
    if live:
        session.start_live(live)
        print(f"{len(live)} engines for the section 'On the GPU' " + (
            "started in the background: starting one takes most of a minute" if gpu else
            "not started: no GPU here, that section uses the committed records"))
    return session


def check(name: str, passed: bool, detail: str = "") -> None:
    """One line of a check cell: PASS (or an AssertionError) with what was checked."""
    line = f"{'PASS' if passed else 'FAIL'}  {name}" + (f": {detail}" if detail else "")
    print(line)
    assert passed, line


def skip(name: str, why: str) -> None:
    """One line of a check cell for a check that cannot run here (no GPU, a result not recorded yet): it says so."""
    print(f"SKIP  {name}: {why}")


def recorded(read, what: str):
    """`read()`, or None and one line saying that `what` is not recorded yet (`NoRecord`): cells that use it then
    say so instead of failing."""
    from dflash_fi.errors import NoRecord

    try:
        return read()
    except NoRecord as missing:
        print(f"{what}: not recorded yet ({missing})")
        return None


def verdict(text: str, width: int = 110) -> None:
    """The sentence after a table or picture: 'What to see: ...', wrapped to the notebook's width."""
    import textwrap

    print(textwrap.fill(f"What to see: {text}", width, break_long_words=False, break_on_hyphens=False))


def show(markdown: str) -> None:
    """A markdown table rendered in JupyterLab (and as its text everywhere else)."""
    from IPython.display import Markdown, display

    display(Markdown(markdown))


# Code, diffs, engine calls: HTML with inline styles (nbconvert and GitHub keep them) and text/plain for nbval.
def show_hunks(step: int, only: list[int] | None = None, max_lines: int | dict[int, int] = 30, context: int = 3,
               joined: bool = False) -> None:
    """Step `step`'s hunks numbered `only` (1-based, as shown; default all), each under its `why`, with `context`
    unchanged lines around each change; one over `max_lines` lines (or {hunk: lines}) is cut, and says so. `joined`:
    one box for all."""
    from IPython.display import display

    from dflash_fi.figures.listings import hunk_blocks
    from dflash_fi.lab.hunks import step_hunks

    display(hunk_blocks(step, step_hunks(step, context), only, max_lines, joined))


def show_step_diff(step: int) -> None:
    """The whole diff of step `step` against step `step - 1`, folded (an appendix cell)."""
    from IPython.display import display

    from dflash_fi.figures.listings import folded_diff
    from dflash_fi.steps import hunk_diff

    display(folded_diff(f"The whole diff of step {step}", hunk_diff(step)))


def show_source(function, blocks: list[tuple[str, str]], mark: tuple[str, ...] = ()) -> None:
    """vLLM's own source of `function`: its def line, and the lines from each block's first regex to its last
    ('...' between); lines matching a regex of `mark` (default: each block's first) stand out."""
    from IPython.display import display

    from dflash_fi.figures.listings import source_excerpt

    display(source_excerpt(function, blocks, mark))


def show_flashinfer_source(path: str, start: str, blocks: list[tuple[str, str]], mark: tuple[str, ...] = ()) -> None:
    """FlashInfer's C++ source `path` (under its installed include/ directory) from the line matching `start` on: that
    line, and each block's lines, '...' between; lines matching `mark` stand out."""
    from pathlib import Path

    import flashinfer
    from IPython.display import display

    from dflash_fi.figures.listings import file_excerpt

    display(file_excerpt(Path(flashinfer.__file__).parent / "data" / "include" / path, start, blocks, mark, "cpp"))


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
