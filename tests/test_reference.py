"""The embedded pair and the reference decoder: what vLLM must reproduce."""

import json

import pytest
import torch

from dflash_fi.evaluate import DEFAULT_DRAFTER, DEFAULT_TARGET, evaluate_pair, load_prompts
from dflash_fi.reference.decode import greedy_generate
from dflash_fi.reference.model import CAUSAL, NON_CAUSAL, causal_end_aligned_mask, load_pair
from dflash_fi.reference.paged_attention import paged_attention_reference
from dflash_fi.tokenizer import decode, prompt_ids


@pytest.fixture(scope="module")
def reference():
    from dflash_fi.evaluate import DEFAULT_NEW_TOKENS, DEFAULT_NUM_PROMPTS

    return evaluate_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=DEFAULT_NUM_PROMPTS), DEFAULT_NEW_TOKENS)


def test_non_causal_drafting_reaches_its_target(reference):
    assert reference["tau_noncausal"] >= 3.5, reference
    assert reference["tau_causal"] < reference["tau_noncausal"], reference


def test_causal_block_attention_costs_at_least_half_a_token(reference):
    assert reference["tau_causal"] <= reference["tau_noncausal"] - 0.5, reference


def test_model_card_is_generated_from_the_shipped_pair(reference):
    from dflash_fi.model_card import render_model_card

    training = json.loads((DEFAULT_TARGET.parent / "training.json").read_text())
    assert (DEFAULT_TARGET.parent / "MODEL_CARD.md").read_text() == render_model_card(training, reference)


def test_gpu_walkthrough_ran_the_shipped_weights():
    import hashlib

    from dflash_fi.ledger import all_records
    from dflash_fi.walkthrough import latest_walkthrough

    latest = latest_walkthrough(all_records())
    if latest is None:
        pytest.skip("no GPU walkthrough recorded under runs/")
    for name, path in (("target", DEFAULT_TARGET), ("drafter", DEFAULT_DRAFTER)):
        shipped = hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()
        for record in latest[1].values():
            assert record["models"][name]["weights_sha256"]["model.safetensors"] == shipped


def test_fp32_speculative_output_equals_greedy(reference):
    assert reference["lossless_fraction"] >= 0.95, reference["differing_prompts"]


def test_shipped_pair_is_small_and_complete():
    files = [p for d in (DEFAULT_TARGET, DEFAULT_DRAFTER) for p in d.iterdir()]
    assert sum(p.stat().st_size for p in files) <= 15 * 2**20
    drafter = json.loads((DEFAULT_DRAFTER / "config.json").read_text())
    assert drafter["architectures"] == ["DFlashDraftModel"] and drafter["model_type"] == "qwen3"
    assert set(drafter["dflash_config"]) == {"mask_token_id", "target_layer_ids"}
    target = json.loads((DEFAULT_TARGET / "config.json").read_text())
    assert target["head_dim"] == drafter["head_dim"] == 128
    assert target["num_key_value_heads"] == drafter["num_key_value_heads"]


def test_target_writes_plausible_python():
    target, _ = load_pair(DEFAULT_TARGET, DEFAULT_DRAFTER)
    text = decode(greedy_generate(target, prompt_ids("def fibonacci(n):\n"), 80))
    assert text.isascii() and "\n    " in text, text
    assert any(word in text for word in ("return", "if ", "for ", "self", "=")), text


def test_transformers_loads_the_target_and_agrees_with_the_reference():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(DEFAULT_TARGET, torch_dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(DEFAULT_TARGET)
    ours, _ = load_pair(DEFAULT_TARGET, DEFAULT_DRAFTER)
    ids = prompt_ids("import os\nimport sys\n\ndef main(argv):\n")
    assert tok.encode("import os", add_special_tokens=False) == ids[1:10]
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits
        mine, _ = ours(torch.tensor([ids]))
    torch.testing.assert_close(mine, theirs, atol=2e-4, rtol=2e-4)


def test_causal_mode_changes_only_what_later_block_tokens_can_see():
    target, drafter = load_pair(DEFAULT_TARGET, DEFAULT_DRAFTER)
    ids = torch.tensor([prompt_ids("class Parser:\n    def __init__(self, text):\n")])
    with torch.no_grad():
        _, layers = target(ids)
        ctx = drafter.context_features(layers)
        args = (target, ctx, torch.tensor([[ids.shape[1]]]), torch.tensor([[ord("\n")]]))
        nc, c = drafter(*args, mode=NON_CAUSAL), drafter(*args, mode=CAUSAL)
    assert not torch.allclose(nc[0, 0, 1:], c[0, 0, 1:])  # block tokens differ...
    with pytest.raises(ValueError, match="unknown block attention mode"):
        drafter(*args, mode="bidirectional")


def test_paged_reference_attention_matches_dense_attention():
    torch.manual_seed(0)
    seq_lens, q_lens, bs, hkv, d = [37, 16, 70], [16, 16, 5], 16, 2, 128
    blocks = [(s + bs - 1) // bs for s in seq_lens]
    kv = torch.randn(sum(blocks) + 3, 2, bs, hkv, d)
    table = torch.zeros(3, max(blocks), dtype=torch.int32)
    perm = torch.randperm(sum(blocks) + 3)[: sum(blocks)]
    table[0, :3], table[1, :1], table[2, :5] = perm[:3], perm[3:4], perm[4:9]
    qo = torch.tensor([0, 16, 32, 37])
    q = torch.randn(37, 4, d)
    for causal in (True, False):
        out = paged_attention_reference(q, kv, table, torch.tensor(seq_lens), qo, causal)
        for r, (s, L) in enumerate(zip(seq_lens, q_lens)):
            k = kv[table[r, : blocks[r]].long(), 0].reshape(-1, hkv, d)[:s].repeat_interleave(2, 1)
            v = kv[table[r, : blocks[r]].long(), 1].reshape(-1, hkv, d)[:s].repeat_interleave(2, 1)
            mask = causal_end_aligned_mask(L, s) if causal else None
            dense = torch.nn.functional.scaled_dot_product_attention(
                q[qo[r]:qo[r + 1]].transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask)
            torch.testing.assert_close(out[qo[r]:qo[r + 1]], dense.transpose(0, 1), atol=1e-4, rtol=1e-4)
