"""`dflash-fi bench e2e`: tokens per second of whole vLLM engines, eager and with vLLM's default CUDA graphs.

Embedded pair: no speculation, DFlash with the FLASH_ATTN draft, and with the FLASHINFER draft at step 4
(PR #43081, upstream's state), 5 and 6; bf16 and fp8 KV; eager (`enforce_eager=True`) and vLLM's default
compilation (torch.compile + `FULL_AND_PIECEWISE` graphs, or what the engine resolves it to). One engine per
process; in each, for batch 1, 8 and 32 (the first b held-out prompts, 256 new tokens each, greedy): one
warm-up generate, then three timed ones, the fastest reported. tau over that generate from vLLM's counters;
TPOT from vLLM's per-request timestamps; `same_as_no_spec` the share of prompts whose output equals the
no-speculation engine's of the same KV dtype and graph mode; the host time of the attention metadata builds
per decoding step, by builder (the model runner's, the drafter's). One engine per GPU at a time;
`engines_at_once` says how many shared the host.

Qwen3-4B shape: a 36-layer Qwen3 target (hidden 2560, 32/8 heads, head_dim 128) and a 5-layer DFlash drafter
of the shape public DFlash configs for 36-layer Qwen3 targets give (context from target layers 1, 9, 17,
25, 33; block 16), with random weights (`load_format="dummy"`). Acceptance means nothing there (random
drafts); the number is the time per decoding step at batch 1 and 32.
"""

from __future__ import annotations

import json
from pathlib import Path

from dflash_fi.engine.spec import RunSpec
from dflash_fi.logs import LOG_DIR
from dflash_fi.vocabulary import KV_CACHE_DTYPES, KV_CACHE_DTYPE_NAMES

EMBEDDED_RUNS = (  # (run, step, draft backend, speculative)
    ("no speculation", 0, "FLASHINFER", False),
    ("FLASH_ATTN draft", 0, "FLASH_ATTN", True),
    ("step 4 FLASHINFER draft", 4, "FLASHINFER", True),
    ("step 5 FLASHINFER draft", 5, "FLASHINFER", True),
    ("step 6 FLASHINFER draft", 6, "FLASHINFER", True),
)
SHAPE_MODEL = "qwen3-4b-shape (random weights)"
SHAPE_RUNS = (EMBEDDED_RUNS[1], EMBEDDED_RUNS[2], EMBEDDED_RUNS[4])  # the drafts; step time is the point
BATCHES, SHAPE_BATCHES = (1, 8, 32), (1, 32)
NEW_TOKENS, SHAPE_NEW_TOKENS, REPEATS = 256, 128, 3
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


def write_shape_models(root: Path = SHAPE_DIR) -> tuple[str, str]:
    """config.json files of the Qwen3-4B-shaped pair (no weights: vLLM makes random ones)."""
    for name, config in (("target", QWEN3_4B_TARGET), ("drafter", QWEN3_4B_DFLASH_DRAFTER)):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return str(root / "target"), str(root / "drafter")


def e2e_plan(quick: bool = False, shape: bool = True, shape_dir: Path = SHAPE_DIR,
             kv_dtypes: tuple[str, ...] = KV_CACHE_DTYPES) -> list[RunSpec]:
    """The engines, most expensive first (the GPUs stay busy to the end). The Qwen3-4B shape is bf16 only."""
    specs = []
    kv_dtypes = ("auto",) if quick else kv_dtypes
    for graphs in (False, True):
        for kv in kv_dtypes:
            for run, step, backend, speculative in EMBEDDED_RUNS:
                specs.append(RunSpec(
                    label=f"embedded | {run} | {KV_CACHE_DTYPE_NAMES[kv]} | {'graphs' if graphs else 'eager'}",
                    step=step, draft_backend=backend, speculative=speculative, kv_cache_dtype=kv,
                    cuda_graphs=graphs, num_prompts=max(BATCHES), max_new_tokens=NEW_TOKENS,
                    batch_sizes=(1, 8) if quick else BATCHES, repeats=1 if quick else REPEATS,
                    extra={"model": "embedded", "run": run}))
    if shape and "auto" in kv_dtypes:
        target, drafter = write_shape_models(shape_dir)
        for run, step, backend, speculative in SHAPE_RUNS:
            specs.append(RunSpec(
                label=f"qwen3-4b-shape | {run} | bf16 | graphs", step=step, draft_backend=backend,
                speculative=speculative, target=target, drafter=drafter, load_format="dummy", cuda_graphs=True,
                num_prompts=max(SHAPE_BATCHES), max_new_tokens=SHAPE_NEW_TOKENS, batch_sizes=SHAPE_BATCHES,
                repeats=1 if quick else 2, gpu_memory_utilization=0.6, max_model_len=2048, timeout_s=900,
                extra={"model": SHAPE_MODEL, "run": run}))
    return sorted(specs, key=lambda spec: (spec.load_format != "dummy", not spec.cuda_graphs))


