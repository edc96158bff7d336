"""`dflash-fi train`: build the embedded target + DFlash drafter pair from CPython's standard library.

1. Corpus: the .py files of the running Python's standard library (tests and site-packages left out);
   about 5% of files, chosen by a hash of their path, are held out and give the evaluation prompts.
2. Target: a byte-level `Qwen3ForCausalLM` trained on random windows of the training files.
3. Greedy continuations of the target from random training windows: the drafter learns what the target
   says, not what the files say.
4. Drafter: `DFlashDraftModel` trained with random anchors, strict context (keys before the anchor),
   non-causal block attention, and cross-entropy on block positions 1..15 weighted exp(-(k-1)/7).
5. Measured tau (reference decoder, held-out prompts) goes into the model card.

`--target-from DIR` reuses the target of an earlier pair (its weights, prompts and training record) and
trains only the drafter: a drafter recipe can be changed without retraining the target.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import sysconfig
import shutil
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from dflash_fi.reference.model import (
    BLOCK_SIZE, NON_CAUSAL, DFlashDrafter, Qwen3Dims, Qwen3Target, init_weights, param_count,
)
from dflash_fi.tokenizer import DOC_ID, MASK_ID, VOCAB_SIZE, write_hf_tokenizer

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
    # Chosen among six recipes (runs/nvidia-h200.drafter-search.json): the widest causal/non-causal gap
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
                raise ValueError(f"unknown training setting {key!r}; settings: {', '.join(types)}")
            kind = types[key]
            try:
                if kind.startswith("tuple"):
                    values[key] = tuple(int(v) for v in text.split(",") if v.strip())
                else:
                    values[key] = {"int": int, "float": float}[kind](text)
            except ValueError:
                raise ValueError(f"--set {key}={text}: {key} must be {kind}") from None
        return type(self)(**values)


def drafter_dims(cfg: TrainConfig) -> Qwen3Dims:
    """Same heads and head_dim as the target (vLLM needs equal KV page sizes), hidden size shared."""
    if not cfg.target_layer_ids or not all(0 <= i < TARGET_DIMS.num_hidden_layers for i in cfg.target_layer_ids):
        raise ValueError(f"target_layer_ids {cfg.target_layer_ids}: ids of target layers "
                         f"0..{TARGET_DIMS.num_hidden_layers - 1}")
    return Qwen3Dims(
        vocab_size=VOCAB_SIZE, hidden_size=TARGET_DIMS.hidden_size,
        intermediate_size=cfg.drafter_intermediate_size, num_hidden_layers=2,
        num_attention_heads=TARGET_DIMS.num_attention_heads, num_key_value_heads=TARGET_DIMS.num_key_value_heads,
        head_dim=TARGET_DIMS.head_dim, mask_token_id=MASK_ID, target_layer_ids=list(cfg.target_layer_ids),
    )


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
    return sorted(p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts))


def is_held_out(path: Path, every: int) -> bool:
    rel = path.relative_to(Path(sysconfig.get_paths()["stdlib"])).as_posix()
    return int(hashlib.sha1(rel.encode()).hexdigest(), 16) % every == 0


def load_corpus(cfg: TrainConfig, max_files: int | None = None):
    files = stdlib_files()[:max_files]
    train, held = [], []
    for path in files:
        data = path.read_bytes()
        (held if is_held_out(path, cfg.held_out_every) else train).append((path, data))
    return train, held


def sample_windows(docs: list[bytes], n: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """n windows of `length` tokens: [DOC] + bytes from a random file (file chosen by size)."""
    sizes = torch.tensor([max(len(d) - length, 1) for d in docs], dtype=torch.float64)
    which = torch.multinomial(sizes, n, replacement=True, generator=gen)
    out = torch.full((n, length), DOC_ID, dtype=torch.long)
    for row, i in enumerate(which.tolist()):
        doc = docs[i]
        start = int(torch.randint(0, max(len(doc) - length + 1, 1), (1,), generator=gen))
        chunk = doc[start:start + length - 1]
        out[row, 1:1 + len(chunk)] = torch.tensor(list(chunk), dtype=torch.long)
    return out


def held_out_prompts(held: list[tuple[Path, bytes]], n: int, length: int = 96, seed: int = 0) -> list[str]:
    """ASCII prompts of `length` bytes that start at a line start in held-out files."""
    gen = torch.Generator().manual_seed(seed + 1)
    prompts = []
    candidates = [(p, d) for p, d in held if len(d) > 4 * length]
    while len(prompts) < n and candidates:
        path, data = candidates[int(torch.randint(0, len(candidates), (1,), generator=gen))]
        start = int(torch.randint(0, len(data) - length, (1,), generator=gen))
        start = data.rfind(b"\n", 0, start) + 1
        chunk = data[start:start + length]
        if chunk.isascii() and chunk.strip() and chunk.decode() not in prompts:
            prompts.append(chunk.decode())
    return prompts


def lr_at(step: int, total: int, peak: float, warmup: int = 100) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(total - warmup, 1)))


def train_target(cfg, docs, device, dtype, log) -> tuple[Qwen3Target, list[float]]:
    gen = torch.Generator().manual_seed(cfg.seed)
    target = Qwen3Target(TARGET_DIMS)
    init_weights(target, seed=cfg.seed)
    target.to(device)
    opt = torch.optim.AdamW(target.parameters(), lr=cfg.target_lr, betas=(0.9, 0.95), weight_decay=0.1)
    losses = []
    for step in tqdm(range(cfg.target_steps), desc="target", mininterval=5):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg.target_steps, cfg.target_lr)
        batch = sample_windows(docs, cfg.target_batch, cfg.seq_len + 1, gen).to(device)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            logits, _ = target(batch[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(target.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    log(f"target: {cfg.target_steps} steps, loss {losses[0]:.3f} -> {sum(losses[-50:]) / len(losses[-50:]):.3f}")
    return target, losses


@torch.inference_mode()
def greedy_continuations(cfg, target, docs, device, dtype, log) -> torch.Tensor:
    """[N, seq_len] sequences: a training window of gen_prompt_len tokens, then the target's greedy tokens."""
    gen = torch.Generator().manual_seed(cfg.seed + 2)
    prompts = sample_windows(docs, cfg.gen_sequences, cfg.gen_prompt_len, gen)
    out = []
    for start in tqdm(range(0, len(prompts), cfg.gen_batch), desc="continuations", mininterval=5):
        seq = prompts[start:start + cfg.gen_batch].to(device)
        cache: list = []
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            logits, _ = target(seq, 0, cache)
            while seq.shape[1] < cfg.seq_len:
                nxt = logits[:, -1].argmax(-1, keepdim=True)
                seq = torch.cat([seq, nxt], dim=1)
                logits, _ = target(nxt, seq.shape[1] - 1, cache)
        out.append(seq.cpu())
    data = torch.cat(out)
    log(f"continuations: {tuple(data.shape)}")
    return data


