"""The walkthrough's engine runs: one RunId per row of its table, in the order a reader meets them.

Every engine generates two workloads (`dflash_fi.engine.workloads`): the uniform one (the table's rows) and the
mixed one (prompts of other lengths and budgets, more requests than `max_num_seqs`; the mixed-batch rows). Every
engine returns the target's top-2 logprobs, which the near-tie rule reads. Each run that is checked for identity
has a baseline that differs from it only in what the check is about (`BASELINES`).
"""

from __future__ import annotations

from dataclasses import replace

from dflash_fi.engine.identity import RunId, Workload
from dflash_fi.engine.spec import RunSpec
from dflash_fi.engine.workloads import MIXED_MAX_NUM_SEQS
from dflash_fi.models import DEFAULT_NEW_TOKENS, DEFAULT_NUM_PROMPTS

# Every run gets the same KV cache (32 prompts x (97 + 128 + 16 draft) tokens need 512 blocks of 16; the mixed
# workload's 40 running requests fewer) rather than one sized from the memory free at start-up: one difference
# fewer between the engines compared. (The engines share GPUs where there is room: engine.pool.share_gpus.)
WALKTHROUGH_KV_BLOCKS = 2048
WORKLOADS = (Workload.UNIFORM, Workload.MIXED)
# From this step on, a FlashInfer draft keeps the engine's full CUDA graphs.
FIRST_GRAPH_STEP = 6


def graph_steps() -> tuple[int, ...]:
    from dflash_fi.steps import STEPS

    return tuple(s for s in STEPS if s >= FIRST_GRAPH_STEP)


def step_run(step: int, **changes) -> RunId:
    """Step `step`'s FlashInfer draft (FLASH_ATTN target unless changed)."""
    return RunId(step=step, **changes)


def graphs_run(step: int) -> RunId:
    return RunId(step=step, cuda_graphs=True)


def graphs_fi_target_run(step: int) -> RunId:
    return RunId(step=step, cuda_graphs=True, target_backend="FLASHINFER")


def rtx4090_run(step: int, speculative: bool = True) -> RunId:
    """The RTX 4090 + FP8 case on this GPU: FlashAttention forced to version 2 (all a 4090 has), which stores no fp8
    KV; the draft's backend left to vLLM's selector, as a user who names none would."""
    return RunId(step=step, speculative=speculative, draft_backend=None, kv_cache_dtype="fp8", flash_attn_version=2)


NO_SPEC = RunId(speculative=False)
FLASH_ATTN = RunId(draft_backend="FLASH_ATTN")
NO_SPEC_FP8 = RunId(speculative=False, kv_cache_dtype="fp8")
FP8 = RunId(step=4, kv_cache_dtype="fp8")
RTX4090_NO_SPEC = rtx4090_run(0, speculative=False)
RTX4090_STOCK = rtx4090_run(0)
RTX4090_STEP4 = rtx4090_run(4)
NO_SPEC_GRAPHS = RunId(speculative=False, cuda_graphs=True)
NO_SPEC_GRAPHS_FI_TARGET = RunId(speculative=False, cuda_graphs=True, target_backend="FLASHINFER")
FLASH_ATTN_GRAPHS = RunId(draft_backend="FLASH_ATTN", cuda_graphs=True)
STEP4_GRAPHS = graphs_run(4)
STEP4_GRAPHS_FI_TARGET = graphs_fi_target_run(4)


def final_step() -> int:
    from dflash_fi.steps import FINAL_STEP

    return FINAL_STEP


def final_rtx4090() -> RunId:
    return rtx4090_run(final_step())


def walkthrough_runs() -> list[RunId]:
    """Every engine of the walkthrough, in the order of its table."""
    from dflash_fi.steps import STEPS

    return [
        NO_SPEC, FLASH_ATTN, *(step_run(s) for s in STEPS),
        NO_SPEC_FP8, FP8,
        RTX4090_NO_SPEC, RTX4090_STOCK, RTX4090_STEP4, final_rtx4090(),
        NO_SPEC_GRAPHS, NO_SPEC_GRAPHS_FI_TARGET, FLASH_ATTN_GRAPHS, STEP4_GRAPHS, STEP4_GRAPHS_FI_TARGET,
        *(graphs_run(s) for s in graph_steps()), *(graphs_fi_target_run(s) for s in graph_steps()),
    ]


def baselines() -> dict[RunId, tuple[RunId, ...]]:
    """Identity checks: run -> the runs it must equal (near-tie rule), each differing from it in one thing only."""
    return {
        FLASH_ATTN: (NO_SPEC,),
        step_run(3): (NO_SPEC,),
        FP8: (NO_SPEC_FP8,),
        RTX4090_STEP4: (RTX4090_NO_SPEC,),
        final_rtx4090(): (RTX4090_NO_SPEC,),
        FLASH_ATTN_GRAPHS: (NO_SPEC_GRAPHS,),
        STEP4_GRAPHS_FI_TARGET: (NO_SPEC_GRAPHS_FI_TARGET,),
        **{graphs_run(s): (NO_SPEC_GRAPHS,) for s in graph_steps()},
        # FlashInfer as the target too: against plain decoding on the same target backend, and against upstream's
        # state (step 4: the same target kernels, only the graph mode differs).
        **{graphs_fi_target_run(s): (NO_SPEC_GRAPHS_FI_TARGET, STEP4_GRAPHS_FI_TARGET) for s in graph_steps()},
    }


def mixed_rows() -> tuple[RunId, ...]:
    """The mixed-batch rows: these engines' mixed workload, against their baselines' and the FLASH_ATTN draft's tau."""
    return tuple(run for s in graph_steps() for run in (graphs_run(s), graphs_fi_target_run(s)))


def walkthrough_plan(num_prompts: int = DEFAULT_NUM_PROMPTS, max_new_tokens: int = DEFAULT_NEW_TOKENS,
                     workloads: tuple[Workload, ...] = WORKLOADS, **models) -> list[RunSpec]:
    common = dict(num_prompts=num_prompts, max_new_tokens=max_new_tokens, num_gpu_blocks=WALKTHROUGH_KV_BLOCKS,
                  max_num_seqs=MIXED_MAX_NUM_SEQS, logprobs=2, workloads=tuple(workloads), **models)
    return [RunSpec(run=run, **common) for run in walkthrough_runs()]


def live_spec(run: RunId, num_prompts: int, max_new_tokens: int) -> RunSpec:
    """The walkthrough's run `run`, as a notebook runs it live: smaller, uniform workload only."""
    spec = next(s for s in walkthrough_plan(num_prompts, max_new_tokens) if s.run == run)
    return replace(spec, workloads=(Workload.UNIFORM,))


def expected_to_fail(run: RunId) -> bool:
    """Steps 0 and 1 fail by design: their failure is what the walkthrough shows."""
    return run.speculative and run.draft_backend in ("FLASHINFER", None) and run.step in (0, 1)
