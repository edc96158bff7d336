"""Byte-level tokenizer of the embedded models: ids 0..255 are bytes, then two special tokens."""

from __future__ import annotations

import json
from pathlib import Path

DOC_TOKEN, MASK_TOKEN = "<|doc|>", "<|mask|>"
DOC_ID, MASK_ID = 256, 257  # MASK never occurs in data: DFlash fills draft blocks with it
VOCAB_SIZE = 258


def encode(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def prompt_ids(text: str) -> list[int]:
    """A prompt as the models saw documents in training: document start, then bytes."""
    return [DOC_ID, *encode(text)]


def decode(ids: list[int]) -> str:
    return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in character for every byte (what HF ByteLevel expects)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def write_hf_tokenizer(model_dir: Path) -> None:
    """tokenizer.json + tokenizer_config.json that transformers and vLLM load (PreTrainedTokenizerFast)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {char: byte for byte, char in _bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(DOC_TOKEN, special=True), AddedToken(MASK_TOKEN, special=True)])
    assert tok.token_to_id(DOC_TOKEN) == DOC_ID and tok.token_to_id(MASK_TOKEN) == MASK_ID
    model_dir = Path(model_dir)
    tok.save(str(model_dir / "tokenizer.json"))
    (model_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": DOC_TOKEN,
        "eos_token": DOC_TOKEN,
        "pad_token": DOC_TOKEN,
        "add_bos_token": False,
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
    }, indent=2) + "\n")
