"""HF-format weights of the pair: load a target + drafter, count and initialise parameters."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from dflash_fi.errors import MissingModelFiles
from dflash_fi.reference.drafter import DFlashDrafter
from dflash_fi.reference.qwen3 import Qwen3Dims, Qwen3Target


def load_config(model_dir: Path) -> dict:
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise MissingModelFiles(
            f"no config.json in {model_dir}: give a directory holding an HF-format model "
            "(config.json + model.safetensors), or train the embedded pair with `dflash-fi train`."
        )
    return json.loads(path.read_text())


def _load_weights(module: nn.Module, model_dir: Path, strict_missing: set[str] = frozenset()):
    from safetensors.torch import load_file

    path = Path(model_dir) / "model.safetensors"
    if not path.is_file():
        raise MissingModelFiles(f"no model.safetensors in {model_dir}: give a directory holding an HF-format model")
    state = load_file(str(path))
    missing, unexpected = module.load_state_dict(state, strict=False)
    missing = [m for m in missing if m not in strict_missing]
    if missing or unexpected:
        raise MissingModelFiles(f"{model_dir}: not this architecture's weights (missing {missing}, "
                                f"unexpected {unexpected})")


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
