"""Greedy decoding and greedy DFlash speculative decoding, counted the way vLLM counts them."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dflash_fi.reference.drafter import NON_CAUSAL, DFlashDrafter
from dflash_fi.reference.qwen3 import Qwen3Target
from dflash_fi.vocabulary import NUM_SPECULATIVE_TOKENS


@torch.inference_mode()
def greedy_generate(target: Qwen3Target, prompt: list[int], max_new_tokens: int) -> list[int]:
    """Plain greedy decoding with a KV cache."""
    device = target.lm_head.weight.device
    cache: list = []
    logits, _ = target(torch.tensor([prompt], device=device), 0, cache)
    out = [int(logits[0, -1].argmax())]
    while len(out) < max_new_tokens:
        logits, _ = target(torch.tensor([[out[-1]]], device=device), len(prompt) + len(out) - 1, cache)
        out.append(int(logits[0, -1].argmax()))
    return out


@dataclass
class SpecResult:
    tokens: list[int]
    num_drafts: int = 0  # verification steps (vLLM: num_drafts)
    accepted_per_position: list[int] = field(default_factory=lambda: [0] * NUM_SPECULATIVE_TOKENS)

    @property
    def num_accepted(self) -> int:
        return sum(self.accepted_per_position)


@torch.inference_mode()
def speculative_generate(
    target: Qwen3Target, drafter: DFlashDrafter, prompt: list[int], max_new_tokens: int, mode: str = NON_CAUSAL
) -> SpecResult:
    """Greedy DFlash speculative decoding of one prompt.

    Each step: the drafter sees the target's features of every token before the anchor and the block
    [anchor, mask x 15]; the target verifies anchor + 15 drafts in one forward; the longest prefix of
    drafts equal to the target's own greedy choices is accepted, plus one token from the target.
    The target is re-run on the whole sequence each step: slow, but with nothing cached to get wrong.
    """
    device = target.lm_head.weight.device
    seq = torch.tensor([prompt], device=device)
    logits, layers = target(seq)
    context = drafter.context_features(layers)
    anchor_token = int(logits[0, -1].argmax())
    result = SpecResult(tokens=[anchor_token])
    while len(result.tokens) < max_new_tokens:
        p = seq.shape[1]  # position of the anchor
        draft_logits = drafter(
            target, context, torch.tensor([[p]], device=device), torch.tensor([[anchor_token]], device=device), mode
        )
        drafts = draft_logits[0, 0, 1:].argmax(-1)  # block positions 1..15
        candidate = torch.cat([seq, torch.tensor([[anchor_token]], device=device), drafts[None]], dim=1)
        logits, layers = target(candidate)
        choices = logits[0, p:].argmax(-1)  # target's greedy token after anchor, after draft 1, ...
        accepted = 0
        while accepted < NUM_SPECULATIVE_TOKENS and int(drafts[accepted]) == int(choices[accepted]):
            result.accepted_per_position[accepted] += 1
            accepted += 1
        result.num_drafts += 1
        result.tokens.extend(int(t) for t in drafts[:accepted])
        anchor_token = int(choices[accepted])
        result.tokens.append(anchor_token)
        keep = p + 1 + accepted
        seq = candidate[:, :keep]
        context = drafter.context_features([layer[:, :keep] for layer in layers])
    result.tokens = result.tokens[:max_new_tokens]
    return result


def acceptance_length(results: list[SpecResult]) -> float:
    """vLLM's mean acceptance length: 1 + accepted drafts / verification steps (the 1 is the bonus token)."""
    drafts = sum(r.num_drafts for r in results)
    return 1.0 + sum(r.num_accepted for r in results) / drafts if drafts else float("nan")


def per_position_acceptance(results: list[SpecResult]) -> list[float]:
    drafts = sum(r.num_drafts for r in results)
    if not drafts:
        return [float("nan")] * NUM_SPECULATIVE_TOKENS
    return [sum(r.accepted_per_position[k] for r in results) / drafts for k in range(NUM_SPECULATIVE_TOKENS)]


@torch.inference_mode()
def score_text(target: Qwen3Target, drafter: DFlashDrafter, prompt: list[int], text: tuple[int, ...],
               mode: str = NON_CAUSAL) -> SpecResult:
    """Speculative decoding replayed on a given text (an engine's output) instead of the target's own choices: each
    step drafts the block after the anchor and accepts the drafts equal to the text's next tokens, as vLLM counts
    (drafts past the text's end not counted). On the reference decoder's own text: its own counts."""
    device = target.lm_head.weight.device
    _, layers = target(torch.tensor([prompt + list(text)], device=device))  # the target's features, once
    start = p = len(prompt)
    result = SpecResult(tokens=list(text))
    while p - start + 1 < len(text):  # text[p - start] is the anchor
        context = drafter.context_features([layer[:, :p] for layer in layers])
        drafts = drafter(target, context, torch.tensor([[p]], device=device),
                         torch.tensor([[text[p - start]]], device=device), mode)[0, 0, 1:].argmax(-1).tolist()
        n = 0
        while n < NUM_SPECULATIVE_TOKENS and p - start + 1 + n < len(text) and drafts[n] == text[p - start + 1 + n]:
            n += 1
        result.num_drafts += 1
        for i in range(n):
            result.accepted_per_position[i] += 1
        p += 1 + n
    return result
