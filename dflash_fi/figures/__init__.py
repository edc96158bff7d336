"""The tutorial's pictures, drawn from data the rest of the package produces or the committed records hold.

    style.py       the shared look: colours, one distinct line style per series, legends kept off the data
    attention.py   the block masks (notebook 00), vLLM's selector for the draft (01)
    path.py        a draft layer's path (selector, build(), plan(), run(), kernel) and where steps' hunks land (01, 06)
    listings.py    code and diffs as coloured monospace HTML with a text fallback
    engine_calls.py  engines as a reader starts them: the call they share, and a table of what each changes
    acceptance.py  acceptance per draft position (02, 03), tau per run (04)
    benchmarks.py  every kernel's time per call, kernels over fa2 (06), the draft's cost end to end (08); the SVGs of
                   docs/figures/
    draft_build.py what a draft's metadata build costs the host, steps 7-9, and the route by shape (07)
    costs.py       the draft's cost end to end as data: read, and its table (08)
    cost_verdicts.py  what 08's figure and tables say: one noise rule, the targets, the bottom line
    cost_engines.py  the engine benchmark's engines, planned and as vLLM resolved them; the route checked (08)
    gains.py       the RTX 4090 path's gain over no speculation: its table and verdict (08)
    today.py       notebook 05's tables: step 4 against vLLM 0.24.0, the lesson's places in three releases, the claims
    upstream_next.py  notebook 06's tables and verdicts: CUDA-graph claims and modes, the draft kernel, the engines
    rendered.py    how many browser screens a notebook's nbconvert HTML takes (`python -m dflash_fi.figures.rendered`)

Each picture function returns a matplotlib Figure; notebooks show it inline, `dflash-fi figures` writes the
benchmark ones and the draft layer's path as SVG under docs/figures/. listings.py returns HTML and text.

May import: dflash_fi.records, dflash_fi.freshness, dflash_fi.errors, dflash_fi.reference, dflash_fi.vocabulary,
dflash_fi.lab, dflash_fi.upstream, dflash_fi.steps, dflash_fi.stack; never dflash_fi.proof: what a figure needs from a benchmark is data in the evidence summary.
"""

from dflash_fi.figures.acceptance import acceptance_by_position, tau_by_step
from dflash_fi.figures.attention import block_masks, selector_grid
from dflash_fi.figures.benchmarks import FIGURES_DIR, cost_figure, kernel_times, kernels_over_fa2, write_benchmark_figures
from dflash_fi.figures.path import draft_layer_path

MAY_IMPORT = ("dflash_fi.records", "dflash_fi.freshness", "dflash_fi.errors", "dflash_fi.reference", "dflash_fi.vocabulary",
              "dflash_fi.lab", "dflash_fi.upstream", "dflash_fi.steps", "dflash_fi.stack")

__all__ = ["FIGURES_DIR", "acceptance_by_position", "block_masks", "cost_figure", "draft_layer_path", "kernel_times",
           "kernels_over_fa2", "selector_grid", "tau_by_step", "write_benchmark_figures"]
