"""The engine runner: one vLLM engine per process, and the record of what it did.

    identity.py  RunId: what a run is, as data (labels are rendered from it)
    spec.py      RunSpec: a RunId and the engine parameters, checked before any process starts
    records.py   EngineRecord and its parts: what an engine recorded, as types
    runner.py    starts the child, collects its record (versions, GPU, commit, log file)
    child.py     the process that runs vLLM: backends selected, CUDA-graph mode, tokens, tau, timings
    pool.py      many engines, as many at once as there is room    server.py  engines taking turns, in rounds

May import: dflash_fi.models, dflash_fi.steps, dflash_fi.plugin, dflash_fi.reference (the tokenizer),
dflash_fi.logs, dflash_fi.stack, dflash_fi.vocabulary, dflash_fi.errors.
"""

MAY_IMPORT = ("dflash_fi.models", "dflash_fi.steps", "dflash_fi.plugin", "dflash_fi.reference", "dflash_fi.logs",
              "dflash_fi.stack", "dflash_fi.vocabulary", "dflash_fi.errors")
