"""The recipe of the embedded pair: the target's shape and every training setting (`--set` changes them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from dflash_fi.errors import BadInput
from dflash_fi.reference.qwen3 import Qwen3Dims
from dflash_fi.reference.tokenizer import MASK_ID, VOCAB_SIZE

TARGET_DIMS = Qwen3Dims(
    vocab_size=VOCAB_SIZE, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=128,
)
LOSS_DECAY = 7.0


@dataclass
class TrainConfig:
    seed: int = 0
    seq_len: int = 512
    target_steps: int = 2500
    target_batch: int = 64
    target_lr: float = 3e-3
    gen_sequences: int = 4096
    gen_prompt_len: int = 64
    gen_batch: int = 1024
    drafter_steps: int = 5000
    drafter_batch: int = 32
    anchors_per_seq: int = 32
    drafter_lr: float = 3e-3
    # Chosen among six recipes in a search on an H200 (`git show 329491e:runs/nvidia-h200.drafter-search.json`):
    # the widest causal/non-causal gap
    drafter_intermediate_size: int = 512
    target_layer_ids: tuple[int, ...] = (0, 2)  # vLLM's ids: output of target layer i
    eval_prompts: int = 32
    eval_new_tokens: int = 128
    held_out_every: int = 20  # 1 file in 20 (5%) is held out

    @classmethod
    def smoke(cls) -> "TrainConfig":
        """Seconds on a CPU: exercises every stage, trains nothing useful."""
        return cls(seq_len=64, target_steps=3, target_batch=2, gen_sequences=4, gen_prompt_len=16,
                   gen_batch=4, drafter_steps=3, drafter_batch=2, anchors_per_seq=2,
                   eval_prompts=2, eval_new_tokens=20)

    def with_overrides(self, overrides: dict[str, str]) -> "TrainConfig":
        """A copy with fields set from strings (`--set drafter_steps=8000 --set target_layer_ids=0,3`)."""
        types = {f.name: f.type for f in fields(self)}
        values = asdict(self)
        for key, text in overrides.items():
            if key not in types:
                raise BadInput(f"unknown training setting {key!r}; settings: {', '.join(types)}")
            kind = types[key]
            try:
                if kind.startswith("tuple"):
                    values[key] = tuple(int(v) for v in text.split(",") if v.strip())
                else:
                    values[key] = {"int": int, "float": float}[kind](text)
            except ValueError:
                raise BadInput(f"--set {key}={text}: {key} must be {kind}") from None
        return type(self)(**values)


def drafter_dims(cfg: TrainConfig) -> Qwen3Dims:
    """Same heads and head_dim as the target (vLLM needs equal KV page sizes), hidden size shared."""
    if not cfg.target_layer_ids or not all(0 <= i < TARGET_DIMS.num_hidden_layers for i in cfg.target_layer_ids):
        raise BadInput(f"target_layer_ids {cfg.target_layer_ids}: ids of target layers "
                         f"0..{TARGET_DIMS.num_hidden_layers - 1}")
    return Qwen3Dims(
        vocab_size=VOCAB_SIZE, hidden_size=TARGET_DIMS.hidden_size,
        intermediate_size=cfg.drafter_intermediate_size, num_hidden_layers=2,
        num_attention_heads=TARGET_DIMS.num_attention_heads, num_key_value_heads=TARGET_DIMS.num_key_value_heads,
        head_dim=TARGET_DIMS.head_dim, mask_token_id=MASK_ID, target_layer_ids=list(cfg.target_layer_ids),
    )


# The settings that shape the target: a reused target (`--target-from`) must have been trained with these.
TARGET_FIELDS = ("seed", "seq_len", "target_steps", "target_batch", "target_lr", "held_out_every")
