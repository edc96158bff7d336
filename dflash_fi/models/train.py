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
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from dflash_fi.errors import BadInput, MissingModelFiles
from dflash_fi.models.corpus import held_out_prompts, load_corpus, sample_windows
from dflash_fi.models.export import save_drafter, save_target
from dflash_fi.models.recipe import LOSS_DECAY, TARGET_DIMS, TARGET_FIELDS, TrainConfig, drafter_dims
from dflash_fi.reference.drafter import NON_CAUSAL, DFlashDrafter
from dflash_fi.reference.qwen3 import Qwen3Dims, Qwen3Target
from dflash_fi.reference.weights import init_weights, load_config, param_count
from dflash_fi.vocabulary import DRAFT_BLOCK_SIZE

def lr_at(step: int, total: int, peak: float, warmup: int = 100) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(total - warmup, 1)))


def optimize(module: torch.nn.Module, steps: int, peak_lr: float, batch_loss, desc: str, log) -> list[float]:
    """AdamW with warm-up and cosine decay on `module`'s parameters; `batch_loss()` gives each step's loss."""
    opt = torch.optim.AdamW(module.parameters(), lr=peak_lr, betas=(0.9, 0.95), weight_decay=0.1)
    losses = []
    for step in tqdm(range(steps), desc=desc, mininterval=5):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, peak_lr)
        loss = batch_loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    log(f"{desc}: {steps} steps, loss {losses[0]:.3f} -> {loss_summary(losses)['last50']:.3f}")
    return losses


def loss_summary(losses: list[float]) -> dict:
    return {"first": losses[0], "last50": sum(losses[-50:]) / len(losses[-50:])}


def train_target(cfg, docs, device, dtype, log) -> tuple[Qwen3Target, list[float]]:
    gen = torch.Generator().manual_seed(cfg.seed)
    target = Qwen3Target(TARGET_DIMS)
    init_weights(target, seed=cfg.seed)
    target.to(device)

    def batch_loss():
        batch = sample_windows(docs, cfg.target_batch, cfg.seq_len + 1, gen).to(device)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            logits, _ = target(batch[:, :-1])
            return F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())

    return target, optimize(target, cfg.target_steps, cfg.target_lr, batch_loss, "target", log)


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
    weights = torch.exp(-(torch.arange(1, DRAFT_BLOCK_SIZE, device=device) - 1) / LOSS_DECAY)
    lowest, highest = cfg.gen_prompt_len // 2, cfg.seq_len - DRAFT_BLOCK_SIZE

    def batch_loss():
        rows = torch.randint(0, len(data), (cfg.drafter_batch,), generator=gen)
        seq = data[rows].to(device)
        anchors = torch.randint(lowest, highest + 1, (cfg.drafter_batch, cfg.anchors_per_seq), generator=gen).to(device)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            with torch.no_grad():
                _, layers = target(seq)
            context = drafter.context_features([layer.detach() for layer in layers])
            logits = drafter(target, context, anchors, seq.gather(1, anchors), NON_CAUSAL)
        labels = seq.gather(1, (anchors[:, :, None] + torch.arange(1, DRAFT_BLOCK_SIZE, device=device)).flatten(1))
        labels = labels.view(cfg.drafter_batch, cfg.anchors_per_seq, DRAFT_BLOCK_SIZE - 1)
        ce = F.cross_entropy(logits[:, :, 1:].float().flatten(0, 2), labels.flatten(), reduction="none")
        return (ce.view_as(labels) * weights).sum(-1).mean() / weights.sum()

    return drafter, optimize(drafter, cfg.drafter_steps, cfg.drafter_lr, batch_loss, "drafter", log)


def reuse_target(source: Path, out_dir: Path, cfg: TrainConfig, device) -> tuple[Qwen3Target, dict]:
    """The target of the pair in `source` (an earlier `dflash-fi train` output), copied into out_dir.

    Returns the target in fp32 on `device` and the parts of the source's training record that describe it.
    The target settings of `cfg` must be the ones it was trained with, or the record would describe another model.
    """
    from safetensors.torch import load_file

    source = Path(source)
    record_path = source / "training.json"
    if not record_path.is_file() or not (source / "prompts.json").is_file():
        raise MissingModelFiles(f"--target-from {source}: needs target/, prompts.json and training.json "
                                "as `dflash-fi train` writes them")
    record = json.loads(record_path.read_text())
    if Qwen3Dims.from_config(load_config(source / "target")) != TARGET_DIMS:
        raise BadInput(f"--target-from {source}: its target is not this recipe's architecture")
    changed = [k for k in TARGET_FIELDS if record["config"].get(k) != getattr(cfg, k)]
    if changed:
        raise BadInput(f"--target-from {source}: trained with other target settings ({', '.join(changed)})")
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
          command: str | None = None, force: bool = False) -> dict:
    """Train a pair into `out_dir`. A folder that already holds a trained pair (its training.json) is refused unless
    `force`: the shipped pair is one such folder, and a smoke run would replace it with a useless one."""
    from dflash_fi.reference.evaluate import evaluate_pair
    from dflash_fi.stack import git_commit, require_gpu

    cfg = (TrainConfig.smoke() if smoke else TrainConfig()).with_overrides(overrides or {})
    drafter_dims(cfg)  # bad drafter settings fail before any training
    if (Path(out_dir) / "training.json").exists() and not force:
        raise BadInput(f"{out_dir} already holds a trained pair (training.json): choose another --out, or give --force "
                       "to replace it")
    if device == "cuda":
        require_gpu("training on --device cuda")
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    torch.manual_seed(cfg.seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = tqdm.write

    t0 = time.time()
    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    train_docs, held = load_corpus(cfg.held_out_every, max_files=max_files)
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
            "target_loss": loss_summary(target_losses),
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
        "drafter_loss": loss_summary(drafter_losses),
        "seconds": {"continuations_and_drafter": round(t_end - t_drafter, 1), "total_training": round(t_end - t0, 1)},
        "evaluation": evaluation,
    }
    (out_dir / "training.json").write_text(json.dumps(report, indent=1) + "\n")
    log(json.dumps({k: report[k] for k in ("target_params", "drafter_params", "seconds")}))
    log(json.dumps({k: evaluation[k] for k in ("tau_noncausal", "tau_causal", "lossless_fraction")}))
    return report
