"""The runner's record: what vLLM selected, what failed and where, and vLLM's own spec-decode counters."""

from dataclasses import replace
from pathlib import Path

import pytest

from dflash_fi.engine import generate, instruments
from dflash_fi.engine.child import PhaseWatch
from dflash_fi.engine.identity import RunId, label
from dflash_fi.engine.records import EngineRecord, Phase, Role
from dflash_fi.engine.runner import run
from dflash_fi.engine.spec import BenchPlan, RunSpec, engine_arguments, engine_call
from dflash_fi.errors import BadInput, MissingModelFiles, UnknownStep


def test_a_refused_selection_is_noted_where_it_happens():
    """vLLM's real selector (on a pretended SM 9.0) refuses stock FlashInfer for non-causal attention: the watch
    says so from inside the selector, whatever the message says; a refusal elsewhere is not a selection."""
    import vllm.v1.spec_decode.llm_base_proposer  # noqa: F401 - imported before the pretended GPU's doubled ops
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    from dflash_fi.lab.pretend_gpu import pretend_gpu
    from dflash_fi.lab.selector import _selector_config
    from dflash_fi.vocabulary import HOPPER

    with pretend_gpu(HOPPER) as platform, PhaseWatch() as watch:
        platform.get_attn_backend_cls(AttentionBackendEnum.FLASH_ATTN, _selector_config("auto", True))
        assert watch.failed_in is None
        with pytest.raises(ValueError, match="non-causal"):
            platform.get_attn_backend_cls(AttentionBackendEnum.FLASHINFER, _selector_config("auto", True))
        assert watch.failed_in is Phase.SELECTION
    assert "watched_select" not in repr(type(platform).get_attn_backend_cls)  # restored on leaving


def test_a_failing_draft_step_is_noted_as_the_first_or_a_later_one():
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    original = SpecDecodeBaseProposer.propose
    outcomes = iter([None, AssertionError("no non-causal support")])

    def propose(self, *args, **kwargs):  # stands in for the drafter's forward: vLLM's needs a GPU
        outcome = next(outcomes)
        if outcome is not None:
            raise outcome

    SpecDecodeBaseProposer.propose = propose
    try:
        with PhaseWatch() as watch:
            SpecDecodeBaseProposer.propose(object())
            with pytest.raises(AssertionError):
                SpecDecodeBaseProposer.propose(object())
        assert watch.failed_in is Phase.DRAFT_STEP and watch.proposed
        with PhaseWatch() as first:
            outcomes = iter([AssertionError("no non-causal support")])
            with pytest.raises(AssertionError):
                SpecDecodeBaseProposer.propose(object())
        assert first.failed_in is Phase.FIRST_DRAFT_STEP
    finally:
        SpecDecodeBaseProposer.propose = original


class BuilderDouble:
    """Stands in for an attention metadata builder (real ones need a GPU): build() returns its argument."""

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        return common_attn_metadata

    def build_for_drafting(self, common_attn_metadata, draft_index):
        return self.build(0, common_attn_metadata, fast_build=True)  # as vLLM's base class does


def _worker_double(target, draft_in_runner, drafter, largest_graph=512):
    """A GPU worker's model runner as the instruments see it: attention groups of builders, the drafter's."""
    from types import SimpleNamespace as NS

    def group(name, layers, builder):
        return NS(backend=NS(get_name=lambda: name), layer_names=layers, metadata_builders=[builder])
    runner = NS(attn_groups=[[group("FLASH_ATTN", ["t0", "t1"], target), group("FLASHINFER", ["d0"], draft_in_runner)]],
                drafter=NS(draft_attn_groups=[group("FLASHINFER", ["d0"], drafter)]),
                compilation_config=NS(max_cudagraph_capture_size=largest_graph),
                execute_model=lambda *args: "stepped")
    return NS(model_runner=runner)


