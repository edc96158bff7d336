"""The kernel benchmark's XQA rows: FlashInfer's XQA kernel on a DFlash draft block, as step 9 calls it."""

from __future__ import annotations

from dflash_fi.bench.kernels import Inputs, Kernel, NotBuilt


def xqa_kernel(inputs: Inputs) -> Kernel:
    """FlashInfer's XQA on a draft block, as step 9's forward() calls it: no plan, the mask made once."""
    import torch
    from flashinfer.decode import xqa_batch_decode_with_kv_cache

    from dflash_fi.steps import backend_module

    s, step9 = inputs.shape, backend_module(9)
    if s.kv_dtype != "auto":
        raise NotBuilt("step 9 runs FP8 caches on FA2: XQA's Hopper FP8 kernel masks short blocks causally")
    mask = step9._xqa_non_causal_block_mask(s.batch, s.query_len, torch.device("cuda"))
    workspace = step9._get_trtllm_gen_workspace_buffer()
    kv = torch.stack([inputs.k, inputs.v], dim=1)  # vLLM's cache: [pages, 2, page, heads, dim]
    args = (inputs.q, kv, torch.empty_like(inputs.q))

    def call(q, kv, out):
        xqa_batch_decode_with_kv_cache(q, kv, workspace, inputs.block_table, inputs.seq_lens, s.context,
                                       bmm1_scale=inputs.scale, out=out, kv_layout="NHD", q_len_per_req=s.query_len,
                                       mask=mask)
    return Kernel(lambda: call(*args), args[2], inputs.q, "xqa", None, call, args)
