"""Independent pure-PyTorch reference: Qwen3 target, DFlash drafter, greedy speculative decoding.

Imports no vLLM. It predicts what vLLM must show at every step: the acceptance length with non-causal
block attention (correct) and with causal block attention (what a backend that ignores the flag computes).
"""