def test_metadata_build_timers_count_each_builder_size_it_and_reset():
    from types import SimpleNamespace as NS

    target, draft_in_runner, drafter = BuilderDouble(), BuilderDouble(), BuilderDouble()
    worker = _worker_double(target, draft_in_runner, drafter)
    assert instruments.build_times(worker, install=True) == []
    small, big = NS(num_actual_tokens=64), NS(num_actual_tokens=600)
    assert target.build(0, small) is small  # the wrapper hands back what build() returns
    target.build(common_prefix_len=0, common_attn_metadata=big)  # the runner passes keywords
    draft_in_runner.build(0, small)
    for _ in range(3):
        drafter.build_for_drafting(small, 0)
    builds = generate.builds_of(instruments.build_times(worker))
    counts = {(b.key.role, b.key.backend, b.key.layers): b.builds for b in builds}
    assert counts == {(Role.TARGET, "FLASH_ATTN", 2): 2, (Role.TARGET, "FLASHINFER", 1): 1,
                      (Role.DRAFT, "FLASHINFER", 1): 3}
    flash_attn = next(b for b in builds if b.key.backend == "FLASH_ATTN")
    assert (flash_attn.largest_tokens, flash_attn.above_largest_graph) == (600, 1)  # above the 512-token graph
    assert instruments.build_times(worker) == []  # read once, then reset
    instruments.build_times(worker, install=True)  # a second install wraps nothing twice
    drafter.build_for_drafting(small, 0)
    assert [b["builds"] for b in instruments.build_times(worker)] == [1]


def test_step_times_are_the_intervals_between_model_runner_steps():
    worker = _worker_double(BuilderDouble(), BuilderDouble(), BuilderDouble())
    assert instruments.step_times(worker, install=True) == []
    for _ in range(4):
        assert worker.model_runner.execute_model() == "stepped"
    intervals = instruments.step_times(worker)
    assert len(intervals) == 3 and all(i >= 0 for i in intervals)
    assert instruments.step_times(worker) == []


def test_profiled_builds_say_which_functions_took_the_time(monkeypatch):
    monkeypatch.setenv(instruments.PROFILE_BUILDS_ENV, "1")
    drafter = BuilderDouble()
    worker = _worker_double(BuilderDouble(), BuilderDouble(), drafter)
    instruments.build_times(worker, install=True)
    for _ in range(2):
        drafter.build_for_drafting("m", 0)
    profiles = instruments.build_profiles(worker)
    assert [p["key"] for p in profiles] == [{"role": "draft step", "backend": "FLASHINFER", "layers": 1}]
    functions = {f["function"]: f for f in profiles[0]["functions"]}
    assert functions["build"]["calls"] == 2 and functions["build"]["file"].endswith("test_runner.py")


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
    assert m.num_drafts == 10 and m.tau == pytest.approx(3.8)
    assert m.per_position[:3] == (0.9, 0.7, 0.5)
    nothing = generate.acceptance(after, after)
    assert nothing.tau is None and nothing.per_position == ()


@pytest.mark.parametrize("change, error, message", [
    ({"run": RunId(draft_backend="TRITON_ATTN")}, BadInput, "draft backend 'TRITON_ATTN'"),
    ({"run": RunId(target_backend="TRITON_ATTN")}, BadInput, "target backend 'TRITON_ATTN'"),
    ({"run": RunId(kv_cache_dtype="nvfp4")}, BadInput, "KV cache dtype 'nvfp4'"),
    ({"run": RunId(step=99)}, UnknownStep, "unknown step 99"),
    ({"run": RunId(flash_attn_version=1)}, BadInput, "FlashAttention version 1"),
    ({"drafter": "./missing"}, MissingModelFiles, "neither an existing model directory nor a hub id"),
    ({"num_gpu_blocks": 0}, BadInput, "--num-gpu-blocks"),
    ({"num_prompts": 0}, BadInput, "number of prompts .* must be at least 1"),
    ({"num_prompts": 1000}, BadInput, "at most 64, not 1000"),  # more than the prompt file holds
    ({"max_new_tokens": -1}, BadInput, "--max-new-tokens must be at least 1"),
    ({"bench": BenchPlan((1, 64)), "num_prompts": 32}, BadInput, "a batch size"),
    ({"bench": BenchPlan((1, 8), batch1_prompts=40), "num_prompts": 32}, BadInput, "prompts decoded alone"),
    ({"gpu_memory_utilization": 1.5}, BadInput, "--gpu-memory-utilization"),
    ({"workloads": ("uniform", "long")}, BadInput, "workloads"),
    ({"max_num_seqs": 0}, BadInput, "--max-num-seqs"),
])
def test_bad_run_specs_fail_fast(change, error, message):
    with pytest.raises(error, match=message):
        RunSpec(**{"run": RunId(step=3), **change}).validate()


