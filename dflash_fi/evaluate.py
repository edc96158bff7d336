"""The reference decoder's predictions for a model pair: tau with non-causal and causal block attention."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from dflash_fi.reference.decode import acceptance_length, greedy_generate, per_position_acceptance, speculative_generate
from dflash_fi.reference.model import CAUSAL, NON_CAUSAL, load_pair
from dflash_fi.tokenizer import prompt_ids

MODELS_DIR = Path(__file__).resolve().parent / "models"
DEFAULT_TARGET = MODELS_DIR / "target"
DEFAULT_DRAFTER = MODELS_DIR / "drafter"
DEFAULT_PROMPTS = MODELS_DIR / "prompts.json"
# Sized for 2 CPU cores in well under a minute (the reference re-runs the target every step).
DEFAULT_NUM_PROMPTS = 16
DEFAULT_NEW_TOKENS = 96


def load_prompts(path: Path = DEFAULT_PROMPTS, n: int | None = None) -> list[str]:
    if not Path(path).is_file():
        raise FileNotFoundError(
            f"no prompt file at {path}: the embedded models are missing; check out the repository "
            "again or train them with `dflash-fi train`."
        )
    prompts = json.loads(Path(path).read_text())["prompts"]
    if n is not None:
        if n < 1 or n > len(prompts):
            raise ValueError(f"--prompts must be between 1 and {len(prompts)} (prompts in {path})")
        prompts = prompts[:n]
    return prompts


@torch.inference_mode()
def evaluate_pair(
    target_dir: Path, drafter_dir: Path, prompts: list[str], new_tokens: int, device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> dict:
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
        "lossless_fraction": 1 - len(differing) / len(prompts),
        "differing_prompts": differing,
        "n_prompts": len(prompts),
        "n_new_tokens": new_tokens,
        "dtype": str(dtype).removeprefix("torch."),
        "device": device,
        "seconds": round(time.time() - t0, 2),
    }
