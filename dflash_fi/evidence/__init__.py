"""The evidence: what ran on a GPU, what it had to show, and where it is written down.

    plan.py         the walkthrough's engine runs       checks.py   its checks and their tolerances
    check_types.py  a check's id, spec and verdict      report.py   its tables, and its records made compact
    junit.py        a pytest run's JUnit XML as data    live.py     a notebook's engines run live on the GPU
    walkthrough.py  `dflash-fi walkthrough`: the CPU parts, the engine runs on every GPU there is, the checks

May import: dflash_fi.engine, dflash_fi.lab, dflash_fi.reference, dflash_fi.models, dflash_fi.steps,
dflash_fi.logs, dflash_fi.stack, dflash_fi.vocabulary, dflash_fi.errors,
dflash_fi.summary (the evidence summary, which it writes); live.py also the lesson's notebook helpers, the
engine-call picture and the plugin's variable.
"""

MAY_IMPORT = ("dflash_fi.engine", "dflash_fi.lab", "dflash_fi.reference", "dflash_fi.models", "dflash_fi.steps",
              "dflash_fi.logs", "dflash_fi.stack", "dflash_fi.vocabulary", "dflash_fi.errors",
              "dflash_fi.summary", "dflash_fi.notebook", "dflash_fi.figures", "dflash_fi.plugin")
