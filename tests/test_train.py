"""`dflash-fi train --smoke`: every stage of the recipe on a CPU, producing a loadable HF pair."""

import json

import torch

from dflash_fi.reference.model import load_pair
from dflash_fi.train import train


def test_smoke_training_writes_a_loadable_pair(tmp_path):
    report = train(tmp_path, smoke=True, device="cpu")
    assert report["target_params"] > 3_000_000 and report["evaluation"]["n_prompts"] >= 1
    for name in ("target/config.json", "target/model.safetensors", "target/tokenizer.json",
                 "drafter/config.json", "drafter/model.safetensors", "prompts.json", "training.json"):
        assert (tmp_path / name).is_file(), name
    target, drafter = load_pair(tmp_path / "target", tmp_path / "drafter")
    assert drafter.d.target_layer_ids == [1, 3] and drafter.d.mask_token_id == 257
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "target", torch_dtype=torch.float32)
    ids = torch.tensor([[256, 100, 101, 102]])
    torch.testing.assert_close(hf(ids).logits, target(ids)[0], atol=1e-4, rtol=1e-4)
    assert json.loads((tmp_path / "prompts.json").read_text())["prompts"]


def test_training_is_deterministic(tmp_path):
    a = train(tmp_path / "a", smoke=True, device="cpu")
    b = train(tmp_path / "b", smoke=True, device="cpu")
    assert a["target_loss"] == b["target_loss"] and a["drafter_loss"] == b["drafter_loss"]
