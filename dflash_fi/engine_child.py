"""One vLLM engine for one RunSpec (run by dflash_fi.runner in a fresh process; not for direct use).

    python -m dflash_fi.engine_child SPEC.json RESULT.json
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import traceback
from pathlib import Path


def _attention_backends(worker) -> dict[str, str]:
    """Runs on the worker: attention layer name -> the backend class vLLM selected for it."""
    from vllm.model_executor.layers.attention import Attention

    context = worker.model_runner.vllm_config.compilation_config.static_forward_context
    return {
        name: f"{type(layer.attn_backend).__module__}.{layer.attn_backend.__qualname__}"
        if not isinstance(layer.attn_backend, type)
        else f"{layer.attn_backend.__module__}.{layer.attn_backend.__qualname__}"
        for name, layer in context.items()
        if isinstance(layer, Attention)
    }


def _split_backends(layers: dict[str, str], num_target_layers: int) -> dict[str, list[str]]:
    """Target layers are model.layers.0..N-1; DFlash's draft layers are numbered from N on."""
    target, draft = set(), set()
    for name, backend in layers.items():
        index = int(name.split("layers.")[1].split(".")[0]) if "layers." in name else -1
        (target if 0 <= index < num_target_layers else draft).add(backend)
    return {"target": sorted(target), "draft": sorted(draft)}


def _phase(exc: BaseException, stage: str) -> str:
    text = str(exc)
    if "is not valid for this configuration" in text or "No valid attention backend" in text:
        return "selection"
    if stage == "generation":
        files = [frame.filename for frame in traceback.extract_tb(exc.__traceback__)]
        return "first draft step" if any("spec_decode" in f for f in files) else "generation"
    return stage


def _metrics(llm) -> dict:
    values = {}
    for metric in llm.get_metrics():
        if metric.name.startswith("vllm:spec_decode"):
            values[metric.name] = getattr(metric, "values", None) or getattr(metric, "value", None)
    drafts = values.get("vllm:spec_decode_num_drafts") or 0
    accepted = values.get("vllm:spec_decode_num_accepted_tokens") or 0
    per_pos = values.get("vllm:spec_decode_num_accepted_tokens_per_pos") or []
    return {
        "num_drafts": drafts,
        "num_draft_tokens": values.get("vllm:spec_decode_num_draft_tokens"),
        "num_accepted_tokens": accepted,
        "tau": 1 + accepted / drafts if drafts else None,
        "per_position_acceptance": [a / drafts for a in per_pos] if drafts else None,
    }


def main(spec_path: str, result_path: str) -> int:
    spec = json.loads(open(spec_path).read())
    result: dict = {"ok": False}
    stage = "import"
    try:
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        from dflash_fi.evaluate import DEFAULT_TARGET, load_prompts
        from dflash_fi.tokenizer import prompt_ids

        texts = load_prompts(spec["prompts_file"], spec["num_prompts"])
        embedded = Path(spec["target"]).resolve() == DEFAULT_TARGET.resolve()
        # The embedded byte-level pair sees prompts exactly as in training; other models tokenize text.
        prompts = [TokensPrompt(prompt_token_ids=prompt_ids(t)) if embedded else t for t in texts]
        kwargs = dict(
            model=spec["target"], tokenizer=spec["target"], dtype="bfloat16", seed=0,
            enforce_eager=spec["enforce_eager"], kv_cache_dtype=spec["kv_cache_dtype"],
            max_model_len=1024, gpu_memory_utilization=spec.get("gpu_memory_utilization", 0.4), disable_log_stats=False,
        )
        if spec.get("num_gpu_blocks"):
            kwargs["num_gpu_blocks_override"] = spec["num_gpu_blocks"]
        if spec["speculative"]:
            kwargs["speculative_config"] = {
                "method": "dflash",
                "model": spec["drafter"],
                "num_speculative_tokens": spec["num_speculative_tokens"],
                "attention_backend": spec["draft_backend"],
            }
        stage = "engine start"
        t0 = time.time()
        llm = LLM(**kwargs)
        result["engine_start_s"] = round(time.time() - t0, 2)
        num_target_layers = llm.llm_engine.model_config.hf_config.num_hidden_layers
        layers = llm.collective_rpc(_attention_backends)[0]
        result["backends"] = _split_backends(layers, num_target_layers)

        stage = "generation"
        params = SamplingParams(temperature=0.0, max_tokens=spec["max_new_tokens"], ignore_eos=True)
        t0 = time.time()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.time() - t0
        tokens = [list(o.outputs[0].token_ids) for o in outputs]
        result.update({
            "ok": True,
            "generate_s": round(seconds, 3),
            "output_tokens_per_s": round(sum(map(len, tokens)) / seconds, 1),
            "tokens": tokens,
            "tokens_sha256": hashlib.sha256(json.dumps(tokens).encode()).hexdigest(),
            **(_metrics(llm) if spec["speculative"] else {}),
        })
    except BaseException as exc:  # the record must say what failed, whatever it was
        result["error"] = {
            "type": type(exc).__name__,
            "message": str(exc)[:2000],
            "phase": _phase(exc, stage),
            "traceback_tail": traceback.format_exc()[-2500:],
        }
    with open(result_path, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
