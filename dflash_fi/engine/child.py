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
from dflash_fi.engine.records import Phase, to_plain


class PhaseWatch:
    """Where a failure happened, noted by the code it happened in: vLLM's selector (`get_attn_backend_cls`, which
    refuses a backend) and the drafter's `propose` (a draft step). Anything else fails in the stage the engine is in.
    A context manager: the two functions are wrapped while it is entered (the engine process never leaves it)."""

    def __init__(self):
        self.failed_in: Phase | None = None
        self.proposed = False
        self._restore = []

    def __enter__(self) -> "PhaseWatch":
        from vllm.platforms import current_platform
        from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

        watch, platform = self, type(current_platform)
        select, propose = platform.__dict__.get("get_attn_backend_cls"), SpecDecodeBaseProposer.__dict__["propose"]
        bound_select = platform.get_attn_backend_cls.__func__

        def watched_select(cls, *args, **kwargs):
            try:
                return bound_select(cls, *args, **kwargs)
            except BaseException:
                watch.failed_in = watch.failed_in or Phase.SELECTION
                raise

        def watched_propose(proposer, *args, **kwargs):
            try:
                result = propose(proposer, *args, **kwargs)
            except BaseException:
                watch.failed_in = watch.failed_in or (Phase.DRAFT_STEP if watch.proposed else Phase.FIRST_DRAFT_STEP)
                raise
            watch.proposed = True
            return result

        platform.get_attn_backend_cls = classmethod(watched_select)
        SpecDecodeBaseProposer.propose = watched_propose
        self._restore = [(platform, "get_attn_backend_cls", select), (SpecDecodeBaseProposer, "propose", propose)]
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, original in self._restore:
            if original is None:
                delattr(owner, name)  # it was inherited
            else:
                setattr(owner, name, original)


def _flash_attn_log_lines(log_file: str | None) -> list[str]:
    """vLLM's own log lines naming the FlashAttention version (evidence of what an engine ran)."""
    if not log_file or not Path(log_file).is_file():
        return []
    text = Path(log_file).read_text(errors="replace")
    return sorted({m.group(0).strip() for m in re.finditer(r"[^\n]*FlashAttention version[^\n]*", text)})[:4]


def _serve(llm, prompts, spec, address: str) -> list[dict]:
    """Benchmark turns on request, one batch size of one round each: the parent alternates engines, so only one
    engine works at a time. A batch size's first turn warms it up; every later turn settles first (the engine was
    stopped while the others worked)."""
    from multiprocessing.connection import Client

    from dflash_fi.engine.generate import benchmark_batch

    rounds: dict[int, list] = {}
    warmed: set[int] = set()
    with Client(address) as parent:
        parent.send({"ready": True})
        while (request := parent.recv()).get("round") is not None:
            batch = request["batch"]
            run = to_plain(benchmark_batch(llm, prompts, spec, batch, warm_up=batch not in warmed, settle=True,
                                           round_index=request["round"]))
            warmed.add(batch)
            rounds.setdefault(request["round"], []).append(run)
            parent.send({"done": request["round"], "batches": [run]})
    return [{"index": index, "batches": batches} for index, batches in rounds.items()]


def main(spec_path: str, result_path: str, address: str | None = None) -> int:
    result: dict = {"ok": False}
    stage, watch = Phase.IMPORT, PhaseWatch()
    try:
        from vllm import LLM
        from vllm.inputs import TokensPrompt

        from dflash_fi.engine.generate import benchmark_round, generate
        from dflash_fi.engine.spec import RunSpec, engine_arguments
        from dflash_fi.engine.workloads import workload_requests
        from dflash_fi.models import load_prompts
        from dflash_fi.reference.tokenizer import prompt_ids

        spec = RunSpec.from_json(json.loads(Path(spec_path).read_text()))
        texts = load_prompts(spec.prompts_file)
        # Local (byte-level) models see prompts as in training; hub models tokenize the text themselves.
        local_target = Path(spec.target).is_dir()

        def as_prompt(text):
            return TokensPrompt(prompt_token_ids=prompt_ids(text)) if local_target else text

        watch.__enter__()  # for the life of this process
        stage = Phase.ENGINE_START
        t0 = time.time()
        llm = LLM(**engine_arguments(spec))
        result["engine_start_s"] = round(time.time() - t0, 2)
        backends = llm.collective_rpc(instruments.attention_backends)[0]
        result["target_backends"], result["draft_backends"] = backends["target"], backends["draft"]
        graphs = llm.collective_rpc(instruments.cudagraph_state)[0]
        result["cudagraph_mode"], result["max_cudagraph_capture_size"] = graphs["mode"], graphs["max_capture_size"]
        result["flash_attn_version"] = llm.collective_rpc(instruments.flash_attn_version)[0]
        result["async_scheduling"] = llm.collective_rpc(instruments.async_scheduling)[0]
        llm.collective_rpc(instruments.build_times, kwargs={"install": True})
        llm.collective_rpc(instruments.step_times, kwargs={"install": True})

        stage = Phase.GENERATION
        detokenize = spec.load_format != "dummy"
        bench_prompts = [as_prompt(t) for t in texts[: spec.num_prompts]]
        if address:
            result["rounds"] = _serve(llm, bench_prompts, spec, address)
        elif spec.bench is not None:
            result["rounds"] = [{"index": 1, "batches": [to_plain(b) for b in benchmark_round(llm, bench_prompts, spec,
                                                                                               warm_up=True)]}]
        else:
            result["generates"] = {}
            # plans watched where outputs are checked, not where host time is measured
            watch_plans = not os.environ.get(instruments.PROFILE_BUILDS_ENV)
            if watch_plans:
                llm.collective_rpc(instruments.plan_watch, kwargs={"install": True})
            if os.environ.get(instruments.PROFILE_BUILDS_ENV):  # profile steady builds: compiles happen before
                first = workload_requests(spec.workloads[0], texts, spec.num_prompts, spec.max_new_tokens)
                generate(llm, [(as_prompt(t), min(n, 32)) for t, n in first], spec.run.speculative, detokenize=False)
                llm.collective_rpc(instruments.reset_build_profiles)
            for workload in spec.workloads:
                requests = [(as_prompt(t), n) for t, n in
                            workload_requests(workload, texts, spec.num_prompts, spec.max_new_tokens)]
                run = generate(llm, requests, spec.run.speculative, spec.logprobs, detokenize, watch_plans)
                result["generates"][workload.value] = to_plain(run)
        if os.environ.get(instruments.PROFILE_BUILDS_ENV):
            result["build_profiles"] = llm.collective_rpc(instruments.build_profiles)[0]
        result["ok"] = True
    except BaseException as exc:  # the record must say what failed, whatever it was
        result["failure"] = {"type": type(exc).__name__, "message": str(exc)[:2000],
                             "phase": (watch.failed_in or stage).value, "traceback_tail": traceback.format_exc()[-2500:]}
    result["flash_attn_log_lines"] = _flash_attn_log_lines(os.environ.get("DFLASH_FI_LOG_FILE"))
    Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
