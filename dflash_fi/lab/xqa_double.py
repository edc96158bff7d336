"""The double of FlashInfer's XQA kernel call (step 9's draft), and the workspace and SM count it asks vLLM for."""

from __future__ import annotations

import torch


class XQADouble:
    """Double of `flashinfer.xqa.xqa`, the kernel call FlashInfer's `xqa_batch_decode_with_kv_cache` makes (that
    wrapper itself runs for real). Its arguments are bound to XQA's own signature and checked as XQA's Python and its
    kernel take them: an XQA GPU (SM 9.x, 10.x, 12.x), fp16/bf16 queries and cache (the FP8 kernel is not modelled:
    refused), the page and head sizes XQA compiles, dense queries and output [batch, 1, q_seq_len, heads, head_size],
    an int32 page table whose rows are its width, 32-bit lengths [batch, 1] that hold the block, the packed uint16
    mask [batch, q_seq_len, 2 * cdiv(q_seq_len, 32)], zeroed semaphores. Then it attends as the kernel does: keys
    before a request's last q_seq_len are visible, a block key where its bit in the query's mask row is set."""

    def __init__(self):
        self.calls: list[dict] = []

    def __call__(self, *args, **kwargs):
        import inspect

        from flashinfer.jit.xqa import gen_xqa_module
        from flashinfer.xqa import xqa
        from vllm.platforms import current_platform

        call = inspect.signature(xqa).bind(*args, **kwargs)
        call.apply_defaults()
        a = call.arguments
        q, k, v, out, table, lens, mask = (a[n] for n in ("q", "k_cache", "v_cache", "output", "page_table",
                                                          "seq_lens", "mask"))
        block, heads, page_size = a["q_seq_len"], q.shape[-2], a["page_size"]
        batch, head_size, kv_heads = q.shape[0], q.shape[-1], a["num_kv_heads"]
        problems = []

        def need(ok: bool, what: str):
            if not ok:
                problems.append(what)
        need(current_platform.get_device_capability().major in (9, 10, 12), "an XQA GPU (SM 9.x, 10.x, 12.x)")
        need(q.dtype in (torch.float16, torch.bfloat16) and k.dtype == v.dtype == out.dtype == q.dtype,
             "fp16/bf16 queries, cache and output of one dtype (the FP8 kernel is not modelled)")
        need(a["kv_layout"] == "NHD" and k.shape[1:] == v.shape[1:] == (page_size, kv_heads, head_size)
             and k.stride(-1) == 1 and all(s % head_size == 0 for s in k.stride()[:-1]),
             "NHD pages [num_pages, page_size, num_kv_heads, head_size], head_size-aligned strides")
        try:  # XQA's own checks of the dtypes, page and head sizes, before it asks for the GPU's architecture
            gen_xqa_module(q.dtype, k.dtype, page_size, head_size, heads // kv_heads, False, out.dtype, block)
        except ValueError as exc:
            problems.append(str(exc))
        except RuntimeError:  # no CUDA architecture on this machine: the checks before it passed
            pass
        need(heads % kv_heads == 0, "query heads a multiple of KV heads")
        need(q.shape == (batch, 1, block, heads, head_size) and q.is_contiguous() and out.numel() == q.numel()
             and out.is_contiguous(), "dense q [batch, 1, q_seq_len, heads, head_size] and an output as large")
        need(table.dtype == torch.int32 and table.dim() == 2 and table.shape[0] >= batch and table.is_contiguous(),
             "an int32 page table [batch, pages], rows of its width")
        need(lens.dtype in (torch.int32, torch.uint32) and lens.shape == (batch, 1) and lens.is_contiguous(),
             "32-bit seq_lens [batch, 1]")
        words = 2 * -(-block // 32)
        need(mask is not None and mask.dtype == torch.uint16 and mask.shape == (batch, block, words)
             and mask.is_contiguous(), f"a packed uint16 mask [batch, q_seq_len, {words}]")
        need(not a["semaphores"].any() and a["workspace_buffer"].numel() > 0, "zeroed semaphores and a scratch")
        lengths = lens[:, 0].tolist() if lens.dim() == 2 else []
        need(all(block <= n <= table.shape[1] * page_size for n in lengths),
             "every length holds its block and fits its page table row")
        self.calls.append({"q_seq_len": block, "batch": batch, "problems": problems})
        if problems:
            raise ValueError("XQA would refuse or misread these arguments: " + "; ".join(problems))
        bits, out = torch.arange(block), out.view(q.shape)  # the kernel writes the output densely
        for r, n in enumerate(lengths):
            pages = table[r, : -(-n // page_size)].long()
            keys = k[pages].reshape(-1, kv_heads, head_size)[:n].float().repeat_interleave(heads // kv_heads, 1)
            values = v[pages].reshape(-1, kv_heads, head_size)[:n].float().repeat_interleave(heads // kv_heads, 1)
            rows = mask[r].view(torch.int16).int()[:, bits // 16] >> (bits % 16) & 1  # [query, block position]
            visible = torch.cat([torch.ones(block, n - block, dtype=torch.bool), rows.bool()], dim=1)
            scores = torch.einsum("qhd,khd->hqk", q[r, 0].float(), keys) * a["q_scale"] * head_size ** -0.5
            scores = scores.masked_fill(~visible, float("-inf"))
            out[r, 0] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), values).to(out.dtype)


_WORKSPACE = {}


def trtllm_gen_workspace_double():
    """Double of vLLM's `_get_trtllm_gen_workspace_buffer()`: the same zeroed buffer, on the CPU."""
    from vllm import envs

    if "buffer" not in _WORKSPACE:
        _WORKSPACE["buffer"] = torch.zeros(envs.VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE, dtype=torch.uint8)
    return _WORKSPACE["buffer"]


def sm_count_double(device) -> int:
    """Double of FlashInfer's `get_device_sm_count` (CUDA device properties), which XQA's wrapper asks for."""
    return 1
