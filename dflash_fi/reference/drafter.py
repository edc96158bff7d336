"""The DFlash drafter (`DFlashDraftModel`, as vLLM 0.22.1's `qwen3_dflash.py` loads it), in plain PyTorch.

Parameter names are the checkpoint names (layers.N..., fc, hidden_norm, norm); the embedding and lm_head
come from the target. A draft block is the anchor token followed by mask tokens, DRAFT_BLOCK_SIZE in all.
"""

from __future__ import annotations

import torch
from torch import nn

from dflash_fi.reference.qwen3 import DecoderLayer, Qwen3Dims, Qwen3Target, RMSNorm
from dflash_fi.vocabulary import DRAFT_BLOCK_SIZE

NON_CAUSAL, CAUSAL = "non_causal", "causal"
BLOCK_ATTENTION_MODES = (NON_CAUSAL, CAUSAL)


def block_attention_mask(anchors: torch.Tensor, num_context: int, mode: str) -> torch.Tensor:
    """Which keys each block query may see: [B, A*16, num_context + A*16] (True = may attend).

    Block k of anchor a sits at position a + k; it sees the context keys at positions < a (strict
    context) and, per `mode`, its whole block (non-causal) or its block tokens 0..k (causal).
    """
    if mode not in BLOCK_ATTENTION_MODES:
        raise ValueError(f"unknown block attention mode {mode!r}: use one of {BLOCK_ATTENTION_MODES}")
    B, A = anchors.shape
    device = anchors.device
    ctx_pos = torch.arange(num_context, device=device)
    ctx_mask = ctx_pos[None, None, :] < anchors[:, :, None]  # [B, A, T]
    ctx_mask = ctx_mask[:, :, None, :].expand(B, A, DRAFT_BLOCK_SIZE, num_context)
    ctx_mask = ctx_mask.reshape(B, A * DRAFT_BLOCK_SIZE, num_context)
    same_block = torch.eye(A, dtype=torch.bool, device=device)
    within = torch.ones(DRAFT_BLOCK_SIZE, DRAFT_BLOCK_SIZE, dtype=torch.bool, device=device)
    if mode == CAUSAL:
        within = torch.tril(within)
    blk_mask = (same_block[:, None, :, None] & within[None, :, None, :]).reshape(
        A * DRAFT_BLOCK_SIZE, A * DRAFT_BLOCK_SIZE)
    return torch.cat([ctx_mask, blk_mask[None].expand(B, -1, -1)], dim=-1)


class DFlashDrafter(nn.Module):
    """`DFlashDraftModel` (vLLM 0.22.1 `DFlashQwen3ForCausalLM`), sharing embedding and lm_head with the target."""

    def __init__(self, d: Qwen3Dims, target_hidden_size: int):
        super().__init__()
        assert d.mask_token_id is not None and d.target_layer_ids, "drafter config needs dflash_config"
        self.d = d
        self.layers = nn.ModuleList(DecoderLayer(d) for _ in range(d.num_hidden_layers))
        self.fc = nn.Linear(target_hidden_size * len(d.target_layer_ids), d.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(d.hidden_size, d.rms_norm_eps)
        self.norm = RMSNorm(d.hidden_size, d.rms_norm_eps)

    def context_features(self, layer_outputs: list[torch.Tensor]) -> torch.Tensor:
        """concat(target layer outputs of dflash_config.target_layer_ids) -> fc -> hidden_norm."""
        feats = torch.cat([layer_outputs[i] for i in self.d.target_layer_ids], dim=-1)
        return self.hidden_norm(self.fc(feats))

    def forward(
        self,
        target: Qwen3Target,
        context: torch.Tensor,
        anchors: torch.Tensor,
        anchor_tokens: torch.Tensor,
        mode: str = NON_CAUSAL,
    ) -> torch.Tensor:
        """Draft logits for blocks [anchor token, mask x 15].

        context: [B, T, H] context features (`context_features`) at positions 0..T-1.
        anchors: [B, A] anchor positions; block k of anchor a sits at position a + k and sees the context
            keys at positions < a (strict context) and, per `mode`, all of its block or block tokens <= k.
        anchor_tokens: [B, A] the token at each anchor. Returns logits [B, A, 16, V].
        """
        B, A = anchors.shape
        T = context.shape[1]
        device = context.device
        mask = block_attention_mask(anchors, T, mode)[:, None]
        block = torch.full((B, A, DRAFT_BLOCK_SIZE), self.d.mask_token_id, dtype=torch.long, device=device)
        block[:, :, 0] = anchor_tokens
        block_pos = (anchors[:, :, None] + torch.arange(DRAFT_BLOCK_SIZE, device=device)).reshape(
            B, A * DRAFT_BLOCK_SIZE)
        ctx_pos = torch.arange(T, device=device)

        x = target.model.embed_tokens(block.reshape(B, A * DRAFT_BLOCK_SIZE))
        for layer in self.layers:
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = attn.project_q(h, block_pos)
            k_blk, v_blk = attn.project_kv(h, block_pos)
            k_ctx, v_ctx = attn.project_kv(context, ctx_pos)
            k = torch.cat([k_ctx, k_blk], dim=1)
            v = torch.cat([v_ctx, v_blk], dim=1)
            x = x + attn.attend(q, k, v, mask=mask)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        logits = target.lm_head(self.norm(x))
        return logits.reshape(B, A, DRAFT_BLOCK_SIZE, -1)