def rows_from(records: dict[str, dict]) -> tuple[list[dict], list[dict]]:
    """Result rows (one per engine and batch) and one summary per engine."""
    rows, engines = [], []
    baselines = {}
    for record in records.values():
        spec = record["spec"]
        if not spec["speculative"]:
            for b in record.get("batches", []):
                baselines[spec["extra"]["model"], spec["kv_cache_dtype"], spec["cuda_graphs"], b["batch"]] = b
    for label, record in records.items():
        spec = record["spec"]
        engines.append({"label": label, "ok": record.get("ok", False), "cudagraph_mode": record.get("cudagraph_mode"),
                        "engine_start_s": record.get("engine_start_s"), "log_file": record.get("log_file"),
                        "backends": record.get("backends"), "error": record.get("error"),
                        **({"metadata_build_profiles": record["metadata_build_profiles"]}
                           if "metadata_build_profiles" in record else {})})
        for b in record.get("batches", []):
            base = baselines.get((spec["extra"]["model"], spec["kv_cache_dtype"], spec["cuda_graphs"], b["batch"]))
            same = None
            if spec["speculative"] and base is not None:
                same = sum(x == y for x, y in zip(b["tokens"], base["tokens"])) / len(base["tokens"])
            steps = b["num_drafts"] / b["batch"] if spec["speculative"] else spec["max_new_tokens"]
            rows.append({
                "model": spec["extra"]["model"], "run": spec["extra"]["run"],
                "step": spec["step"] if spec["speculative"] and spec["draft_backend"] == "FLASHINFER" else None,
                "draft_backend": spec["draft_backend"] if spec["speculative"] else None,
                "kv_cache_dtype": KV_CACHE_DTYPE_NAMES[spec["kv_cache_dtype"]], "batch": b["batch"],
                "cuda_graphs": spec["cuda_graphs"], "cudagraph_mode": record.get("cudagraph_mode") or "NONE",
                "tokens_per_s": b["output_tokens_per_s"], "tpot_ms": b["tpot_ms"],
                "step_ms": round(b["generate_s"] / steps * 1000, 4) if steps else None,
                "tau": b.get("tau"), "same_as_no_spec": same,
                "repeats_tokens_per_s": b["repeats_tokens_per_s"],
                "metadata_build_ms_per_step": b.get("metadata_build_ms_per_step"),
                "metadata_builds_per_step": b.get("metadata_builds_per_step"),
            })
    return rows, engines


def run_e2e_bench(quick: bool = False, shape: bool = True, kv_dtypes: tuple[str, ...] = KV_CACHE_DTYPES,
                  only: str | None = None, print_fn=print) -> dict:
    from dflash_fi.engine.pool import run_engines, visible_gpus
    from dflash_fi.stack import require_gpu, run_context

    gpu = require_gpu("dflash-fi bench e2e")
    specs = [s for s in e2e_plan(quick, shape, kv_dtypes=kv_dtypes) if only is None or only in s.label]
    if not specs:
        from dflash_fi.errors import BadInput

        raise BadInput(f"no e2e engine's label contains {only!r} (labels look like 'embedded | step 6 FLASHINFER draft "
                       "| bf16 | graphs' or 'qwen3-4b-shape | ...')")
    gpus = visible_gpus()
    print_fn(f"{len(specs)} engines on {len(gpus)} GPU(s) ({gpu.name})")
    records = run_engines(specs, gpus, "dflash-fi bench e2e", print_fn=print_fn)
    rows, engines = rows_from(records)
    return {"gpu": gpu.name, "compute_capability": gpu.sm, "method": __doc__.strip(), "rows": rows,
            "engines": engines, "engines_at_once": min(len(gpus), len(specs)), **run_context()}


def format_rows(rows: list[dict]) -> str:
    lines = ["| model | run | KV | graphs (mode) | batch | tokens/s | TPOT ms | step ms | tau | same as no-spec |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mode = r["cudagraph_mode"] if r["cuda_graphs"] else "eager"
        tau = f"{r['tau']:.2f}" if r["tau"] is not None else "-"
        same = f"{r['same_as_no_spec']:.0%}" if r["same_as_no_spec"] is not None else "-"
        tpot = f"{r['tpot_ms']:.3f}" if r["tpot_ms"] is not None else "-"
        lines.append(f"| {r['model']} | {r['run']} | {r['kv_cache_dtype']} | {mode} | {r['batch']} | "
                     f"{r['tokens_per_s']:.0f} | {tpot} | {r['step_ms']:.3f} | {tau} | {same} |")
    return "\n".join(lines)
