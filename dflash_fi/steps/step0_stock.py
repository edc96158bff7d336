"""Step 0 - stock: vLLM 0.22.1's FlashInfer backend exactly as shipped.

The baseline every later step is compared against. It declares no non-causal support, so vLLM's
selector refuses FlashInfer for the DFlash draft (`use_non_causal=True`) with
"non-causal attention not supported".
"""

from dflash_fi.steps.patching import Hunk

HUNKS: tuple[Hunk, ...] = ()
