"""One vLLM engine for one RunSpec (started by dflash_fi.engine.runner in a fresh process).

    python -m dflash_fi.engine.child SPEC.json RESULT.json [ADDRESS]

It records what vLLM selected (each layer's attention backend, the CUDA-graph mode the runner resolved, the
FlashAttention version), where a failure happened, and each workload's generate (`dflash_fi.engine.generate`).
With ADDRESS (a benchmark of several engines taking turns, `dflash_fi.engine.server`), after start-up it
serves benchmark rounds, one per request from the parent, until told to stop; RESULT.json is written last.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback
from pathlib import Path

from dflash_fi.engine import instruments
from dflash_fi.engine.generate import benchmark_round, generate


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


def _flash_attn_log_lines(log_file: str | None) -> list[str]:
    """vLLM's own log lines naming the FlashAttention version (evidence of what an engine ran)."""
    if not log_file or not Path(log_file).is_file():
        return []
    text = Path(log_file).read_text(errors="replace")
    return sorted({m.group(0).strip() for m in re.finditer(r"[^\n]*FlashAttention version[^\n]*", text)})[:4]


def _serve(llm, prompts, spec: dict, address: str) -> list[dict]:
    """Benchmark rounds on request: the parent alternates engines, so only one engine works at a time."""
    from multiprocessing.connection import Client

    rounds = []
    with Client(address) as parent:
        parent.send({"ready": True})
        while (request := parent.recv()).get("round") is not None:
            rows = benchmark_round(llm, prompts, spec, warm_up=not rounds)
            rounds.append({"round": request["round"], "batches": rows})
            parent.send({"done": request["round"], "batches": rows})
    return rounds


def main(spec_path: str, result_path: str, address: str | None = None) -> int:
    spec = json.loads(Path(spec_path).read_text())
    result: dict = {"ok": False}
    stage = "import"
    try:
        from vllm import LLM
        from vllm.inputs import TokensPrompt

        from dflash_fi.engine.spec import RunSpec, engine_arguments
        from dflash_fi.engine.workloads import workload_requests
        from dflash_fi.models import load_prompts
        from dflash_fi.reference.tokenizer import prompt_ids

        texts = load_prompts(spec["prompts_file"])
        if spec["num_prompts"] > len(texts):
            load_prompts(spec["prompts_file"], spec["num_prompts"])  # says how many there are
        # Local (byte-level) models see prompts as in training; hub models tokenize the text themselves.
        local_target = Path(spec["target"]).is_dir()

        def as_prompt(text):
            return TokensPrompt(prompt_token_ids=prompt_ids(text)) if local_target else text

        stage = "engine start"
        t0 = time.time()
        llm = LLM(**engine_arguments(RunSpec(**spec)))
        result["engine_start_s"] = round(time.time() - t0, 2)
        num_target_layers = llm.llm_engine.model_config.hf_config.num_hidden_layers
        result["backends"] = _split_backends(llm.collective_rpc(instruments.attention_backends)[0], num_target_layers)
        graphs = llm.collective_rpc(instruments.cudagraph_state)[0]
        result["cudagraph_mode"], result["max_cudagraph_capture_size"] = graphs["mode"], graphs["max_capture_size"]
        result["flash_attn_version"] = llm.collective_rpc(instruments.flash_attn_version)[0]
        llm.collective_rpc(instruments.build_times, kwargs={"install": True})

        stage = "generation"
        detokenize = spec["load_format"] != "dummy"
        bench_prompts = [as_prompt(t) for t in texts[: spec["num_prompts"]]]
        if address:
            result["rounds"] = _serve(llm, bench_prompts, spec, address)
        elif spec.get("batch_sizes"):
            result["rounds"] = [{"round": 1, "batches": benchmark_round(llm, bench_prompts, spec, warm_up=True)}]
        else:
            for workload in spec["workloads"]:
                requests = [(as_prompt(t), n) for t, n in
                            workload_requests(workload, texts, spec["num_prompts"], spec["max_new_tokens"])]
                run = generate(llm, requests, spec["speculative"], spec.get("logprobs"), detokenize)
                if workload == "uniform":
                    result.update(run)
                else:
                    result[workload] = run
        if os.environ.get(instruments.PROFILE_BUILDS_ENV):
            result["metadata_build_profiles"] = llm.collective_rpc(instruments.build_profiles)[0]
        result["ok"] = True
    except BaseException as exc:  # the record must say what failed, whatever it was
        result["error"] = {
            "type": type(exc).__name__,
            "message": str(exc)[:2000],
            "phase": _phase(exc, stage),
            "traceback_tail": traceback.format_exc()[-2500:],
        }
    result["flash_attn_log_lines"] = _flash_attn_log_lines(os.environ.get("DFLASH_FI_LOG_FILE"))
    Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
