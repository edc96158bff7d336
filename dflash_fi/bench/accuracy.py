"""How far FlashInfer's non-causal paged prefill is from the reference attention (notebook 03, GPU tests)."""

from __future__ import annotations

from dflash_fi.bench.kernels import Inputs, Shape, flashinfer_kernel

# Small DFlash-shaped batches: requests of one 16-query block, contexts that end mid-page.
ACCURACY_SHAPES = (Shape(batch=4, context=45, num_qo_heads=4, num_kv_heads=2, kv_dtype="auto"),
                   Shape(batch=4, context=45, num_qo_heads=4, num_kv_heads=2, kv_dtype="fp8"))
# bf16 inputs, fp32 reference: the kernels' rounding stays far under this; a wrong mask does not.
ERROR_BOUND = 0.05


def kernel_errors(backends=("fa2", "auto"), seed: int = 0) -> list[dict]:
    """For each KV dtype and FlashInfer backend: the largest error against the non-causal reference, and the
    distance to the causal reference (how wrong a causally planned draft would be)."""
    import torch

    from dflash_fi.reference.paged_attention import paged_attention_reference

    workspace = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    rows = []
    for shape in ACCURACY_SHAPES:
        inputs = Inputs(shape, seed=seed)
        non_causal = inputs.reference()
        kv = torch.stack([inputs.k.float(), inputs.v.float()], dim=1)
        causal = paged_attention_reference(inputs.q.float(), kv, inputs.block_table, inputs.seq_lens, inputs.qo_indptr,
                                           causal=True, sm_scale=inputs.scale)
        for backend in backends:
            kernel = flashinfer_kernel(inputs, backend, workspace)
            kernel.out.fill_(float("nan"))
            kernel.run()
            torch.cuda.synchronize()
            out = kernel.out.float()
            rows.append({"kv_dtype": "fp8-e4m3" if shape.kv_dtype == "fp8" else "bf16", "backend": backend,
                         "ran": kernel.ran, "max_abs_err": (out - non_causal).abs().max().item(),
                         "distance_to_causal": (out - causal).abs().max().item()})
    return rows


def error_table(rows: list[dict]) -> str:
    lines = ["| KV cache | backend asked | kernel run | max abs error vs non-causal reference | "
             "distance to the causal reference |", "|---|---|---|---|---|"]
    lines += [f"| {r['kv_dtype']} | {r['backend']} | {r['ran']} | {r['max_abs_err']:.2e} | {r['distance_to_causal']:.2e} |"
              for r in rows]
    return "\n".join(lines)
