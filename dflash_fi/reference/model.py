"""Qwen3 target and DFlash drafter forwards, from HF-format weights, in plain PyTorch.

Parameter names are the checkpoint names, so `state_dict()` is the HF checkpoint:
target `Qwen3ForCausalLM` (model.layers.N...), drafter `DFlashDraftModel` as vLLM 0.22.1's
`qwen3_dflash.py` loads it (layers.N..., fc, hidden_norm, norm; embedding and lm_head come from the target).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

BLOCK_SIZE = 16  # anchor + 15 mask tokens: num_speculative_tokens = 15 in vLLM
NON_CAUSAL, CAUSAL = "non_causal", "causal"
BLOCK_ATTENTION_MODES = (NON_CAUSAL, CAUSAL)


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
        if mode not in BLOCK_ATTENTION_MODES:
            raise ValueError(f"unknown block attention mode {mode!r}: use one of {BLOCK_ATTENTION_MODES}")
        B, A = anchors.shape
        T = context.shape[1]
        device = context.device
        block = torch.full((B, A, BLOCK_SIZE), self.d.mask_token_id, dtype=torch.long, device=device)
        block[:, :, 0] = anchor_tokens
        offsets = torch.arange(BLOCK_SIZE, device=device)
        block_pos = (anchors[:, :, None] + offsets).reshape(B, A * BLOCK_SIZE)
        ctx_pos = torch.arange(T, device=device)

        # [B, 1, A*16, T + A*16]: context part, then block part
        ctx_mask = ctx_pos[None, None, :] < anchors[:, :, None]  # [B, A, T]
        ctx_mask = ctx_mask[:, :, None, :].expand(B, A, BLOCK_SIZE, T).reshape(B, A * BLOCK_SIZE, T)
        same_block = torch.eye(A, dtype=torch.bool, device=device)
        within = torch.ones(BLOCK_SIZE, BLOCK_SIZE, dtype=torch.bool, device=device)
        if mode == CAUSAL:
            within = torch.tril(within)
        blk_mask = (same_block[:, None, :, None] & within[None, :, None, :]).reshape(A * BLOCK_SIZE, A * BLOCK_SIZE)
        mask = torch.cat([ctx_mask, blk_mask[None].expand(B, -1, -1)], dim=-1)[:, None]

        x = target.model.embed_tokens(block.reshape(B, A * BLOCK_SIZE))
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
        return logits.reshape(B, A, BLOCK_SIZE, -1)


def load_config(model_dir: Path) -> dict:
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"no config.json in {model_dir}: give a directory holding an HF-format model "
            "(config.json + model.safetensors), or train the embedded pair with `dflash-fi train`."
        )
    return json.loads(path.read_text())


def _load_weights(module: nn.Module, model_dir: Path, strict_missing: set[str] = frozenset()):
    from safetensors.torch import load_file

    path = Path(model_dir) / "model.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"no model.safetensors in {model_dir}")
    state = load_file(str(path))
    missing, unexpected = module.load_state_dict(state, strict=False)
    missing = [m for m in missing if m not in strict_missing]
    if missing or unexpected:
        raise ValueError(f"{model_dir}: missing weights {missing}, unexpected weights {unexpected}")


def load_pair(target_dir: Path, drafter_dir: Path, dtype=torch.float32, device="cpu"):
    target_cfg = Qwen3Dims.from_config(load_config(target_dir))
    target = Qwen3Target(target_cfg)
    _load_weights(target, target_dir)
    if target_cfg.tie_word_embeddings:
        target.lm_head.weight = target.model.embed_tokens.weight
    drafter_cfg = Qwen3Dims.from_config(load_config(drafter_dir))
    drafter = DFlashDrafter(drafter_cfg, target_cfg.hidden_size)
    _load_weights(drafter, drafter_dir)
    return (target.to(device=device, dtype=dtype).eval(), drafter.to(device=device, dtype=dtype).eval())


def param_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def init_weights(module: nn.Module, std: float = 0.02, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    for name, p in module.named_parameters():
        if p.dim() >= 2:
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=gen) * std)
        elif name.endswith("weight"):
            nn.init.ones_(p)


__all__ = [
    "BLOCK_SIZE", "NON_CAUSAL", "CAUSAL", "Qwen3Dims", "Qwen3Target", "DFlashDrafter", "load_pair",
    "causal_end_aligned_mask", "param_count", "init_weights",
]
