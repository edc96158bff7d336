"""The shipped pair: small, complete, what its model card says, and what the reference decoder measures."""

import hashlib
import json
import re

import pytest

import dflash_fi.summary as S

from dflash_fi.errors import BadInput, MissingModelFiles
from dflash_fi.models import (CPU_REFERENCE_NEW_TOKENS, CPU_REFERENCE_PROMPTS, DEFAULT_DRAFTER, DEFAULT_TARGET,
                              MODELS_DIR, check_model_dir, load_prompts)
from dflash_fi.models.card import MIN_CAUSAL_GAP, MIN_TAU_NONCAUSAL
from dflash_fi.reference.evaluate import evaluate_pair
from dflash_fi.vocabulary import DRAFT_BLOCK_SIZE


@pytest.fixture(scope="module")
def reference():
    return evaluate_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=CPU_REFERENCE_PROMPTS), CPU_REFERENCE_NEW_TOKENS)


def test_non_causal_drafting_reaches_its_target(reference):
    assert reference["tau_noncausal"] >= MIN_TAU_NONCAUSAL, reference


def test_causal_block_attention_costs_at_least_half_a_token(reference):
    assert reference["tau_causal"] <= reference["tau_noncausal"] - MIN_CAUSAL_GAP, reference


def test_fp32_speculative_output_equals_greedy(reference):
    assert reference["lossless_fraction"] >= 0.95, reference["differing_prompts"]


def test_model_card_is_the_rendered_record(reference):
    from dflash_fi.models.card import render_model_card

    training = json.loads((MODELS_DIR / "training.json").read_text())
    assert (MODELS_DIR / "MODEL_CARD.md").read_text() == render_model_card(training, reference)


def test_model_card_states_what_the_configs_say():
    """Read the card's table back and compare it with config.json, independently of the card's template."""
    card = (MODELS_DIR / "MODEL_CARD.md").read_text()
    for name, path in (("target", DEFAULT_TARGET), ("drafter", DEFAULT_DRAFTER)):
        config = json.loads((path / "config.json").read_text())
        row = next(line for line in card.splitlines() if line.startswith(f"| {name} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1].startswith(config["architectures"][0])
        assert cells[3:] == [str(config["num_hidden_layers"]), str(config["hidden_size"]),
                             str(config["intermediate_size"]),
                             f"{config['num_attention_heads']}/{config['num_key_value_heads']}", str(config["head_dim"])]
    drafter = json.loads((DEFAULT_DRAFTER / "config.json").read_text())
    assert f"blocks of {drafter['block_size']} tokens" in card
    assert str(drafter["dflash_config"]["target_layer_ids"]) in card


def test_shipped_pair_is_small_and_complete():
    files = [p for d in (DEFAULT_TARGET, DEFAULT_DRAFTER) for p in d.iterdir()]
    assert sum(p.stat().st_size for p in files) <= 15 * 2**20
    drafter = json.loads((DEFAULT_DRAFTER / "config.json").read_text())
    assert drafter["architectures"] == ["DFlashDraftModel"] and drafter["model_type"] == "qwen3"
    assert set(drafter["dflash_config"]) == {"mask_token_id", "target_layer_ids"}
    assert drafter["block_size"] == DRAFT_BLOCK_SIZE  # the vocabulary's draft block is the drafter's
    target = json.loads((DEFAULT_TARGET / "config.json").read_text())
    assert target["head_dim"] == drafter["head_dim"] == 128
    assert target["num_key_value_heads"] == drafter["num_key_value_heads"]


@pytest.mark.skipif(not list(S.EVIDENCE_DIR.glob("*.json")), reason="no GPU evidence pass committed yet")
def test_gpu_walkthrough_ran_the_shipped_weights():
    models = S.read().entry(S.Section.WALKTHROUGH).data["models"]
    for name, path in (("target", DEFAULT_TARGET), ("drafter", DEFAULT_DRAFTER)):
        shipped = hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()
        assert models[name]["weights_sha256"]["model.safetensors"] == shipped


@pytest.mark.parametrize("n", [0, -3, 10**6])
def test_prompt_counts_out_of_range_are_refused(n):
    with pytest.raises(BadInput, match=re.escape("must be at least 1 and at most")):
        load_prompts(n=n)


def test_model_paths_that_are_neither_a_model_nor_a_hub_id_are_refused(tmp_path):
    with pytest.raises(MissingModelFiles, match="neither an existing model directory nor a hub id"):
        check_model_dir("drafter", "./missing")
    with pytest.raises(MissingModelFiles, match="has no config.json"):
        check_model_dir("target", str(tmp_path))
    assert check_model_dir("target", "Qwen/Qwen3-4B") == "Qwen/Qwen3-4B"


def test_reference_with_a_missing_prompts_file_names_that_file():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "dflash_fi.cli", "reference", "--prompts-file", "/nonexistent"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()  # one line, no traceback
    assert "/nonexistent" in line and "embedded models are missing" not in line
