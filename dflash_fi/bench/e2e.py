"""`dflash-fi bench e2e`: whole vLLM engines with vLLM's default CUDA graphs, taking turns, in rounds.

Every engine starts at once, each in its own process; then the parent asks each in turn for one round
(A B C D ... A B C D ...: `dflash_fi.engine.server`), so only one engine works at a time and whatever the
machine does during a round falls on every engine alike. Round r of two engines is a pair: the benchmark
reports their ratio per pair (min / median / max over the rounds), and the results file keeps every round.

A round, per batch size b (greedy, ignore_eos): b held-out prompts decoded together; batch 1 decodes
BATCH1_PROMPTS prompts one at a time and takes the median (one prompt alone says more about that prompt than
about the engine). The first round warms each batch size up first. Each row has tokens/s, the time per
decoding step (target forwards), tau from vLLM's counters, and the host time of every attention metadata
build per step, by builder (the model runner's, per attention group; the drafter's).

Embedded pair, bf16: no speculation, the FLASH_ATTN draft, and the FlashInfer draft at step 6 and at the
final step. Qwen3-4B shape: a 36-layer Qwen3 target (hidden 2560, 32/8 heads, head_dim 128) and a 5-layer DFlash
drafter of the shape public DFlash configs for 36-layer Qwen3 targets give (context from target layers 1, 9,
17, 25, 33; block 16), random weights (`load_format="dummy"`): every draft is rejected, so only the step time
means anything.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from dflash_fi.engine.spec import RunSpec
from dflash_fi.logs import LOG_DIR

EMBEDDED, SHAPE_MODEL = "embedded", "qwen3-4b-shape (random weights)"
FLASH_ATTN_RUN = "FLASH_ATTN draft"
ROUNDS = 4
BATCHES, SHAPE_BATCHES = (1, 8, 32), (1, 32)
NEW_TOKENS, SHAPE_NEW_TOKENS = 256, 128
BATCH1_PROMPTS, SHAPE_BATCH1_PROMPTS = 8, 4
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


def final_run() -> str:
    from dflash_fi.steps import FINAL_STEP

    return f"step {FINAL_STEP} FLASHINFER draft"


def runs(model: str) -> tuple[tuple[str, int, str | None, bool], ...]:
    """(run, step, draft backend, speculative) of each engine of a model."""
    from dflash_fi.steps import FINAL_STEP

    drafts = ((FLASH_ATTN_RUN, 0, "FLASH_ATTN", True), ("step 6 FLASHINFER draft", 6, "FLASHINFER", True),
              (final_run(), FINAL_STEP, "FLASHINFER", True))
    return ((("no speculation", 0, None, False),) if model == EMBEDDED else ()) + drafts


def write_shape_models(root: Path = SHAPE_DIR) -> tuple[str, str]:
    """config.json files of the Qwen3-4B-shaped pair (no weights: vLLM makes random ones)."""
    for name, config in (("target", QWEN3_4B_TARGET), ("drafter", QWEN3_4B_DFLASH_DRAFTER)):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return str(root / "target"), str(root / "drafter")


def e2e_plan(models=(EMBEDDED, SHAPE_MODEL), quick: bool = False, shape_dir: Path = SHAPE_DIR) -> list[RunSpec]:
    """Every engine of the benchmark (all start at once; small engines reserve their KV cache outright)."""
    specs = []
    for model in models:
        embedded = model == EMBEDDED
        files = {} if embedded else dict(zip(("target", "drafter"), write_shape_models(shape_dir)))
        for run, step, backend, speculative in runs(model):
            specs.append(RunSpec(
                label=f"{model} | {run} | bf16 | graphs", step=step, draft_backend=backend or "FLASHINFER",
                speculative=speculative, cuda_graphs=True, **files,
                load_format="auto" if embedded else "dummy",
                num_prompts=max(BATCHES if embedded else SHAPE_BATCHES),
                max_new_tokens=(NEW_TOKENS if embedded else SHAPE_NEW_TOKENS) // (4 if quick else 1),
                batch_sizes=(1, 8) if quick and embedded else BATCHES if embedded else SHAPE_BATCHES,
                gpu_memory_utilization=0.12 if embedded else 0.3,
                kv_cache_memory_bytes=(512 << 20) if embedded else (4 << 30),
                max_model_len=1024 if embedded else 2048, timeout_s=900,
                extra={"model": model, "run": run, "batch1_prompts": BATCH1_PROMPTS if embedded else SHAPE_BATCH1_PROMPTS}))
    return specs


def rows_from(records: dict[str, dict]) -> tuple[list[dict], list[dict]]:
    """One row per engine, round and batch size (no tokens), and one summary per engine."""
    rows, engines = [], []
    for label, record in records.items():
        spec = record["spec"]
        engines.append({"label": label, "model": spec["extra"]["model"], "run": spec["extra"]["run"],
                        "ok": record.get("ok", False), "cudagraph_mode": record.get("cudagraph_mode"),
                        "engine_start_s": record.get("engine_start_s"), "log_file": record.get("log_file"),
                        "backends": record.get("backends"), "error": record.get("error")})
        first = {}
        for rnd in record.get("rounds", []):
            for b in rnd["batches"]:
                first.setdefault(b["batch"], b["tokens_sha256_per_generate"])
                rows.append({
                    "model": spec["extra"]["model"], "run": spec["extra"]["run"], "round": rnd["round"],
                    "batch": b["batch"], "cudagraph_mode": record.get("cudagraph_mode"),
                    "tokens_per_s": b["output_tokens_per_s"], "step_ms": statistics.median(b["generates_step_ms"]),
                    "tpot_ms": b.get("tpot_ms"), "tau": b.get("tau"),
                    "generates_tokens_per_s": b["generates_tokens_per_s"], "generates_step_ms": b["generates_step_ms"],
                    "same_tokens_as_round_1": b["tokens_sha256_per_generate"] == first[b["batch"]],
                    "metadata_build_ms_per_step": b.get("metadata_build_ms_per_step"),
                    "metadata_builds_per_step": b.get("metadata_builds_per_step"),
                })
    return rows, engines


def run_e2e_bench(quick: bool = False, models=(EMBEDDED, SHAPE_MODEL), rounds: int = ROUNDS, print_fn=print) -> dict:
    from dflash_fi.engine.server import run_in_turns
    from dflash_fi.stack import require_gpu, run_context

    gpu = require_gpu("dflash-fi bench e2e")
    specs = e2e_plan(models, quick)
    print_fn(f"{len(specs)} engines on {gpu.name}, started together, then {rounds} rounds in turn")
    records = run_in_turns(specs, rounds, "dflash-fi bench e2e", print_fn=print_fn)
    rows, engines = rows_from(records)
    return {"gpu": gpu.name, "compute_capability": gpu.sm, "method": __doc__.strip(), "rounds": rounds,
            "rows": rows, "engines": engines, **run_context()}
