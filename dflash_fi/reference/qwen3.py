"""The Qwen3 target (`Qwen3ForCausalLM`) and its building blocks, in plain PyTorch.

Parameter names are the checkpoint names, so `state_dict()` is the HF checkpoint (model.layers.N...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

@dataclass
class Qwen3Dims:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    # DFlash drafter only
    mask_token_id: int | None = None
    target_layer_ids: list[int] = field(default_factory=list)

    @classmethod
    def from_config(cls, config: dict) -> "Qwen3Dims":
        rope = config.get("rope_parameters") or {}
        dflash = config.get("dflash_config") or {}
        return cls(
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            intermediate_size=config["intermediate_size"],
            num_hidden_layers=config["num_hidden_layers"],
            num_attention_heads=config["num_attention_heads"],
            num_key_value_heads=config["num_key_value_heads"],
            head_dim=config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"],
            rms_norm_eps=config.get("rms_norm_eps", 1e-6),
            rope_theta=rope.get("rope_theta", config.get("rope_theta", 10000.0)),
            max_position_embeddings=config.get("max_position_embeddings", 4096),
            tie_word_embeddings=config.get("tie_word_embeddings", False),
            mask_token_id=dflash.get("mask_token_id"),
            target_layer_ids=list(dflash.get("target_layer_ids", [])),
        )


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding. x: [..., T, heads, head_dim]; positions broadcast to [..., T]."""
    dim = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
    angles = positions.to(torch.float32)[..., None] * inv_freq  # [..., T, dim/2]
    cos = torch.cat([angles.cos(), angles.cos()], -1)[..., None, :]
    sin = torch.cat([angles.sin(), angles.sin()], -1)[..., None, :]
    x1, x2 = x.float().chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x.float() * cos + rotated * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, d: Qwen3Dims):
        super().__init__()
        self.d = d
        self.q_proj = nn.Linear(d.hidden_size, d.num_attention_heads * d.head_dim, bias=False)
        self.k_proj = nn.Linear(d.hidden_size, d.num_key_value_heads * d.head_dim, bias=False)
        self.v_proj = nn.Linear(d.hidden_size, d.num_key_value_heads * d.head_dim, bias=False)
        self.o_proj = nn.Linear(d.num_attention_heads * d.head_dim, d.hidden_size, bias=False)
        self.q_norm = RMSNorm(d.head_dim, d.rms_norm_eps)
        self.k_norm = RMSNorm(d.head_dim, d.rms_norm_eps)

    def project_kv(self, h: torch.Tensor, positions: torch.Tensor):
        """K (normed, rotated) and V for hidden states h [B, T, H] -> [B, T, kv_heads, head_dim]."""
        d = self.d
        k = self.k_norm(self.k_proj(h).unflatten(-1, (d.num_key_value_heads, d.head_dim)))
        v = self.v_proj(h).unflatten(-1, (d.num_key_value_heads, d.head_dim))
        return rope(k, positions, d.rope_theta), v

    def project_q(self, h: torch.Tensor, positions: torch.Tensor):
        d = self.d
        q = self.q_norm(self.q_proj(h).unflatten(-1, (d.num_attention_heads, d.head_dim)))
        return rope(q, positions, d.rope_theta)

    def attend(self, q, k, v, mask=None, is_causal=False):
        """q [B, Tq, Hq, D], k/v [B, Tk, Hkv, D]; mask [B or 1, 1, Tq, Tk] (True = may attend)."""
        groups = self.d.num_attention_heads // self.d.num_key_value_heads
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
        return self.o_proj(out.transpose(1, 2).flatten(-2))


class MLP(nn.Module):
    def __init__(self, d: Qwen3Dims):
        super().__init__()
        self.gate_proj = nn.Linear(d.hidden_size, d.intermediate_size, bias=False)
        self.up_proj = nn.Linear(d.hidden_size, d.intermediate_size, bias=False)
        self.down_proj = nn.Linear(d.intermediate_size, d.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, d: Qwen3Dims):
        super().__init__()
        self.self_attn = Attention(d)
        self.mlp = MLP(d)
        self.input_layernorm = RMSNorm(d.hidden_size, d.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(d.hidden_size, d.rms_norm_eps)


class _Qwen3Body(nn.Module):
    def __init__(self, d: Qwen3Dims):
        super().__init__()
        self.embed_tokens = nn.Embedding(d.vocab_size, d.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(d) for _ in range(d.num_hidden_layers))
        self.norm = RMSNorm(d.hidden_size, d.rms_norm_eps)


class Qwen3Target(nn.Module):
    """`Qwen3ForCausalLM`. `forward` returns logits and the residual stream after every layer."""

    def __init__(self, d: Qwen3Dims):
        super().__init__()
        self.d = d
        self.model = _Qwen3Body(d)
        self.lm_head = nn.Linear(d.hidden_size, d.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, start_pos: int = 0, kv_cache: list | None = None):
        """input_ids [B, T] at positions start_pos.. ; kv_cache: per-layer [k, v] lists, extended in place.

        Returns (logits [B, T, V], layer_outputs): layer_outputs[i] is the residual stream after layer i,
        which is what vLLM's DFlash id `i` in `target_layer_ids` denotes (hidden_states[i + 1] in HF).
        """
        T = input_ids.shape[1]
        positions = torch.arange(start_pos, start_pos + T, device=input_ids.device)
        x = self.model.embed_tokens(input_ids)
        layer_outputs = []
        for i, layer in enumerate(self.model.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = attn.project_q(h, positions)
            k, v = attn.project_kv(h, positions)
            if kv_cache is not None:
                if len(kv_cache) <= i:
                    kv_cache.append([k, v])
                else:
                    kv_cache[i][0] = k = torch.cat([kv_cache[i][0], k], dim=1)
                    kv_cache[i][1] = v = torch.cat([kv_cache[i][1], v], dim=1)
            if k.shape[1] == T:
                x = x + attn.attend(q, k, v, is_causal=T > 1)
            else:  # new tokens after cached ones: end-aligned causal mask
                mask = causal_end_aligned_mask(T, k.shape[1], x.device)
                x = x + attn.attend(q, k, v, mask=mask)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
            layer_outputs.append(x)
        return self.lm_head(self.model.norm(x)), layer_outputs


def causal_end_aligned_mask(num_queries: int, num_keys: int, device=None) -> torch.Tensor:
    """Query i (the i-th of the last num_queries positions) sees keys 0 .. num_keys - num_queries + i."""
    q = torch.arange(num_queries, device=device)[:, None] + (num_keys - num_queries)
    return torch.arange(num_keys, device=device)[None, :] <= q
