"""The reference: target, drafter, decoder and paged attention, independent of vLLM."""

import pytest
import torch

from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_TARGET
from dflash_fi.reference.decode import greedy_generate
from dflash_fi.reference.drafter import CAUSAL, NON_CAUSAL, block_attention_mask
from dflash_fi.reference.paged_attention import paged_attention_reference
from dflash_fi.reference.qwen3 import causal_end_aligned_mask
from dflash_fi.reference.tokenizer import decode, prompt_ids
from dflash_fi.reference.weights import load_pair
from dflash_fi.vocabulary import DRAFT_BLOCK_SIZE


@pytest.fixture(scope="module")
def pair():
    return load_pair(DEFAULT_TARGET, DEFAULT_DRAFTER)


def test_block_masks():
    anchors, context = torch.tensor([[5]]), 8
    nc, c = (block_attention_mask(anchors, context, mode)[0] for mode in (NON_CAUSAL, CAUSAL))
    assert nc.shape == (DRAFT_BLOCK_SIZE, context + DRAFT_BLOCK_SIZE)
    # the context part: strictly before the anchor, in both modes
    assert torch.equal(nc[:, :context], c[:, :context]) and nc[:, :5].all() and not nc[:, 5:context].any()
    block_nc, block_c = nc[:, context:], c[:, context:]
    assert block_nc.all()  # non-causal: every block query sees the whole block
    assert torch.equal(block_c, torch.tril(torch.ones_like(block_c)))  # causal: block tokens 0..k
    with pytest.raises(ValueError, match="unknown block attention mode"):
        block_attention_mask(anchors, context, "bidirectional")


def test_causal_mode_hides_later_block_tokens_and_only_them(pair):
    """Causal: the anchor's draft cannot depend on the tokens after it in its block; non-causal: it does."""
    target, drafter = pair
    ids = torch.tensor([prompt_ids("class Parser:\n    def __init__(self, text):\n")])
    with torch.no_grad():
        _, layers = target(ids)
        ctx = drafter.context_features(layers)
        args = (target, ctx, torch.tensor([[ids.shape[1]]]), torch.tensor([[ord("\n")]]))
        out, original = {}, drafter.d.mask_token_id
        try:
            for mask_token in (original, ord("x")):  # change every block token after the anchor
                drafter.d.mask_token_id = mask_token
                out[mask_token] = {mode: drafter(*args, mode=mode) for mode in (NON_CAUSAL, CAUSAL)}
        finally:
            drafter.d.mask_token_id = original
    first, second = out.values()
    torch.testing.assert_close(first[CAUSAL][0, 0, 0], second[CAUSAL][0, 0, 0])  # anchor blind to later tokens
    assert not torch.allclose(first[NON_CAUSAL][0, 0, 0], second[NON_CAUSAL][0, 0, 0])  # non-causal: it sees them
    assert not torch.allclose(first[NON_CAUSAL][0, 0, 1:], first[CAUSAL][0, 0, 1:])  # and the modes draft apart


def test_target_writes_plausible_python(pair):
    target, _ = pair
    text = decode(greedy_generate(target, prompt_ids("def fibonacci(n):\n"), 80))
    assert text.isascii() and "\n    " in text, text
    assert any(word in text for word in ("return", "if ", "for ", "self", "=")), text


def test_transformers_loads_the_target_and_agrees_with_the_reference(pair):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(DEFAULT_TARGET, torch_dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(DEFAULT_TARGET)
    ours, _ = pair
    ids = prompt_ids("import os\nimport sys\n\ndef main(argv):\n")
    assert tok.encode("import os", add_special_tokens=False) == ids[1:10]
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits
        mine, _ = ours(torch.tensor([ids]))
    torch.testing.assert_close(mine, theirs, atol=2e-4, rtol=2e-4)


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


def test_a_text_scored_by_the_drafter_gives_the_decoders_own_counts_on_its_own_text():
    """score_text replays speculative decoding on a given text (notebook 06 scores engines' texts with it)."""
    import torch

    from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_TARGET, load_prompts
    from dflash_fi.reference.decode import score_text, speculative_generate
    from dflash_fi.reference.drafter import NON_CAUSAL
    from dflash_fi.reference.tokenizer import prompt_ids
    from dflash_fi.reference.weights import load_pair

    target, drafter = load_pair(DEFAULT_TARGET, DEFAULT_DRAFTER)
    prompt = prompt_ids(load_prompts(n=1)[0])
    with torch.inference_mode():
        own = speculative_generate(target, drafter, prompt, 48, NON_CAUSAL)
    scored = score_text(target, drafter, prompt, tuple(own.tokens))
    assert (scored.num_drafts, scored.num_accepted) == (own.num_drafts, own.num_accepted)
    other = tuple(own.tokens[:8]) + tuple((t + 1) % 256 for t in own.tokens[8:])  # a text the drafter cannot guess
    assert score_text(target, drafter, prompt, other).num_accepted < own.num_accepted
