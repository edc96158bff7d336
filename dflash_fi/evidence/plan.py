"""The walkthrough's engine runs: one RunSpec per row of its table, in the order a reader meets them.

Every engine generates two workloads (`dflash_fi.engine.workloads`): the uniform one (32 prompts x 128 tokens,
the table's rows) and the mixed one (prompts of other lengths and budgets, more requests than `max_num_seqs`;
the mixed-batch rows). Every engine returns the target's top-2 logprobs, which the near-tie rule reads.
Each run that is checked for identity has a baseline that differs from it only in what the check is about
(`BASELINES`).
"""

from __future__ import annotations

from dflash_fi.engine.spec import RunSpec
from dflash_fi.engine.workloads import MIXED_MAX_NUM_SEQS

# Every run gets the same KV cache (32 prompts x (97 + 128 + 16 draft) tokens need 512 blocks of 16; the mixed
# workload's 40 running requests fewer) rather than one sized from the memory free at start-up: one difference
# fewer between the engines compared. (The engines share GPUs where there is room: engine.pool.share_gpus.)
WALKTHROUGH_KV_BLOCKS = 2048
WORKLOADS = ("uniform", "mixed")

NO_SPEC = "no speculation"
FLASH_ATTN = "FLASH_ATTN draft (reference)"
NO_SPEC_FP8 = "no speculation, fp8 KV"
FP8 = "step 4 FLASHINFER draft, fp8 KV"
# The RTX 4090 + FP8 case on this GPU: FlashAttention forced to version 2 (all a 4090 has), which stores no fp8
# KV; the draft's backend is left to vLLM's selector, as a user who names none would.
RTX4090 = "fp8 KV, FlashAttention 2 forced (the RTX 4090 case)"
RTX4090_NO_SPEC = f"no speculation, {RTX4090}"
RTX4090_STOCK = f"step 0, draft backend left to the selector, {RTX4090}"
RTX4090_STEP4 = f"step 4, draft backend left to the selector, {RTX4090}"
NO_SPEC_GRAPHS = "no speculation, CUDA graphs"
NO_SPEC_GRAPHS_FI_TARGET = "no speculation, FLASHINFER target, CUDA graphs"
FLASH_ATTN_GRAPHS = "FLASH_ATTN draft, CUDA graphs"
STEP4_GRAPHS = "step 4 FLASHINFER draft, CUDA graphs"
STEP4_GRAPHS_FI_TARGET = "step 4 FLASHINFER target and draft, CUDA graphs"
GRAPH_STEPS = (6, 7)  # the steps that keep the engine's full graphs


def step_label(step: int) -> str:
    return f"step {step} FLASHINFER draft"


def graphs_label(step: int) -> str:
    return f"step {step} FLASHINFER draft, CUDA graphs"


def graphs_fi_target_label(step: int) -> str:
    return f"step {step} FLASHINFER target and draft, CUDA graphs"


# Identity checks: run -> the runs it must equal (near-tie rule), each differing from it in one thing only.
BASELINES: dict[str, tuple[str, ...]] = {
    FLASH_ATTN: (NO_SPEC,),
    step_label(3): (NO_SPEC,),
    FP8: (NO_SPEC_FP8,),
    RTX4090_STEP4: (RTX4090_NO_SPEC,),
    FLASH_ATTN_GRAPHS: (NO_SPEC_GRAPHS,),
    STEP4_GRAPHS_FI_TARGET: (NO_SPEC_GRAPHS_FI_TARGET,),
    **{graphs_label(s): (NO_SPEC_GRAPHS,) for s in GRAPH_STEPS},
    # FlashInfer as the target too: against plain decoding on the same target backend, and against upstream's
    # state (step 4: the same target kernels, only the graph mode differs).
    **{graphs_fi_target_label(s): (NO_SPEC_GRAPHS_FI_TARGET, STEP4_GRAPHS_FI_TARGET) for s in GRAPH_STEPS},
}
# The mixed-batch rows: these engines' mixed workload, against their baselines' and against the FLASH_ATTN draft's tau.
MIXED_ROWS = tuple(label for s in GRAPH_STEPS for label in (graphs_label(s), graphs_fi_target_label(s)))


def walkthrough_plan(num_prompts: int = 32, max_new_tokens: int = 128, workloads: tuple[str, ...] = WORKLOADS,
                     **models) -> list[RunSpec]:
    from dflash_fi.steps import STEPS

    common = dict(num_prompts=num_prompts, max_new_tokens=max_new_tokens, num_gpu_blocks=WALKTHROUGH_KV_BLOCKS,
                  max_num_seqs=MIXED_MAX_NUM_SEQS, logprobs=2, workloads=workloads, **models)
    graphs = dict(common, cuda_graphs=True)
    rtx4090 = dict(common, kv_cache_dtype="fp8", flash_attn_version=2)
    return [
        RunSpec(label=NO_SPEC, speculative=False, **common),
        RunSpec(label=FLASH_ATTN, draft_backend="FLASH_ATTN", **common),
        *(RunSpec(label=step_label(s), step=s, **common) for s in STEPS),
        RunSpec(label=NO_SPEC_FP8, speculative=False, kv_cache_dtype="fp8", **common),
        RunSpec(label=FP8, step=4, kv_cache_dtype="fp8", **common),
        RunSpec(label=RTX4090_NO_SPEC, speculative=False, **rtx4090),
        RunSpec(label=RTX4090_STOCK, step=0, draft_backend=None, **rtx4090),
        RunSpec(label=RTX4090_STEP4, step=4, draft_backend=None, **rtx4090),
        RunSpec(label=NO_SPEC_GRAPHS, speculative=False, **graphs),
        RunSpec(label=NO_SPEC_GRAPHS_FI_TARGET, speculative=False, target_backend="FLASHINFER", **graphs),
        RunSpec(label=FLASH_ATTN_GRAPHS, draft_backend="FLASH_ATTN", **graphs),
        RunSpec(label=STEP4_GRAPHS, step=4, **graphs),
        RunSpec(label=STEP4_GRAPHS_FI_TARGET, step=4, target_backend="FLASHINFER", **graphs),
        *(RunSpec(label=graphs_label(s), step=s, **graphs) for s in GRAPH_STEPS),
        *(RunSpec(label=graphs_fi_target_label(s), step=s, target_backend="FLASHINFER", **graphs) for s in GRAPH_STEPS),
    ]


def live_spec(label: str, num_prompts: int, max_new_tokens: int) -> RunSpec:
    """The walkthrough's run `label`, as a notebook runs it live: smaller, uniform workload only."""
    specs = {s.label: s for s in walkthrough_plan(num_prompts, max_new_tokens, workloads=("uniform",))}
    return specs[label]


def expected_to_fail(spec: RunSpec) -> bool:
    """Steps 0 and 1 fail by design: their failure is what the walkthrough shows."""
    return spec.speculative and spec.draft_backend in ("FLASHINFER", None) and spec.step in (0, 1)
