"""`dflash-fi bench e2e`: whole vLLM engines with vLLM's default CUDA graphs, taking turns, in rounds.

Every engine starts at once, each in its own process; then the parent hands out turns (`dflash_fi.engine.server`):
per model pair and per batch size, rounds back to back, each round every engine of the pair in turn (A B C, the next
round C B A), so only one engine works at a time and the engines compared in a round work seconds apart, on one vCPU.
The GPU machine's vCPUs change speed by up to 2x within seconds (each turn records its vCPU's speed before and after:
`dflash_fi.engine.vcpus`), more than any target here: so the benchmark keeps the two engines of each comparison next
to each other in the turn order (the FLASH_ATTN draft between its A/A twin and the final FlashInfer draft) and its
turns short, and pairs them round by round, rather than averaging long rounds. After the first round the idle
engines are stopped, so they take no host time from the working one (each round records what they took), and a
continued engine settles with a short unmeasured generate before its measured one. Round 1 warms each batch size up
and is not measured. Round r of two engines is a pair: the benchmark reports the median of their ratio over the
measured pairs, with a 95% bootstrap interval (`dflash_fi.bench.stats`); a second FLASH_ATTN draft engine (the A/A
pair) shows the interval when nothing differs. The results file keeps every round.

A turn at batch size b (greedy, ignore_eos): b held-out prompts decoded together; at batch 1 one prompt alone, one of
the first `batch1_prompts` by round. Each generate records tokens/s, the intervals between the engine's steps (their
median is the step time: prefills, the generate's start and end and the host's stalls do not weigh in), tau from
vLLM's counters, and the host time of every attention metadata build, by builder (the runner's groups; the
drafter's). Tokens/s is compared at the median step (tokens per step over the step time), where the host's slow
spells weigh least.

Embedded pair, bf16: no speculation, the FLASH_ATTN draft (twice), the FlashInfer draft at the step before the
final one and at the final step. Qwen3-4B shape: a 36-layer Qwen3 target (hidden 2560, 32/8 heads, head_dim 128)
and a 5-layer DFlash drafter of the shape public DFlash configs for 36-layer Qwen3 targets give (context from
target layers 1, 9, 17, 25, 33; block 16), random weights (`load_format="dummy"`): every draft is rejected, so
only the step time means anything.
"""

from __future__ import annotations

import json
from pathlib import Path

from dflash_fi.engine.identity import Pair, RunId
from dflash_fi.engine.spec import BenchPlan, RunSpec
from dflash_fi.logs import LOG_DIR

ROUNDS = 13  # the first warms up; twelve are measured
BATCHES, SHAPE_BATCHES = (1, 8, 32), (1, 32)
NEW_TOKENS, SHAPE_NEW_TOKENS = 256, 128  # short turns: neighbours then meet the vCPU at one speed more often
BATCH1_PROMPTS, SHAPE_BATCH1_PROMPTS = 2, 1
QWEN3_4B_TARGET = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 2560,
    "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000,
    "max_position_embeddings": 40960, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "attention_bias": False, "bos_token_id": 151643, "eos_token_id": 151645,
}
QWEN3_4B_DFLASH_DRAFTER = {
    **QWEN3_4B_TARGET, "architectures": ["DFlashDraftModel"], "num_hidden_layers": 5, "tie_word_embeddings": False,
    "block_size": 16, "num_target_layers": 36,
    "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
}
SHAPE_DIR = LOG_DIR.parent / "qwen3-4b-shape"  # git-ignored, made afresh by each run


def final_step() -> int:
    from dflash_fi.steps import FINAL_STEP

    return FINAL_STEP


def flash_attn_draft(pair: Pair, replica: int = 0) -> RunId:
    return RunId(draft_backend="FLASH_ATTN", cuda_graphs=True, pair=pair, replica=replica)


def flashinfer_draft(pair: Pair, step: int | None = None) -> RunId:
    return RunId(step=final_step() if step is None else step, cuda_graphs=True, pair=pair)


def bench_runs(pair: Pair) -> tuple[RunId, ...]:
    """Every engine of a pair, in turn order: plain decoding for the embedded pair (it puts tokens/s in scale), the
    step before the final one, then the FLASH_ATTN draft between its A/A twin and the final step, so that both
    comparisons are of neighbours in every round."""
    plain = (RunId(speculative=False, cuda_graphs=True, pair=pair),) if pair is Pair.EMBEDDED else ()
    return plain + (flashinfer_draft(pair, final_step() - 1), flash_attn_draft(pair, replica=1),
                    flash_attn_draft(pair), flashinfer_draft(pair))


def write_shape_models(root: Path = SHAPE_DIR) -> tuple[str, str]:
    """config.json files of the Qwen3-4B-shaped pair (no weights: vLLM makes random ones)."""
    for name, config in (("target", QWEN3_4B_TARGET), ("drafter", QWEN3_4B_DFLASH_DRAFTER)):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return str(root / "target"), str(root / "drafter")


def e2e_plan(pairs=(Pair.EMBEDDED, Pair.QWEN3_4B_SHAPE), quick: bool = False,
             shape_dir: Path = SHAPE_DIR) -> list[RunSpec]:
    """Every engine of the benchmark (all start at once; they reserve their KV cache outright)."""
    specs = []
    for pair in pairs:
        embedded = pair is Pair.EMBEDDED
        files = {} if embedded else dict(zip(("target", "drafter"), write_shape_models(shape_dir)))
        batches = BATCHES if embedded else SHAPE_BATCHES
        for run in bench_runs(pair):
            specs.append(RunSpec(
                run=run, **files, load_format="auto" if embedded else "dummy", num_prompts=max(batches),
                max_new_tokens=(NEW_TOKENS if embedded else SHAPE_NEW_TOKENS) // (4 if quick else 1),
                bench=BenchPlan(batch_sizes=(1, 8) if quick and embedded else batches,
                                batch1_prompts=BATCH1_PROMPTS if embedded else SHAPE_BATCH1_PROMPTS),
                gpu_memory_utilization=0.12 if embedded else 0.3,
                kv_cache_memory_bytes=(512 << 20) if embedded else (4 << 30),
                max_model_len=1024 if embedded else 2048, timeout_s=1200))
    return specs


def require_rounds(rounds: int) -> None:
    from dflash_fi.errors import BadInput

    if rounds < 2:
        raise BadInput(f"--rounds must be at least 2 (the first warms up), not {rounds}")


def run_e2e_bench(quick: bool = False, pairs=(Pair.EMBEDDED, Pair.QWEN3_4B_SHAPE), rounds: int = ROUNDS,
                  print_fn=print) -> dict:
    from dflash_fi.engine.server import run_in_turns
    from dflash_fi.stack import require_gpu, run_context

    require_rounds(rounds)
    gpu = require_gpu("dflash-fi bench e2e")
    specs = e2e_plan(pairs, quick)
    print_fn(f"{len(specs)} engines on {gpu.name}, started together, then {rounds} rounds in turn (round 1 warms up)")
    records = run_in_turns(specs, rounds, "dflash-fi bench e2e", print_fn=print_fn)
    return {"schema": 2, "gpu": gpu.name, "compute_capability": gpu.sm, "method": __doc__.strip(), "rounds": rounds,
            "warm_up_rounds": 1, "idle_engines_paused_after_first_round": True,
            "engines": [r.to_json() for r in records.values()], **run_context()}
