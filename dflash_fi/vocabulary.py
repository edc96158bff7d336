"""The words every part of dflash-fi shares, each defined once.

Two different things are 16 tokens long here, and they are named apart:

    KV_PAGE_SIZE      vLLM's KV-cache block (a FlashInfer "page"): how the cache is cut up in memory
    DRAFT_BLOCK_SIZE  the query tokens a DFlash draft request brings: the anchor + NUM_SPECULATIVE_TOKENS masks
"""

from __future__ import annotations

# DFlash drafts 15 tokens per step: vLLM's `num_speculative_tokens`.
NUM_SPECULATIVE_TOKENS = 15
DRAFT_BLOCK_SIZE = 1 + NUM_SPECULATIVE_TOKENS
KV_PAGE_SIZE = 16

# The draft's attention backend, as vLLM names it in `speculative_config["attention_backend"]`.
DRAFT_BACKENDS = ("FLASHINFER", "FLASH_ATTN")
# vLLM's `kv_cache_dtype`: "auto" keeps the model dtype (bf16 here); "fp8" is fp8-e4m3.
KV_CACHE_DTYPES = ("auto", "fp8")
KV_CACHE_DTYPE_NAMES = {"auto": "bf16", "fp8": "fp8-e4m3"}

# Compute capabilities the CPU lab pretends to be, and the GPUs they stand for.
GPU_NAMES = {
    (8, 0): "NVIDIA A100",
    (8, 6): "NVIDIA RTX A6000",
    (8, 9): "NVIDIA GeForce RTX 4090",
    (9, 0): "NVIDIA H100/H200",
    (10, 0): "NVIDIA B200",
}
CAPABILITIES = tuple(GPU_NAMES)
RTX_4090 = (8, 9)
HOPPER = (9, 0)
BLACKWELL = (10, 0)


def sm(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"
