"""The records: what the proof writes and the lesson reads, as types. The bottom package: it imports only
`dflash_fi.vocabulary` and `dflash_fi.errors` (tests/test_layout.py holds it).

    runs        RunId (what an engine run is), Workload, Pair, label
    spec        RunSpec (what a run is asked to do), BenchPlan, the embedded pair's defaults
    outputs     GenerateResult and its parts, a benchmark's rounds, build profiles
    engine      EngineRecord (what a run did), Failure, Phase, Backend
    checks      Check (what a walkthrough check said), CheckId, CheckKind, Verdict
    provenance  Provenance (where a record or section came from, and what it ran)
    summary     the evidence summary: Section, read, write, Walkthrough, NotebookRun, stale
    raw         what a pass keeps and does not commit

May import: dflash_fi.vocabulary, dflash_fi.errors (nothing else, not even lazily).
"""

MAY_IMPORT = ("dflash_fi.vocabulary", "dflash_fi.errors")
