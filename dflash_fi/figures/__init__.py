"""The tutorial's pictures, drawn from data the rest of the package produces or the committed records hold.

    style.py       the shared look: colours, one distinct line style per series, legends kept off the data
    attention.py   the block masks (notebook 00), vLLM's selector for the draft (01)
    path.py        a draft layer's path (selector, build(), plan(), run(), kernel) and where steps' hunks land (01, 06)
    listings.py    code and diffs as coloured monospace HTML with a text fallback
    engine_calls.py  engines as a reader starts them: the call they share, and a table of what each changes
    acceptance.py  acceptance per draft position (02, 03), tau per run (04)
    benchmarks.py  kernel times, kernels over fa2 (05), the final kernel against vLLM's FlashAttention, FlashInfer against FLASH_ATTN drafts
                   in pairs of rounds, a decoding step's time (07, README); the SVGs of docs/figures/
    today.py       notebook 10's tables: step 4 against vLLM 0.24.0, the lesson's places in three releases, the steps
                   against upstream
    rendered.py    how many browser screens a notebook's nbconvert HTML takes (`python -m dflash_fi.figures.rendered`)

Each picture function returns a matplotlib Figure; notebooks show it inline, `dflash-fi figures` writes the
benchmark ones and the draft layer's path as SVG under docs/figures/. listings.py returns HTML and text.

May import: dflash_fi.reference, dflash_fi.bench, dflash_fi.evidence, dflash_fi.engine, dflash_fi.vocabulary,
dflash_fi.lab.
"""

from dflash_fi.figures.acceptance import acceptance_by_position, tau_by_step
from dflash_fi.figures.attention import block_masks, selector_grid
from dflash_fi.figures.benchmarks import (FIGURES_DIR, draft_step_time, e2e_pairs, kernel_against_flash_attn, kernel_times,
                                          kernels_over_fa2, write_benchmark_figures)
from dflash_fi.figures.path import draft_layer_path

MAY_IMPORT = ("dflash_fi.reference", "dflash_fi.bench", "dflash_fi.evidence", "dflash_fi.engine", "dflash_fi.vocabulary",
              "dflash_fi.lab")

__all__ = ["FIGURES_DIR", "acceptance_by_position", "block_masks", "draft_layer_path", "draft_step_time", "e2e_pairs",
           "kernel_against_flash_attn", "kernel_times", "selector_grid", "tau_by_step", "write_benchmark_figures"]
