"""Writing the pair in HF format: the files vLLM, transformers and the reference decoder all load."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from dflash_fi.reference.qwen3 import Qwen3Dims
from dflash_fi.reference.tokenizer import DOC_ID, MASK_ID, write_hf_tokenizer
from dflash_fi.vocabulary import DRAFT_BLOCK_SIZE


def config_json(dims: Qwen3Dims, architecture: str, **extra) -> dict:
    config = {
        "architectures": [architecture],
        "model_type": "qwen3",
        "vocab_size": dims.vocab_size,
        "hidden_size": dims.hidden_size,
        "intermediate_size": dims.intermediate_size,
        "num_hidden_layers": dims.num_hidden_layers,
        "num_attention_heads": dims.num_attention_heads,
        "num_key_value_heads": dims.num_key_value_heads,
        "head_dim": dims.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": dims.rms_norm_eps,
        "rope_theta": dims.rope_theta,
        "rope_scaling": None,
        "max_position_embeddings": dims.max_position_embeddings,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": DOC_ID,
        "eos_token_id": DOC_ID,
        "use_sliding_window": False,
    }
    config.update(extra)
    return config


def save_model(model_dir: Path, module: nn.Module, config: dict) -> None:
    """bf16 safetensors + config.json in model_dir."""
    from safetensors.torch import save_file

    model_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in module.state_dict().items()},
              str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    (model_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def save_target(out_dir: Path, target) -> None:
    """`Qwen3ForCausalLM` with its tokenizer and a greedy generation config."""
    target_dir = Path(out_dir) / "target"
    save_model(target_dir, target, config_json(target.d, "Qwen3ForCausalLM"))
    (target_dir / "generation_config.json").write_text(json.dumps({"do_sample": False}) + "\n")
    write_hf_tokenizer(target_dir)


def save_drafter(out_dir: Path, drafter) -> None:
    """`DFlashDraftModel` with the dflash_config vLLM reads (mask token, target layers) and its block size."""
    save_model(Path(out_dir) / "drafter", drafter, config_json(
        drafter.d, "DFlashDraftModel",
        dflash_config={"mask_token_id": MASK_ID, "target_layer_ids": drafter.d.target_layer_ids},
        block_size=DRAFT_BLOCK_SIZE,
    ))
