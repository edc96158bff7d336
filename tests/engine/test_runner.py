"""The runner's record: what vLLM selected, what failed and where, and vLLM's own spec-decode counters."""

from pathlib import Path

import pytest

from dflash_fi.engine import child, generate, instruments
from dflash_fi.engine.runner import run
from dflash_fi.engine.spec import RunSpec, engine_arguments, engine_call
from dflash_fi.errors import BadInput, MissingModelFiles, UnknownStep


def test_backends_split_into_target_and_draft_layers():
    layers = {f"model.layers.{i}.self_attn.attn": "vllm...FlashAttentionBackend" for i in range(4)}
    layers.update({f"model.layers.{i}.self_attn.attn": "dflash_fi.patched.step3.FlashInferBackend" for i in (4, 5)})
    assert child._split_backends(layers, 4) == {
        "target": ["vllm...FlashAttentionBackend"], "draft": ["dflash_fi.patched.step3.FlashInferBackend"]}


def test_failure_phase():
    selection = ValueError("Selected backend AttentionBackendEnum.FLASHINFER is not valid for this configuration.")
    assert child._phase(selection, "engine start") == "selection"
    namespace = {}
    exec(compile("def propose():\n    raise AssertionError('no non-causal support')\n",
                 "/site-packages/vllm/v1/spec_decode/dflash.py", "exec"), namespace)
    try:
        namespace["propose"]()
    except AssertionError as exc:
        assert child._phase(exc, "generation") == "first draft step"
    assert child._phase(RuntimeError("oom"), "generation") == "generation"


class BuilderDouble:
    """Stands in for an attention metadata builder (real ones need a GPU): build() returns its argument."""

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        return common_attn_metadata

    def build_for_drafting(self, common_attn_metadata, draft_index):
        return self.build(0, common_attn_metadata, fast_build=True)  # as vLLM's base class does


def _worker_double(target, draft_in_runner, drafter, largest_graph=512):
    """A GPU worker's model runner as `build_times` sees it: attention groups of builders, and the drafter's."""
    from types import SimpleNamespace as NS

    def group(name, layers, builder):
        return NS(backend=NS(get_name=lambda: name), layer_names=layers, metadata_builders=[builder])
    runner = NS(attn_groups=[[group("FLASH_ATTN", ["t0", "t1"], target), group("FLASHINFER", ["d0"], draft_in_runner)]],
                drafter=NS(draft_attn_groups=[group("FLASHINFER", ["d0"], drafter)]),
                compilation_config=NS(max_cudagraph_capture_size=largest_graph))
    return NS(model_runner=runner)


def test_metadata_build_timers_count_each_builder_size_it_and_reset():
    from types import SimpleNamespace as NS

    target, draft_in_runner, drafter = BuilderDouble(), BuilderDouble(), BuilderDouble()
    worker = _worker_double(target, draft_in_runner, drafter)
    assert instruments.build_times(worker, install=True) == {}
    small, big = NS(num_actual_tokens=64), NS(num_actual_tokens=600)
    assert target.build(0, small) is small  # the wrapper hands back what build() returns
    target.build(common_prefix_len=0, common_attn_metadata=big)  # the runner passes keywords
    draft_in_runner.build(0, small)
    for _ in range(3):
        drafter.build_for_drafting(small, 0)
    times = instruments.build_times(worker)
    assert {where: entry[0] for where, entry in times.items()} == {
        "target step, FLASH_ATTN (2 layers)": 2, "target step, FLASHINFER (1 layers)": 1,
        "draft step, FLASHINFER (1 layers)": 3}
    assert times["target step, FLASH_ATTN (2 layers)"][2:] == [600, 1]  # most tokens, builds above the 512 graph
    assert all(entry[1] >= 0 for entry in times.values())
    assert instruments.build_times(worker) == {}  # read once, then reset
    instruments.build_times(worker, install=True)  # a second install wraps nothing twice
    drafter.build_for_drafting(small, 0)
    assert instruments.build_times(worker) == {"draft step, FLASHINFER (1 layers)": [1, pytest.approx(0, abs=1), 64, 0]}


def test_profiled_builds_say_where_the_time_went(monkeypatch):
    monkeypatch.setenv(instruments.PROFILE_BUILDS_ENV, "1")
    drafter = BuilderDouble()
    worker = _worker_double(BuilderDouble(), BuilderDouble(), drafter)
    instruments.build_times(worker, install=True)
    for _ in range(2):
        drafter.build_for_drafting("m", 0)
    profiles = instruments.build_profiles(worker)
    assert list(profiles) == ["draft step, FLASHINFER (1 layers)"]
    assert "function calls" in profiles["draft step, FLASHINFER (1 layers)"] and "build" in profiles["draft step, FLASHINFER (1 layers)"]


