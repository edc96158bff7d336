"""The reference: an independent pure-PyTorch Qwen3 target, DFlash drafter and greedy speculative decoder.

Imports no vLLM. It predicts what vLLM must show at every step: the acceptance length with non-causal
block attention (correct) and with causal block attention (what a backend computes when it ignores the
flag), and it holds the paged attention every FlashInfer kernel is checked against.

    qwen3.py            the target and its layers        drafter.py   the DFlash drafter, its block mask
    weights.py          HF-format loading                decode.py    greedy and speculative decoding
    evaluate.py         a pair's tau, both ways          tokenizer.py the byte-level tokenizer
    paged_attention.py  attention over vLLM's paged KV cache (the kernels' reference)

May import: dflash_fi.vocabulary, dflash_fi.errors.
"""

MAY_IMPORT = ("dflash_fi.vocabulary", "dflash_fi.errors")
