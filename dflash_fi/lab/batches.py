"""The batches the CPU lab routes, and the `CommonAttentionMetadata` vLLM builds for each.

A DFlash draft batch is what `DFlashProposer.set_inputs_first_pass` builds: every request brings one block
of DRAFT_BLOCK_SIZE query tokens (the anchor and the masks), with `causal=False`, and the host knows its
sequence lengths only as upper bounds (`_seq_lens_cpu=None`, `seq_lens_cpu_upper_bound`): how many of the
last drafts the target rejected is known on the GPU alone. Target batches are what the model runner builds:
decodes, prompt prefills, spec-decode verification (1 + 15 tokens), mixes, with exact host lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dflash_fi.vocabulary import DRAFT_BLOCK_SIZE, KV_PAGE_SIZE, NUM_SPECULATIVE_TOKENS

N, Q = NUM_SPECULATIVE_TOKENS, DRAFT_BLOCK_SIZE


@dataclass(frozen=True)
class Batch:
    name: str
    query_lens: tuple[int, ...]
    context_lens: tuple[int, ...]  # tokens already in the KV cache before this batch's queries
    causal: bool
    # Draft batches: by how much the host's upper bound on each sequence length exceeds the exact length
    # (the drafts the target rejected); empty: the bound is exact.
    bound_slack: tuple[int, ...] = ()

    @property
    def role(self) -> str:
        return "target" if self.causal else "draft"


STANDARD_BATCHES = (
    Batch(f"DFlash draft: 4 requests x (1 + {N})", (Q,) * 4, (37, 90, 150, 301), False, (3, 15, 0, 9)),
    Batch(f"DFlash draft: 1 request x (1 + {N})", (Q,), (120,), False, (5,)),
    Batch("target decode: 4 x 1", (1, 1, 1, 1), (52, 91, 160, 311), True),
    Batch("target prefill: 2 prompts", (97, 64), (0, 0), True),
    Batch(f"target spec verify: 4 x (1 + {N})", (Q,) * 4, (37, 90, 150, 301), True),
    Batch("target mixed: 2 decodes + 1 prefill", (1, 1, 50), (40, 60, 0), True),
)
DRAFT, DRAFT_ONE, DECODE, PREFILL, VERIFY, MIXED = STANDARD_BATCHES  # by role, for code; `name` is for a reader


def common_metadata(batch: Batch, page_size: int = KV_PAGE_SIZE, device: str = "cpu", first_page: int = 1):
    """The CommonAttentionMetadata vLLM's runner (target) or DFlashProposer (draft) builds for a batch.

    Requests own consecutive pages from `first_page` on; the `*_cpu` tensors stay on the CPU, as in vLLM. A draft
    batch has no host copy of its sequence lengths, only their upper bound, as DFlash's proposer builds it.
    """
    from vllm.v1.attention.backend import CommonAttentionMetadata

    q = torch.tensor(batch.query_lens, dtype=torch.int32)
    seq = q + torch.tensor(batch.context_lens, dtype=torch.int32)
    bound = seq + torch.tensor(batch.bound_slack or (0,) * len(q), dtype=torch.int32)
    qsl = torch.zeros(len(q) + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(q, 0)
    blocks = (seq + page_size - 1) // page_size
    block_table = torch.zeros(len(q), int(blocks.max()) if len(q) else 1, dtype=torch.int32)
    next_block = first_page
    for r, n in enumerate(blocks.tolist()):
        block_table[r, :n] = torch.arange(next_block, next_block + n)
        next_block += n
    slots = []
    for r in range(len(q)):
        for pos in range(int(seq[r] - q[r]), int(seq[r])):
            slots.append(int(block_table[r, pos // page_size]) * page_size + pos % page_size)
    return CommonAttentionMetadata(
        query_start_loc=qsl.to(device), query_start_loc_cpu=qsl.clone(), seq_lens=seq.to(device),
        _seq_lens_cpu=seq.clone() if batch.causal else None, seq_lens_cpu_upper_bound=bound,
        num_reqs=len(q), num_actual_tokens=int(q.sum()), max_query_len=int(q.max()) if len(q) else 0,
        max_seq_len=int(seq.max()) if len(q) else 0, block_table_tensor=block_table.to(device),
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device), causal=batch.causal,
    )


def draft_steps(num_reqs: int, context: int, steps: int, device: str = "cpu") -> list:
    """The CommonAttentionMetadata of `steps` consecutive DFlash draft steps of one batch, as DFlashProposer builds
    them: each request's context grows by one block per step (every draft accepted), its host bound is 0-15 tokens
    above the exact length, and the batch's shape (num_reqs, qo_indptr) stays."""
    from dataclasses import replace

    last = common_metadata(Batch("draft", (Q,) * num_reqs, (context + Q * steps,) * num_reqs, False), device=device)
    cads = []
    for step in range(steps):
        seq_lens = torch.full((num_reqs,), context + Q * (step + 1), dtype=torch.int32)
        slack = (torch.arange(num_reqs, dtype=torch.int32) * 5 + step) % Q
        cads.append(replace(last, seq_lens=seq_lens.to(device), seq_lens_cpu_upper_bound=seq_lens + slack,
                            max_seq_len=int(seq_lens.max())))
    return cads