def test_acceptance_between_two_readings_of_vllms_counters():
    from vllm.v1.metrics.reader import Counter, Vector

    class LLMStub:  # only get_metrics() is used; the metric objects are vLLM's own
        def __init__(self, drafts, accepted, per_pos):
            self.metrics = [Counter("vllm:spec_decode_num_drafts", {}, drafts),
                            Counter("vllm:spec_decode_num_draft_tokens", {}, 15 * drafts),
                            Counter("vllm:spec_decode_num_accepted_tokens", {}, accepted),
                            Vector("vllm:spec_decode_num_accepted_tokens_per_pos", {}, per_pos)]

        def get_metrics(self):
            return self.metrics

    before = generate.counters(LLMStub(4, 10, [4, 3, 2, 1] + [0] * 11))
    after = generate.counters(LLMStub(14, 38, [13, 10, 7, 5, 3] + [0] * 10))
    m = generate.acceptance(before, after)  # this generate alone: 10 drafts, 28 accepted
    assert m["num_drafts"] == 10 and m["tau"] == pytest.approx(3.8)
    assert m["per_position_acceptance"][:3] == [0.9, 0.7, 0.5]
    nothing = generate.acceptance(after, after)
    assert nothing["tau"] is None and nothing["per_position_acceptance"] is None


@pytest.mark.parametrize("change, error, message", [
    ({"draft_backend": "TRITON_ATTN"}, BadInput, "draft backend 'TRITON_ATTN'"),
    ({"target_backend": "TRITON_ATTN"}, BadInput, "target backend 'TRITON_ATTN'"),
    ({"kv_cache_dtype": "nvfp4"}, BadInput, "KV cache dtype 'nvfp4'"),
    ({"drafter": "./missing"}, MissingModelFiles, "neither an existing model directory nor a hub id"),
    ({"num_gpu_blocks": 0}, BadInput, "--num-gpu-blocks"),
    ({"num_prompts": 0}, BadInput, "--prompts must be at least 1"),
    ({"max_new_tokens": -1}, BadInput, "--max-new-tokens must be at least 1"),
    ({"batch_sizes": (1, 64), "num_prompts": 32}, BadInput, "a batch size"),
    ({"step": 9}, UnknownStep, "unknown step 9"),
    ({"gpu_memory_utilization": 1.5}, BadInput, "--gpu-memory-utilization"),
    ({"flash_attn_version": 1}, BadInput, "FlashAttention version 1"),
    ({"workloads": ("uniform", "long")}, BadInput, "workloads"),
    ({"max_num_seqs": 0}, BadInput, "--max-num-seqs"),
])
def test_bad_run_specs_fail_fast(change, error, message):
    with pytest.raises(error, match=message):
        RunSpec(label="x", **change).validate()


def test_a_failed_engine_still_leaves_a_complete_record():
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine where vLLM cannot start an engine")
    record = run(RunSpec(label="cpu", step=3, num_prompts=1, max_new_tokens=4, timeout_s=300))
    assert record["ok"] is False and record["error"]["phase"] in ("engine start", "selection")
    assert record["error"]["type"] and record["error"]["message"]
    assert record["versions"]["vllm"] == "0.22.1" and record["spec"]["step"] == 3
    assert set(record["models"]["target"]["weights_sha256"]) == {"model.safetensors"}
    log = Path(record["log_file"])
    assert log.is_file() and "dflash-fi run 'cpu'" in log.read_text()  # the engine's output went to its log


def test_near_ties_are_the_positions_where_the_target_hesitated():
    from types import SimpleNamespace as NS

    def position(*logprobs):  # vLLM's per-position dict: token id -> Logprob(logprob=...)
        return {i: NS(logprob=lp) for i, lp in enumerate(logprobs)}
    out = NS(outputs=[NS(logprobs=[position(-0.1, -5.0), position(-0.6, -0.7), position(-0.2, -1.1, -2.0)])])
    assert generate.near_ties(out) == [[1, 0.1], [2, 0.9]]
    assert generate.near_ties(out, cap=0.5) == [[1, 0.1]]


def test_the_engine_call_a_notebook_shows_is_the_one_the_engine_makes():
    from dflash_fi.evidence import plan as P

    spec = next(s for s in P.walkthrough_plan() if s.label == P.RTX4090_STEP4)
    kwargs = engine_arguments(spec)
    assert kwargs["attention_config"] == {"flash_attn_version": 2} and kwargs["kv_cache_dtype"] == "fp8"
    assert "attention_backend" not in kwargs["speculative_config"]  # left to vLLM's selector
    text = engine_call(spec)
    assert "os.environ['DFLASH_FI_STEP'] = '4'" in text and "attention_config={'flash_attn_version': 2}," in text
    assert "model='dflash_fi/models/target'," in text and str(spec.target) not in text  # the same on every machine
    graphs = next(s for s in P.walkthrough_plan() if s.label == P.graphs_fi_target_label(7))
    assert engine_arguments(graphs)["enforce_eager"] is False and engine_arguments(graphs)["attention_backend"] == "FLASHINFER"
    assert "'attention_backend': 'FLASHINFER'" in engine_call(graphs)
