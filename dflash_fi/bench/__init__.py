"""The benchmarks: what the draft's attention costs, kernel by kernel and engine by engine.

    kernels.py  `dflash-fi bench kernels`: non-causal paged attention at DFlash shapes, every kernel
    builds.py   its host-time rows: one draft step's metadata build, step 7's, the final step's and FLASH_ATTN's
    timing.py   GPU time with FlashInfer's own helpers (cold L2), host time by the clock, the GPU idle or busy
    e2e.py      `dflash-fi bench e2e`: whole engines with CUDA graphs, taking turns in rounds
    stats.py    paired rounds, 95% intervals, targets met, missed or unresolved
    turns.py    the engine rounds, in pairs, and the targets          results.py  the kernel results files
    profile.py  `dflash-fi profile`: where the metadata builds spend host time

Each writes, with --record, its section of the evidence summary (`dflash_fi.summary`) that
docs/RESULTS.md, the notebooks and `dflash_fi.figures` read. Timings live in these files only: no test times anything.

May import: dflash_fi.engine, dflash_fi.reference, dflash_fi.steps, dflash_fi.models, dflash_fi.lab (the real
builders, for builds.py), dflash_fi.logs, dflash_fi.stack, dflash_fi.vocabulary, dflash_fi.errors,
dflash_fi.summary (the evidence summary, which they write).
"""

MAY_IMPORT = ("dflash_fi.engine", "dflash_fi.reference", "dflash_fi.steps", "dflash_fi.models", "dflash_fi.lab",
              "dflash_fi.logs", "dflash_fi.stack", "dflash_fi.vocabulary", "dflash_fi.errors", "dflash_fi.summary")
