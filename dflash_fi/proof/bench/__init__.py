"""The benchmarks: what the draft's attention costs, kernel by kernel and engine by engine.

    kernels.py  `dflash-fi bench kernels`: non-causal paged attention at DFlash shapes, every kernel
    kernel_calls.py  the kernels it times, by name (a registry that refuses a name it lacks), and their inputs
    builds.py   its host-time rows: one draft step's metadata build, step 7's, the final step's and FLASH_ATTN's
    timing.py   GPU time with FlashInfer's own helpers (cold L2), host time by the clock, the GPU idle or busy
    e2e.py      `dflash-fi bench e2e`: whole engines with CUDA graphs, taking turns in rounds
    draft_cost.py  the draft's own cost per decoding step inside the engines (GPU attention, host builds), paired
                with its A/A pair, and its kernel against the kernel benchmark; rtx4090.py  the RTX 4090 path's gain
    routes.py   which kernel a draft's builds made         draft_report.py  their tables
    record.py   the commands' sections of the summary
    stats.py    paired rounds, 95% intervals, targets met, missed or unresolved (`Outcome`)
    turns.py    the engine rounds, in pairs, and the targets          results.py  the kernel results files
    profile.py  `dflash-fi profile`: where the metadata builds spend host time

Each writes, with --record, its section of the evidence summary (`dflash_fi.records.summary`) that
docs/RESULTS.md, the notebooks and `dflash_fi.figures` read. Timings live in these files only: no test times anything.

May import: dflash_fi.proof.engine, dflash_fi.reference, dflash_fi.steps, dflash_fi.models, dflash_fi.lab (the real
builders, for builds.py), dflash_fi.logs, dflash_fi.stack, dflash_fi.vocabulary, dflash_fi.errors,
dflash_fi.records (the evidence summary, which they write), dflash_fi.freshness (what a section ran).
"""

MAY_IMPORT = ("dflash_fi.proof.engine", "dflash_fi.reference", "dflash_fi.steps", "dflash_fi.models", "dflash_fi.lab",
              "dflash_fi.logs", "dflash_fi.stack", "dflash_fi.vocabulary", "dflash_fi.errors",
              "dflash_fi.records", "dflash_fi.freshness")
