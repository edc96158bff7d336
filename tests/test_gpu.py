"""GPU-only: FlashInfer's real kernels against the reference, and the walkthrough's checks on live engines."""

import pytest
import torch

from dflash_fi.reference.paged_attention import paged_attention_reference

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("backend", ["auto", "fa2"])  # fa2 is what an RTX 4090 (SM 8.9) runs
@pytest.mark.parametrize("causal", [False, True])
def test_flashinfer_paged_prefill_matches_reference(backend, causal):
    from flashinfer import BatchPrefillWithPagedKVCacheWrapper

    torch.manual_seed(0)
    dev, bs, hq, hkv, d = "cuda", 16, 4, 2, 128
    seq_lens = torch.tensor([37, 90, 16, 301], dtype=torch.int32)
    q_lens = torch.tensor([16, 16, 16, 16], dtype=torch.int32)  # DFlash blocks
    blocks = (seq_lens + bs - 1) // bs
    kv = torch.randn(int(blocks.sum()) + 4, 2, bs, hkv, d, dtype=torch.bfloat16, device=dev)
    table = torch.zeros(4, int(blocks.max()), dtype=torch.int32, device=dev)
    indices = torch.randperm(kv.shape[0], device=dev)[: int(blocks.sum())].to(torch.int32)
    indptr = torch.zeros(5, dtype=torch.int32)
    indptr[1:] = torch.cumsum(blocks, 0)
    for r in range(4):
        table[r, : blocks[r]] = indices[indptr[r]: indptr[r + 1]]
    qo = torch.zeros(5, dtype=torch.int32)
    qo[1:] = torch.cumsum(q_lens, 0)
    q = torch.randn(int(qo[-1]), hq, d, dtype=torch.bfloat16, device=dev)
    last = seq_lens - (blocks - 1) * bs
    wrapper = BatchPrefillWithPagedKVCacheWrapper(torch.empty(128 << 20, dtype=torch.uint8, device=dev), "NHD",
                                                  backend=backend)
    wrapper.plan(qo, indptr, indices.cpu(), last, hq, hkv, d, bs, causal=causal,
                 q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    assert wrapper._causal is causal
    out = wrapper.run(q, kv)
    ref = paged_attention_reference(q, kv, table, seq_lens, qo, causal)
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=2e-2)
    if not causal:  # the block's first query must see the block's later keys
        causal_ref = paged_attention_reference(q, kv, table, seq_lens, qo, True)
        assert (out[:1].float() - causal_ref[:1].float()).abs().max() > 1e-2


def test_walkthrough_checks_pass_on_live_engines():
    from dflash_fi.evaluate import DEFAULT_DRAFTER, DEFAULT_TARGET, evaluate_pair, load_prompts
    from dflash_fi.walkthrough import run_gpu_walkthrough

    reference = evaluate_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=32), 128, device="cuda")
    _, checks = run_gpu_walkthrough(32, 128, reference)
    failed = [c.line() for c in checks if not c.passed]
    assert not failed, "\n".join(failed)
