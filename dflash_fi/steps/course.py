"""Which steps each notebook is about: `pytest -m stepN` runs these notebooks too, a notebook's evidence is stale
when one of them changes, and the first notebook of a step shows its hunks."""

# 05 drives step 4 beside vLLM 0.24.0; 08 measures what the final steps cost against the FLASH_ATTN draft.
STEPS_OF_NOTEBOOK = {"00_dflash_and_the_problem": (0,), "01_choosing_a_backend": (0, 1), "02_causal_metadata": (2,),
                     "03_noncausal_wrapper": (3,), "04_trtllm_gating": (4,), "05_vllm_today": (4,),
                     "06_upstream_next": (5, 6), "07_draft_build": (7, 8, 9), "08_what_it_costs": (8, 9)}
NOTEBOOK_OF_STEP = {step: next(nb for nb, steps in STEPS_OF_NOTEBOOK.items() if step in steps)
                    for step in sorted({s for steps in STEPS_OF_NOTEBOOK.values() for s in steps})}
