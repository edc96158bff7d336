"""The walkthrough's engine runs: one RunSpec per row of its table, in the order a reader meets them."""

from __future__ import annotations

from dflash_fi.engine.spec import RunSpec

# Every run gets the same KV cache (32 prompts x (97 + 128 + 16 draft) tokens need 512 blocks of 16) rather
# than one sized from the memory free at start-up: one difference fewer between the engines compared.
# (The engines share GPUs where there is room: dflash_fi.engine.pool.share_gpus.)
WALKTHROUGH_KV_BLOCKS = 2048

NO_SPEC = "no speculation"
FLASH_ATTN = "FLASH_ATTN draft (reference)"
FP8 = "step 4 FLASHINFER draft, fp8 KV"
NO_SPEC_GRAPHS = "no speculation, CUDA graphs"
FLASH_ATTN_GRAPHS = "FLASH_ATTN draft, CUDA graphs"
STEP4_GRAPHS = "step 4 FLASHINFER draft, CUDA graphs"
FINAL_GRAPHS = "step 6 FLASHINFER draft, CUDA graphs"
FINAL_GRAPHS_FI_TARGET = "step 6 FLASHINFER target and draft, CUDA graphs"


def step_label(step: int) -> str:
    return f"step {step} FLASHINFER draft"


def walkthrough_plan(num_prompts: int = 32, max_new_tokens: int = 128, **models) -> list[RunSpec]:
    from dflash_fi.steps import STEPS

    common = dict(num_prompts=num_prompts, max_new_tokens=max_new_tokens, num_gpu_blocks=WALKTHROUGH_KV_BLOCKS,
                  **models)
    graphs = dict(common, cuda_graphs=True)
    return [
        RunSpec(label=NO_SPEC, speculative=False, **common),
        RunSpec(label=FLASH_ATTN, draft_backend="FLASH_ATTN", **common),
        *(RunSpec(label=step_label(s), step=s, **common) for s in STEPS),
        RunSpec(label=FP8, step=4, kv_cache_dtype="fp8", **common),
        RunSpec(label=NO_SPEC_GRAPHS, speculative=False, **graphs),
        RunSpec(label=FLASH_ATTN_GRAPHS, draft_backend="FLASH_ATTN", **graphs),
        RunSpec(label=STEP4_GRAPHS, step=4, **graphs),
        RunSpec(label=FINAL_GRAPHS, step=6, **graphs),
        RunSpec(label=FINAL_GRAPHS_FI_TARGET, step=6, target_backend="FLASHINFER", **graphs),
    ]


def expected_to_fail(spec: RunSpec) -> bool:
    """Steps 0 and 1 fail by design: their failure is what the walkthrough shows."""
    return spec.speculative and spec.draft_backend == "FLASHINFER" and spec.step in (0, 1)
