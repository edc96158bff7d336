"""What each step claims about CUDA graphs, and what vLLM 0.22.1's runner resolves from the claims (on the CPU)."""

import pytest

from dflash_fi.lab.graphs import cudagraph_claims
from dflash_fi.vocabulary import BLACKWELL, HOPPER, RTX_4090


@pytest.mark.step4
@pytest.mark.parametrize("capability, flash_attn", [(RTX_4090, "UNIFORM_BATCH"), (HOPPER, "ALWAYS")])  # FA2, FA3
def test_step4_flashinfer_draft_costs_the_engine_its_full_graphs(capability, flash_attn):
    claims = cudagraph_claims(4, capability)
    assert claims["flashinfer_claim"] == "UNIFORM_SINGLE_TOKEN_DECODE" and claims["flash_attn_claim"] == flash_attn
    assert claims["requested_mode"] == "FULL_AND_PIECEWISE" and claims["resolved_mode"] == "PIECEWISE"
    # One warning, where vLLM downgrades the mode (as the engine logs it), the same one on every GPU.
    from vllm.config import CompilationConfig

    [warning] = claims["vllm_warnings"]
    resolve = CompilationConfig.resolve_cudagraph_mode_and_sizes.__code__
    assert (warning.path, warning.function) == (resolve.co_filename, resolve.co_name) and warning.hunk is None
    assert cudagraph_claims(4, RTX_4090 if capability == HOPPER else HOPPER)["vllm_warnings"] == [warning]


@pytest.mark.step5
def test_step5_no_uniform_batch_claim_for_non_causal_on_blackwell():
    """#48167: with TRTLLM, step 4 claims UNIFORM_BATCH even when asked with the draft's (non-causal) config."""
    four, five = cudagraph_claims(4, BLACKWELL, trtllm=True), cudagraph_claims(5, BLACKWELL, trtllm=True)
    assert four["flashinfer_claim_draft_config"] == "UNIFORM_BATCH"
    assert five["flashinfer_claim_draft_config"] == "UNIFORM_SINGLE_TOKEN_DECODE"
    assert five["flashinfer_claim"] == four["flashinfer_claim"] == "UNIFORM_BATCH"  # causal claim unchanged
    assert five["resolved_mode"] == four["resolved_mode"] == "FULL_AND_PIECEWISE"


@pytest.mark.step6
@pytest.mark.parametrize("capability, trtllm", [(RTX_4090, False), (HOPPER, False), (BLACKWELL, True)])
def test_step6_keeps_full_and_piecewise(capability, trtllm):
    """The engine keeps its full graphs with a FLASH_ATTN target and with a FlashInfer one; a draft config (a DFlash
    draft block, which no full graph replays in vLLM 0.22.1) keeps step 5's claim."""
    claims = cudagraph_claims(6, capability, trtllm=trtllm)
    assert claims["flashinfer_claim"] == "UNIFORM_BATCH"
    assert claims["flashinfer_claim_draft_config"] == "UNIFORM_SINGLE_TOKEN_DECODE"
    assert claims["resolved_mode"] == claims["resolved_mode_flashinfer_target"] == "FULL_AND_PIECEWISE"
    assert claims["vllm_warnings"] == []


@pytest.mark.step6
@pytest.mark.parametrize("step", [6, 8])
def test_the_graph_wrappers_claim_stops_where_no_graph_wrapper_exists(step):
    """fp8 KV has CUDA-graph prefill wrappers; DCP and an NVFP4 cache have none, so they keep step 5's claim: asked
    with an engine config that really has decode context parallelism, or an NVFP4 cache."""
    import copy

    from vllm.config import set_current_vllm_config

    from dflash_fi.lab.routing import RoutingLab

    assert cudagraph_claims(step, HOPPER, kv_cache_dtype="fp8")["flashinfer_claim"] == "UNIFORM_BATCH"
    with RoutingLab(step, HOPPER, cuda_graphs=True) as lab:
        builder = lab.module.FlashInferBackend.get_builder_cls()
        dcp, nvfp4 = copy.deepcopy(lab.vllm_config), copy.deepcopy(lab.vllm_config)
        dcp.parallel_config.decode_context_parallel_size = 2
        nvfp4.cache_config.cache_dtype = "nvfp4"
        with set_current_vllm_config(lab.vllm_config):
            claims = {name: builder.get_cudagraph_support(config, lab.kv_cache_spec).name
                      for name, config in (("plain", lab.vllm_config), ("dcp", dcp), ("nvfp4", nvfp4))}
    assert claims == {"plain": "UNIFORM_BATCH", "dcp": "UNIFORM_SINGLE_TOKEN_DECODE", "nvfp4": "UNIFORM_SINGLE_TOKEN_DECODE"}


@pytest.mark.step4
@pytest.mark.step5
@pytest.mark.parametrize("step", [4, 5])
def test_before_step6_a_flashinfer_target_loses_the_full_graphs_too(step):
    claims = cudagraph_claims(step, HOPPER)
    assert claims["resolved_mode"] == claims["resolved_mode_flashinfer_target"] == "PIECEWISE"


@pytest.mark.step7
@pytest.mark.step8
@pytest.mark.parametrize("step", [7, 8])
@pytest.mark.parametrize("capability, trtllm", [(HOPPER, False), (BLACKWELL, True)])
def test_later_steps_claim_what_step6_claims(step, capability, trtllm):
    assert cudagraph_claims(step, capability, trtllm) == {**cudagraph_claims(6, capability, trtllm), "step": step}