def train_drafter(cfg, target, data, device, dtype, log) -> tuple[DFlashDrafter, list[float]]:
    gen = torch.Generator().manual_seed(cfg.seed + 3)
    drafter = DFlashDrafter(drafter_dims(cfg), TARGET_DIMS.hidden_size)
    init_weights(drafter, seed=cfg.seed + 3)
    drafter.to(device)
    target.requires_grad_(False)
    opt = torch.optim.AdamW(drafter.parameters(), lr=cfg.drafter_lr, betas=(0.9, 0.95), weight_decay=0.1)
    weights = torch.exp(-(torch.arange(1, BLOCK_SIZE, device=device) - 1) / LOSS_DECAY)
    lowest = cfg.gen_prompt_len // 2
    highest = cfg.seq_len - BLOCK_SIZE
    losses = []
    for step in tqdm(range(cfg.drafter_steps), desc="drafter", mininterval=5):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg.drafter_steps, cfg.drafter_lr)
        rows = torch.randint(0, len(data), (cfg.drafter_batch,), generator=gen)
        seq = data[rows].to(device)
        anchors = torch.randint(lowest, highest + 1, (cfg.drafter_batch, cfg.anchors_per_seq), generator=gen).to(device)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            with torch.no_grad():
                _, layers = target(seq)
            context = drafter.context_features([layer.detach() for layer in layers])
            logits = drafter(target, context, anchors, seq.gather(1, anchors), NON_CAUSAL)
        labels = seq.gather(1, (anchors[:, :, None] + torch.arange(1, BLOCK_SIZE, device=device)).flatten(1))
        labels = labels.view(cfg.drafter_batch, cfg.anchors_per_seq, BLOCK_SIZE - 1)
        ce = F.cross_entropy(logits[:, :, 1:].float().flatten(0, 2), labels.flatten(), reduction="none")
        loss = (ce.view_as(labels) * weights).sum(-1).mean() / weights.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    log(f"drafter: {cfg.drafter_steps} steps, loss {losses[0]:.3f} -> {sum(losses[-50:]) / len(losses[-50:]):.3f}")
    return drafter, losses


