"""The requests an engine generates: a uniform batch, and a mixed one whose batches change shape as it runs.

    uniform  the first `num_prompts` held-out prompts, `max_new_tokens` each: every step is the same batch
    mixed    MIXED_REQUESTS requests, prompts cut to different lengths and different max_tokens, more than the
             engine's max_num_seqs: prompts are prefilled while others decode, decode batches shrink as
             requests finish, and MIXED_MAX_NUM_SEQS requests of 1 + 15 tokens are more tokens than the largest
             CUDA graph vLLM captures by default (the engine records its own `max_cudagraph_capture_size`, and
             how many target steps were larger), so such steps run without a full graph
"""

from __future__ import annotations

MIXED_REQUESTS = 60
MIXED_MAX_NUM_SEQS = 40
# Cycles of different lengths (coprime), so that lengths and budgets combine in many ways.
MIXED_PROMPT_BYTES = (24, 96, 40, 72, 56)
MIXED_MAX_TOKENS = (8, 160, 32, 96, 64, 128, 16)


def workload_requests(workload: str, prompts: list[str], num_prompts: int, max_new_tokens: int) -> list[tuple[str, int]]:
    """(prompt text, max_tokens) per request."""
    if workload == "uniform":
        return [(text, max_new_tokens) for text in prompts[:num_prompts]]
    if workload == "mixed":
        return [(prompts[i % len(prompts)][: MIXED_PROMPT_BYTES[i % len(MIXED_PROMPT_BYTES)]],
                 MIXED_MAX_TOKENS[i % len(MIXED_MAX_TOKENS)]) for i in range(MIXED_REQUESTS)]
    raise ValueError(f"unknown workload {workload!r}")

