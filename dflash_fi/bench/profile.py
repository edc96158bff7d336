"""`dflash-fi profile`: where the attention metadata builds of a decoding step spend host time, step by step.

Engines with vLLM's CUDA graphs on the embedded pair, the FLASH_ATTN draft and the FlashInfer draft at steps 6 to
the final one, at batch 1 and batch 32 (held-out prompts decoded together), each build under cProfile
(DFLASH_FI_PROFILE_BUILDS): per builder, its builds and the functions that took the most of its own time, with file
and line. The profiler slows what it watches: read where the time goes, not how much (the engine benchmark times).
The engines share the GPU, as correctness runs do.
"""

from __future__ import annotations

from dflash_fi.engine.identity import RunId
from dflash_fi.engine.instruments import PROFILE_BUILDS_ENV
from dflash_fi.engine.spec import RunSpec

BATCHES = (1, 32)
NEW_TOKENS = 256
FIRST_STEP = 6  # the first step that keeps the engine's full graphs


def profile_runs() -> list[RunId]:
    from dflash_fi.steps import STEPS

    return [RunId(draft_backend="FLASH_ATTN", cuda_graphs=True),
            *(RunId(step=s, cuda_graphs=True) for s in STEPS if s >= FIRST_STEP)]


def profile_plan() -> list[RunSpec]:
    return [RunSpec(run=run, num_prompts=batch, max_new_tokens=NEW_TOKENS) for batch in BATCHES
            for run in profile_runs()]


def run_profiles(print_fn=print) -> dict:
    from dflash_fi.engine.pool import run_engines, share_gpus
    from dflash_fi.engine.runner import EngineProcess
    from dflash_fi.stack import require_gpu, run_context

    gpu = require_gpu("dflash-fi profile")
    specs, slots = share_gpus(profile_plan())

    def profiled(spec, command, gpu):
        return EngineProcess(spec, command, gpu, env={PROFILE_BUILDS_ENV: "1"}).finish()

    records = run_engines(specs, slots, "dflash-fi profile", print_fn=print_fn, run_one=profiled)
    engines = []
    for record in records:
        data = record.to_json()
        for generate in data["generates"].values():
            generate["tokens"] = []
        engines.append(data)
    return {"schema": 2, "gpu": gpu.name, "compute_capability": gpu.sm, "method": __doc__.strip(),
            "engines": engines, **run_context()}
