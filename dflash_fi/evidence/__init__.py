"""The evidence: what ran on a GPU, what it had to show, and where it is written down.

    ledger.py       the ledger (runs/<gpu>.jsonl) as types: engine records and walkthrough manifests
    plan.py         the walkthrough's engine runs       checks.py   its checks and their tolerances
    report.py       the last recorded walkthrough, its table and provenance
    walkthrough.py  `dflash-fi walkthrough`: the CPU parts, the engine runs on every GPU there is, the checks

May import: dflash_fi.engine, dflash_fi.lab, dflash_fi.reference, dflash_fi.models, dflash_fi.steps,
dflash_fi.logs, dflash_fi.stack, dflash_fi.vocabulary, dflash_fi.errors, dflash_fi.runs.
"""

MAY_IMPORT = ("dflash_fi.engine", "dflash_fi.lab", "dflash_fi.reference", "dflash_fi.models", "dflash_fi.steps",
              "dflash_fi.logs", "dflash_fi.stack", "dflash_fi.vocabulary", "dflash_fi.errors",
              "dflash_fi.runs")
