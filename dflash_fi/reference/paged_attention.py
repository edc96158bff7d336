"""Reference attention over a paged KV cache, in vLLM's FlashInfer layout, for checking kernels.

kv_cache: [num_blocks, 2, block_size, num_kv_heads, head_dim] (vLLM's NHD FlashInfer layout).
Request r owns blocks block_table[r, :], holds seq_lens[r] tokens, and its queries are the last
q_len = qo_indptr[r+1] - qo_indptr[r] of them. causal=True: query i sees keys up to its own position
(end-aligned); causal=False: every query sees all seq_lens[r] keys (DFlash's block attention).
"""

from __future__ import annotations

import torch


def paged_attention_reference(q, kv_cache, block_table, seq_lens, qo_indptr, causal: bool, sm_scale=None):
    num_kv_heads, head_dim = kv_cache.shape[3], kv_cache.shape[4]
    groups = q.shape[1] // num_kv_heads
    scale = sm_scale if sm_scale is not None else head_dim ** -0.5
    block_size = kv_cache.shape[2]
    out = torch.empty_like(q)
    for r in range(len(seq_lens)):
        s, start, end = int(seq_lens[r]), int(qo_indptr[r]), int(qo_indptr[r + 1])
        blocks = block_table[r, : (s + block_size - 1) // block_size].long()
        k = kv_cache[blocks, 0].reshape(-1, num_kv_heads, head_dim)[:s].float()
        v = kv_cache[blocks, 1].reshape(-1, num_kv_heads, head_dim)[:s].float()
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        scores = torch.einsum("qhd,khd->hqk", q[start:end].float(), k) * scale
        if causal:
            L = end - start
            allowed = torch.arange(s, device=q.device)[None, :] <= (torch.arange(L, device=q.device)[:, None] + s - L)
            scores = scores.masked_fill(~allowed, float("-inf"))
        out[start:end] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).to(q.dtype)
    return out