def test_a_spec_travels_to_the_engine_process_and_back_unchanged():
    spec = RunSpec(RunId(step=7, cuda_graphs=True, kv_cache_dtype="fp8"), workloads=("uniform", "mixed"),
                   bench=BenchPlan((1, 8), batch1_prompts=4)).validate()
    assert RunSpec.from_json(spec.to_json()) == spec
    with pytest.raises(Exception):
        spec.num_prompts = 3  # frozen: a spec is changed by making another


def test_a_failed_engine_still_leaves_a_complete_record():
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine where vLLM cannot start an engine")
    spec = RunSpec(RunId(step=3), num_prompts=1, max_new_tokens=4, timeout_s=300)
    record = run(spec)
    assert isinstance(record, EngineRecord) and record.ok is False
    assert record.failure.phase in (Phase.ENGINE_START, Phase.SELECTION) and record.failure.type and record.failure.message
    assert record.provenance.versions["vllm"] == "0.22.1" and record.run == spec.run
    assert set(record.provenance.models["target"]["weights_sha256"]) == {"model.safetensors"}
    log = Path(record.provenance.log_file)
    assert log.is_file() and f"dflash-fi run {label(spec.run)!r}" in log.read_text()  # the engine's output, its log
    assert EngineRecord.from_json(record.to_json()) == record  # what the ledger keeps is the record


def test_a_hung_engine_is_reported_with_the_time_it_was_given(tmp_path):
    """The engine double comes up and then waits for a round that never comes: the runner stops waiting when told."""
    from multiprocessing.connection import Listener

    from dflash_fi.engine.runner import EngineProcess

    address = str(tmp_path / "engine.sock")
    with Listener(address, family="AF_UNIX") as listener:
        engine = EngineProcess(RunSpec(RunId(step=3), num_prompts=1, timeout_s=900), log_path=tmp_path / "log",
                               address=address, module="dflash_fi.lab.engine_double")
        with listener.accept() as connection:
            assert connection.recv() == {"ready": True}
            record = engine.finish(timeout_s=2)
    assert record.failure.phase is Phase.PROCESS and "timed out after 2 s" in record.failure.message


def test_near_ties_are_the_positions_where_the_target_hesitated():
    from types import SimpleNamespace as NS

    def position(*logprobs):  # vLLM's per-position dict: token id -> Logprob(logprob=...)
        return {i: NS(logprob=lp) for i, lp in enumerate(logprobs)}
    out = NS(outputs=[NS(logprobs=[position(-0.1, -5.0), position(-0.6, -0.7), position(-0.2, -1.1, -2.0)])])
    assert generate.near_ties(out) == ((1, 0.1), (2, 0.9))
    assert generate.near_ties(out, cap=0.5) == ((1, 0.1),)


def test_the_engine_call_a_notebook_shows_is_the_one_the_engine_makes():
    from dflash_fi.evidence import plan as P

    spec = next(s for s in P.walkthrough_plan() if s.run == P.RTX4090_STEP4)
    kwargs = engine_arguments(spec)
    assert kwargs["attention_config"] == {"flash_attn_version": 2} and kwargs["kv_cache_dtype"] == "fp8"
    assert "attention_backend" not in kwargs["speculative_config"]  # left to vLLM's selector
    text = engine_call(spec)
    assert "os.environ['DFLASH_FI_STEP'] = '4'" in text and "attention_config={'flash_attn_version': 2}," in text
    assert "model='dflash_fi/models/target'," in text and str(spec.target) not in text  # the same on every machine
    graphs = next(s for s in P.walkthrough_plan() if s.run == P.graphs_fi_target_run(7))
    assert engine_arguments(graphs)["enforce_eager"] is False and engine_arguments(graphs)["attention_backend"] == "FLASHINFER"
    assert "'attention_backend': 'FLASHINFER'" in engine_call(replace(graphs))