def _config_json(dims: Qwen3Dims, architecture: str, **extra) -> dict:
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


def save_target(out_dir: Path, target: Qwen3Target) -> None:
    from safetensors.torch import save_file

    target_dir = out_dir / "target"
    target_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in target.state_dict().items()},
              str(target_dir / "model.safetensors"), metadata={"format": "pt"})
    (target_dir / "config.json").write_text(json.dumps(_config_json(TARGET_DIMS, "Qwen3ForCausalLM"), indent=2) + "\n")
    (target_dir / "generation_config.json").write_text(json.dumps({"do_sample": False}) + "\n")
    write_hf_tokenizer(target_dir)


def save_drafter(out_dir: Path, drafter: DFlashDrafter) -> None:
    from safetensors.torch import save_file

    drafter_dir = out_dir / "drafter"
    drafter_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in drafter.state_dict().items()},
              str(drafter_dir / "model.safetensors"), metadata={"format": "pt"})
    (drafter_dir / "config.json").write_text(json.dumps(_config_json(
        drafter.d, "DFlashDraftModel",
        dflash_config={"mask_token_id": MASK_ID, "target_layer_ids": drafter.d.target_layer_ids},
        block_size=BLOCK_SIZE,
    ), indent=2) + "\n")


TARGET_FIELDS = ("seed", "seq_len", "target_steps", "target_batch", "target_lr", "held_out_every")


def reuse_target(source: Path, out_dir: Path, cfg: TrainConfig, device) -> tuple[Qwen3Target, dict]:
    """The target of the pair in `source` (an earlier `dflash-fi train` output), copied into out_dir.

    Returns the target in fp32 on `device` and the parts of the source's training record that describe it.
    The target settings of `cfg` must be the ones it was trained with, or the record would describe another model.
    """
    from safetensors.torch import load_file

    from dflash_fi.reference.model import load_config

    source = Path(source)
    record_path = source / "training.json"
    if not record_path.is_file() or not (source / "prompts.json").is_file():
        raise FileNotFoundError(f"--target-from {source}: needs target/, prompts.json and training.json "
                                "as `dflash-fi train` writes them")
    record = json.loads(record_path.read_text())
    if Qwen3Dims.from_config(load_config(source / "target")) != TARGET_DIMS:
        raise ValueError(f"--target-from {source}: its target is not this recipe's architecture")
    changed = [k for k in TARGET_FIELDS if record["config"].get(k) != getattr(cfg, k)]
    if changed:
        raise ValueError(f"--target-from {source}: trained with other target settings ({', '.join(changed)})")
    if Path(out_dir).resolve() != source.resolve():
        shutil.copytree(source / "target", Path(out_dir) / "target", dirs_exist_ok=True)
        shutil.copy2(source / "prompts.json", Path(out_dir) / "prompts.json")
    target = Qwen3Target(TARGET_DIMS)
    target.load_state_dict(load_file(str(source / "target" / "model.safetensors")))
    weights = (source / "target" / "model.safetensors").read_bytes()
    described = {k: record[k] for k in ("target_params", "target_loss")}
    described["target_training"] = record.get("target_training") or {
        k: record[k] for k in ("device", "python", "torch")} | {"seconds": record["seconds"]["target"]}
    described["target_training"]["weights_sha256"] = hashlib.sha256(weights).hexdigest()
    return target.float().to(device), described


