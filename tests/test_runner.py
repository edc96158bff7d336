"""The runner's record: what vLLM selected, what failed and where, and vLLM's own spec-decode counters."""

import pytest

from dflash_fi import engine_child
from dflash_fi.runner import RunSpec, run


def test_backends_split_into_target_and_draft_layers():
    layers = {f"model.layers.{i}.self_attn.attn": "vllm...FlashAttentionBackend" for i in range(4)}
    layers.update({f"model.layers.{i}.self_attn.attn": "dflash_fi.patched.step3.FlashInferBackend" for i in (4, 5)})
    assert engine_child._split_backends(layers, 4) == {
        "target": ["vllm...FlashAttentionBackend"], "draft": ["dflash_fi.patched.step3.FlashInferBackend"]}


def test_failure_phase():
    selection = ValueError("Selected backend AttentionBackendEnum.FLASHINFER is not valid for this configuration.")
    assert engine_child._phase(selection, "engine start") == "selection"
    namespace = {}
    exec(compile("def propose():\n    raise AssertionError('no non-causal support')\n",
                 "/site-packages/vllm/v1/spec_decode/dflash.py", "exec"), namespace)
    try:
        namespace["propose"]()
    except AssertionError as exc:
        assert engine_child._phase(exc, "generation") == "first draft step"
    assert engine_child._phase(RuntimeError("oom"), "generation") == "generation"


def test_acceptance_from_vllms_spec_decode_metrics():
    from vllm.v1.metrics.reader import Counter, Vector

    class LLMStub:  # only get_metrics() is used; the metric objects are vLLM's own
        def get_metrics(self):
            return [Counter("vllm:spec_decode_num_drafts", {}, 10),
                    Counter("vllm:spec_decode_num_draft_tokens", {}, 150),
                    Counter("vllm:spec_decode_num_accepted_tokens", {}, 28),
                    Vector("vllm:spec_decode_num_accepted_tokens_per_pos", {}, [9, 7, 5, 4, 3] + [0] * 10)]

    m = engine_child._metrics(LLMStub())
    assert m["tau"] == pytest.approx(3.8) and m["per_position_acceptance"][:2] == [0.9, 0.7]


def test_bad_run_specs_fail_fast():
    with pytest.raises(ValueError, match="draft backend 'TRITON_ATTN'"):
        RunSpec(label="x", draft_backend="TRITON_ATTN").validate()
    with pytest.raises(ValueError, match="KV cache dtype 'nvfp4'"):
        RunSpec(label="x", kv_cache_dtype="nvfp4").validate()
    with pytest.raises(FileNotFoundError, match="neither an existing model directory nor a hub id"):
        RunSpec(label="x", drafter="./missing").validate()
    with pytest.raises(ValueError, match="--num-gpu-blocks must be at least 1"):
        RunSpec(label="x", num_gpu_blocks=0).validate()


def test_a_failed_engine_still_leaves_a_complete_record():
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine where vLLM cannot start an engine")
    record = run(RunSpec(label="cpu", step=3, num_prompts=1, max_new_tokens=4, timeout_s=300))
    assert record["ok"] is False and record["error"]["phase"] in ("engine start", "selection")
    assert record["error"]["type"] and record["error"]["message"]
    assert record["versions"]["vllm"] == "0.22.1" and record["spec"]["step"] == 3
    assert set(record["models"]["target"]["weights_sha256"]) == {"model.safetensors"}
