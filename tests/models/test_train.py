"""`dflash-fi train --smoke`: every stage of the recipe on a CPU, producing a loadable HF pair."""

import json

import pytest
import torch

from dflash_fi.errors import BadInput
from dflash_fi.models.recipe import TrainConfig
from dflash_fi.models.train import train
from dflash_fi.reference.weights import load_pair


def test_smoke_training_writes_a_loadable_pair(tmp_path):
    report = train(tmp_path, smoke=True, device="cpu")
    assert report["target_params"] > 3_000_000 and report["evaluation"]["n_prompts"] >= 1
    for name in ("target/config.json", "target/model.safetensors", "target/tokenizer.json",
                 "drafter/config.json", "drafter/model.safetensors", "prompts.json", "training.json"):
        assert (tmp_path / name).is_file(), name
    target, drafter = load_pair(tmp_path / "target", tmp_path / "drafter")
    assert drafter.d.target_layer_ids == list(TrainConfig().target_layer_ids) and drafter.d.mask_token_id == 257
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "target", torch_dtype=torch.float32)
    ids = torch.tensor([[256, 100, 101, 102]])
    torch.testing.assert_close(hf(ids).logits, target(ids)[0], atol=1e-4, rtol=1e-4)
    assert json.loads((tmp_path / "prompts.json").read_text())["prompts"]


def test_training_is_deterministic(tmp_path):
    a = train(tmp_path / "a", smoke=True, device="cpu")
    b = train(tmp_path / "b", smoke=True, device="cpu")
    assert a["target_loss"] == b["target_loss"] and a["drafter_loss"] == b["drafter_loss"]


def test_drafter_only_training_reuses_the_target(tmp_path):
    first = train(tmp_path / "a", smoke=True, device="cpu")
    second = train(tmp_path / "b", smoke=True, device="cpu", target_from=tmp_path / "a",
                   overrides={"drafter_intermediate_size": "128", "target_layer_ids": "0,2"})
    assert (tmp_path / "a/target/model.safetensors").read_bytes() == (tmp_path / "b/target/model.safetensors").read_bytes()
    assert second["target_loss"] == first["target_loss"] and second["drafter_params"] < first["drafter_params"]
    assert second["target_training"]["weights_sha256"] and second["overrides"]["target_layer_ids"] == "0,2"
    _, drafter = load_pair(tmp_path / "b/target", tmp_path / "b/drafter")
    assert drafter.d.target_layer_ids == [0, 2] and drafter.d.intermediate_size == 128


@pytest.mark.parametrize("overrides, message", [
    ({"no_such_setting": "1"}, "unknown training setting 'no_such_setting'"),
    ({"drafter_steps": "many"}, "drafter_steps must be int"),
    ({"target_layer_ids": "4"}, "ids of target layers 0..3"),
])
def test_bad_training_settings_fail_before_training(tmp_path, overrides, message):
    with pytest.raises(BadInput, match=message):
        train(tmp_path, smoke=True, device="cpu", overrides=overrides)
    assert not (tmp_path / "training.json").exists()


def test_a_target_trained_with_other_settings_is_refused(tmp_path):
    train(tmp_path / "a", smoke=True, device="cpu")
    with pytest.raises(BadInput, match="trained with other target settings"):
        train(tmp_path / "b", smoke=True, device="cpu", target_from=tmp_path / "a", overrides={"target_steps": "4"})


def test_the_default_recipe_is_the_shipped_pairs():
    """`dflash-fi train` with no settings trains the recipe of the committed pair (whatever --set it was run with)."""
    from dataclasses import asdict

    from dflash_fi.models import MODELS_DIR

    shipped = json.loads((MODELS_DIR / "training.json").read_text())["config"]
    assert json.loads(json.dumps(asdict(TrainConfig()))) == shipped