def train(out_dir: Path, smoke: bool = False, device: str | None = None, max_files: int | None = None,
          overrides: dict[str, str] | None = None, target_from: Path | None = None,
          command: str | None = None) -> dict:
    from dflash_fi.evaluate import evaluate_pair
    from dflash_fi.stack import git_commit

    cfg = (TrainConfig.smoke() if smoke else TrainConfig()).with_overrides(overrides or {})
    drafter_dims(cfg)  # bad drafter settings fail before any training
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    torch.manual_seed(cfg.seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def log(msg: str) -> None:
        lines.append(msg)
        tqdm.write(msg)

    t0 = time.time()
    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    train_docs, held = load_corpus(cfg, max_files=max_files)
    docs = [d for _, d in train_docs]
    if target_from is not None:
        target, target_record = reuse_target(Path(target_from), out_dir, cfg, dev)
        log(f"target: reused from {target_from} (sha256 {target_record['target_training']['weights_sha256'][:12]})")
    else:
        prompts = held_out_prompts(held, 64 if not smoke else 4)
        (out_dir / "prompts.json").write_text(json.dumps({
            "source": f"held-out CPython {platform.python_version()} standard library files (1 in {cfg.held_out_every})",
            "prompts": prompts,
        }, indent=1) + "\n")
        target, target_losses = train_target(cfg, docs, dev, dtype, log)
        save_target(out_dir, target)
        target_record = {
            "target_params": param_count(target),
            "target_loss": {"first": target_losses[0], "last50": sum(target_losses[-50:]) / len(target_losses[-50:])},
            "target_training": {"device": device_name, "python": platform.python_version(), "torch": torch.__version__,
                                "seconds": round(time.time() - t0, 1)},
        }
    prompts = json.loads((out_dir / "prompts.json").read_text())["prompts"]
    log(f"corpus: {len(train_docs)} training files ({sum(len(d) for _, d in train_docs)} bytes), "
        f"{len(held)} held out, {len(prompts)} prompts")
    t_drafter = time.time()
    data = greedy_continuations(cfg, target, docs, dev, dtype, log)
    drafter, drafter_losses = train_drafter(cfg, target, data, dev, dtype, log)
    save_drafter(out_dir, drafter)
    t_end = time.time()
    evaluation = evaluate_pair(out_dir / "target", out_dir / "drafter", prompts[:cfg.eval_prompts],
                               cfg.eval_new_tokens, device=str(dev))
    report = {
        "config": asdict(cfg),
        "overrides": dict(overrides or {}),
        "command": command,
        "git_commit": git_commit(),
        "device": device_name,
        "python": platform.python_version(),
        "torch": torch.__version__,
        **target_record,
        "drafter_params": param_count(drafter),
        "drafter_loss": {"first": drafter_losses[0], "last50": sum(drafter_losses[-50:]) / len(drafter_losses[-50:])},
        "seconds": {"continuations_and_drafter": round(t_end - t_drafter, 1), "total_training": round(t_end - t0, 1)},
        "evaluation": evaluation,
    }
    (out_dir / "training.json").write_text(json.dumps(report, indent=1) + "\n")
    log(json.dumps({k: report[k] for k in ("target_params", "drafter_params", "seconds")}))
    log(json.dumps({k: evaluation[k] for k in ("tau_noncausal", "tau_causal", "lossless_fraction")}))
    return report
