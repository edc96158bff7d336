"""The notebooks' one door. A notebook imports lesson modules and this package, never `dflash_fi.proof`
(tests/test_layout.py runs each notebook's imports in a fresh interpreter and holds it):

    cells    what a cell shows: check and skip lines, verdicts, tables (`changed_rows`), vLLM's code, the hunks
    session  the first cell (`setup`), the evidence line, the walkthrough's records and checks, live engines on a GPU
    steps    which steps each notebook is about
    runs     the walkthrough's runs by name (dflash_fi.records.runs): runs.FLASH_ATTN, runs.step_run(4), label

Output that moves from machine to machine goes to cells tagged `nbval-ignore-output`. Nothing here runs at import.

May import: dflash_fi.records, dflash_fi.freshness, dflash_fi.figures, dflash_fi.steps, dflash_fi.lab, dflash_fi.logs,
dflash_fi.stack, dflash_fi.errors; and only when called, dflash_fi.proof.evidence: a session's live engines on a GPU
(`live`), and the `LLM(...)` arguments engines are given (`plan`, for `show_engine_calls`: the calls shown are the
calls run).
"""

from dflash_fi.notebook.cells import (changed_rows, check, recorded, show, show_hunks, show_source,  # noqa: F401
                                      show_step_diff, show_test, skip, verdict, wrapped_lines)
from dflash_fi.notebook.session import (LIVE_NEW_TOKENS, LIVE_PROMPTS, Session, evidence_line,  # noqa: F401
                                        section_note, setup, show_engine_calls)
from dflash_fi.notebook.steps import NOTEBOOK_OF_STEP, STEPS_OF_NOTEBOOK  # noqa: F401
from dflash_fi.records import runs  # noqa: F401
from dflash_fi.records.engine import short_backend  # noqa: F401
from dflash_fi.records.runs import label  # noqa: F401

MAY_IMPORT = ("dflash_fi.records", "dflash_fi.freshness", "dflash_fi.figures", "dflash_fi.steps", "dflash_fi.lab",
              "dflash_fi.logs", "dflash_fi.stack", "dflash_fi.errors", "dflash_fi.proof.evidence",
              "dflash_fi.proof.bench")
