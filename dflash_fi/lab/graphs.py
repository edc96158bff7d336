"""What each step's FlashInfer claims about CUDA graphs, and the mode vLLM's model runner resolves from it.

vLLM 0.22.1's runner (`GPUModelRunner._check_and_update_cudagraph_mode`) asks the builder class of every
attention backend in the engine, draft layers included, for its `get_cudagraph_support(vllm_config, spec)`
with the engine's config, takes the weakest answer and hands it to
`CompilationConfig.resolve_cudagraph_mode_and_sizes`. With speculative decoding, anything below
`UNIFORM_BATCH` turns `FULL_AND_PIECEWISE` into `PIECEWISE` for the whole engine. The drafter itself
captures piecewise graphs only in 0.22.1 (`SpecDecodeBaseProposer.initialize_cudagraph_keys`), so its
attention runs eagerly between graph pieces whatever the backend claims.

The same functions run here on the CPU (under `pretend_gpu`, builders from `RoutingLab`), and vLLM's
own warnings come back with the answer, as logged (where, and what they say).
"""

from __future__ import annotations

import copy
import logging

from dflash_fi.lab.routes import WarningCollector
from dflash_fi.lab.routing import RoutingLab
from dflash_fi.vocabulary import HOPPER, NUM_SPECULATIVE_TOKENS, sm

SPEC_DECODE_QUERY_LEN = 1 + NUM_SPECULATIVE_TOKENS


def cudagraph_claims(step: int, capability=HOPPER, trtllm: bool = False, kv_cache_dtype: str = "auto") -> dict:
    """FlashInfer's claim (engine config and draft config), FLASH_ATTN's, and the engine's resolved mode
    for a FLASHINFER draft with a FLASH_ATTN target (`resolved_mode`) and with a FLASHINFER target
    (`resolved_mode_flashinfer_target`), as vLLM 0.22.1's runner resolves it. `vllm_warnings`: what vLLM logged
    while resolving the first (`LoggedWarning`s)."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    with (RoutingLab(step, capability, trtllm=trtllm, kv_cache_dtype=kv_cache_dtype, cuda_graphs=True) as lab,
          set_current_vllm_config(lab.vllm_config)):
        flashinfer = lab.module.FlashInferBackend.get_builder_cls()
        flash_attn = AttentionBackendEnum.FLASH_ATTN.get_class().get_builder_cls()
        claims = {
            "FlashAttentionBackend": flash_attn.get_cudagraph_support(lab.vllm_config, lab.kv_cache_spec),
            "FlashInferBackend": flashinfer.get_cudagraph_support(lab.vllm_config, lab.kv_cache_spec),
        }
        draft_claim = flashinfer.get_cudagraph_support(lab.draft_config, lab.kv_cache_spec)
        weakest = min(claims, key=lambda name: claims[name].value)
        requested = lab.vllm_config.compilation_config.cudagraph_mode

        def resolve(backend):  # on a copy: resolving rewrites the config's mode and sizes
            compilation = copy.deepcopy(lab.vllm_config.compilation_config)
            return compilation.resolve_cudagraph_mode_and_sizes(
                claims[backend], backend, uniform_decode_query_len=SPEC_DECODE_QUERY_LEN)
        warnings = WarningCollector()
        compilation_logger = logging.getLogger("vllm.config.compilation")
        compilation_logger.addHandler(warnings)
        try:
            resolved = resolve(weakest)
        finally:
            compilation_logger.removeHandler(warnings)
        # With a FlashInfer target every layer, the draft's included, is FlashInfer's, asked with the same config.
        resolved_flashinfer_target = resolve("FlashInferBackend")
    return {
        "step": step, "capability": sm(capability), "trtllm_available": trtllm, "kv_cache_dtype": kv_cache_dtype,
        "flashinfer_claim": claims["FlashInferBackend"].name,
        "flashinfer_claim_draft_config": draft_claim.name,
        "flash_attn_claim": claims["FlashAttentionBackend"].name,
        "requested_mode": requested.name, "resolved_mode": resolved.name,
        "resolved_mode_flashinfer_target": resolved_flashinfer_target.name,
        "vllm_warnings": warnings.warnings,
    }


def format_claims(rows: list[dict]) -> str:
    lines = ["| step | SM | TRTLLM | FlashInfer claims (engine config) | (draft config) | engine resolves |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['step']} | {r['capability']} | {'yes' if r['trtllm_available'] else 'no'} | "
                     f"{r['flashinfer_claim']} | {r['flashinfer_claim_draft_config']} | {r['resolved_mode']} |")
    return "\n".join(lines)
