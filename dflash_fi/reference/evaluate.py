"""The reference decoder's predictions for a model pair: tau with non-causal and causal block attention,
and whether greedy speculative decoding reproduces plain greedy decoding (it must, in fp32)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from dflash_fi.errors import NoGpu
from dflash_fi.reference.decode import acceptance_length, greedy_generate, per_position_acceptance, speculative_generate
from dflash_fi.reference.drafter import CAUSAL, NON_CAUSAL
from dflash_fi.reference.tokenizer import prompt_ids
from dflash_fi.reference.weights import load_pair


# The pair's matrices are small: on the CPU more threads than this only contend with engines on the same host.
REFERENCE_CPU_THREADS = 4


@torch.inference_mode()
def evaluate_pair(
    target_dir: Path, drafter_dir: Path, prompts: list[str], new_tokens: int, device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> dict:
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise NoGpu(f"the reference decoder on --device {device} needs a CUDA GPU and this machine has none: "
                    "leave --device out (the CPU)")
    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(min(threads, REFERENCE_CPU_THREADS))
    try:
        return _evaluate_pair(target_dir, drafter_dir, prompts, new_tokens, device, dtype)
    finally:
        torch.set_num_threads(threads)


def _evaluate_pair(target_dir, drafter_dir, prompts, new_tokens, device, dtype) -> dict:
    t0 = time.time()
    target, drafter = load_pair(target_dir, drafter_dir, dtype=dtype, device=device)
    ids = [prompt_ids(p) for p in prompts]
    greedy = [greedy_generate(target, x, new_tokens) for x in ids]
    results = {mode: [speculative_generate(target, drafter, x, new_tokens, mode) for x in ids]
               for mode in (NON_CAUSAL, CAUSAL)}
    differing = []
    for i, (g, s) in enumerate(zip(greedy, results[NON_CAUSAL])):
        if g != s.tokens:
            first = next(k for k, (a, b) in enumerate(zip(g, s.tokens)) if a != b)
            differing.append({"prompt": i, "first_difference_at": first})
    return {
        "tau_noncausal": acceptance_length(results[NON_CAUSAL]),
        "tau_causal": acceptance_length(results[CAUSAL]),
        "per_position_acceptance": {
            "noncausal": per_position_acceptance(results[NON_CAUSAL]),
            "causal": per_position_acceptance(results[CAUSAL]),
        },
        "per_prompt_noncausal": [{"drafts": r.num_drafts, "accepted": r.num_accepted} for r in results[NON_CAUSAL]],
        "lossless_fraction": 1 - len(differing) / len(prompts),
        "differing_prompts": differing,
        "n_prompts": len(prompts),
        "n_new_tokens": new_tokens,
        "dtype": str(dtype).removeprefix("torch."),
        "device": device,
        "seconds": round(time.time() - t0, 2),
    }
