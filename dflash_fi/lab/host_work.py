"""The host work of a FlashInfer draft's metadata, on the CPU: what the model runner builds for DFlash's draft
layers on every target step, and whether a draft build waits for the GPU.

vLLM 0.22.1's model runner builds metadata for every attention group on every step. With a FLASH_ATTN target,
DFlash's FlashInfer draft layers are a group of their own: the runner hands their builder each *target* batch
(causal), although those layers only ever run on the drafter's own non-causal builds. Here the draft layers'
real builder (`RoutingLab`) gets the target batches the runner would give it, and a draft batch as DFlash
builds it (no host copy of the sequence lengths, only an upper bound). On a GPU, `bound_planning_errors` runs
step 7's real builder and FlashInfer's real kernel, planned from the bounds and from the exact lengths.
"""

from __future__ import annotations

from dflash_fi.lab.batches import STANDARD_BATCHES, Batch, common_metadata
from dflash_fi.lab.routing import RoutingLab
from dflash_fi.vocabulary import DRAFT_BLOCK_SIZE, HOPPER, KV_PAGE_SIZE

Q = DRAFT_BLOCK_SIZE
# Draft batches whose host bound exceeds the exact length: short contexts where the bound crosses a page, long
# ones whose KV FlashInfer would split into chunks (where a bound can add a chunk), one request alone.
BOUND_BATCHES = (Batch("4 short contexts", (Q,) * 4, (37, 90, 150, 301), False, (3, 15, 0, 9)),
                 Batch("2 long contexts", (Q,) * 2, (4000, 8174), False, (15, 15)),
                 Batch("1 request", (Q,), (2047,), False, (15,)))


def runner_builds_for_draft_layers(step: int, cuda_graphs: bool = True, capability=HOPPER) -> list[dict]:
    """Per target batch: whether the draft layers' builder planned anything for it (it is never read)."""
    from vllm.config import set_current_vllm_config

    rows = []
    with RoutingLab(step, capability, cuda_graphs=cuda_graphs) as lab:
        builder, _, config = lab.builders["draft"]
        for batch in (b for b in STANDARD_BATCHES if b.causal):
            with set_current_vllm_config(config):
                md = builder.build(0, common_metadata(batch))
            wrapper = getattr(md.prefill, "wrapper", None)
            decode = getattr(md.decode, "wrapper", None)
            plans = len(getattr(wrapper, "plans", [])) + len(getattr(decode, "plans", []))
            rows.append({"batch": batch.name, "planned": wrapper is not None or decode is not None,
                         "plans_so_far": plans})
    return rows


def draft_build_reads_gpu_lengths(step: int, capability=HOPPER) -> dict:
    """Whether building a DFlash draft batch copied `seq_lens` from the GPU, and what plan() was given."""
    from vllm.config import set_current_vllm_config

    batch = STANDARD_BATCHES[0]
    with RoutingLab(step, capability) as lab:
        builder, _, config = lab.builders["draft"]
        cad = common_metadata(batch)
        with set_current_vllm_config(config):
            md = builder.build(0, cad)
        wrapper = md.prefill.wrapper
        num_reqs = cad.num_reqs
        return {
            "step": step,
            "copied_from_gpu": cad._seq_lens_cpu is not None,
            "planned_indptr": builder.paged_kv_indptr.cpu[: num_reqs + 1].tolist(),
            "planned_last_page_len": builder.paged_kv_last_page_len.cpu[:num_reqs].tolist(),
            "kernel_indptr": getattr(wrapper, "_paged_kv_indptr_buf", builder.paged_kv_indptr.gpu)[
                : num_reqs + 1].tolist(),
            "kernel_last_page_len": getattr(wrapper, "_paged_kv_last_page_len_buf",
                                            builder.paged_kv_last_page_len.gpu)[:num_reqs].tolist(),
            "kernel_kv_lens": wrapper._kv_lens_buffer[:num_reqs].tolist(),
            "exact_seq_lens": cad.seq_lens.tolist(),
            "upper_bounds": cad.seq_lens_cpu_upper_bound.tolist(),
            "max_token_per_sequence": wrapper.plans[-1].get("max_token_per_sequence"),
            "disable_split_kv": wrapper.plans[-1].get("disable_split_kv"),
        }


def bound_planning_errors(kv_cache_dtype: str = "auto", seed: int = 0) -> list[dict]:
    """GPU only. Per batch of BOUND_BATCHES: step 7's real builder plans it from its host bounds (nothing copied from
    the GPU) and from its exact lengths; FlashInfer's real kernel runs both plans on the same queries and cache.
    The largest differences: between the two outputs, and of the bound-planned one from the fp32 reference."""
    from dataclasses import replace

    import torch
    from vllm.config import set_current_vllm_config

    from dflash_fi.reference.paged_attention import paged_attention_reference

    torch.manual_seed(seed)
    rows = []
    with RoutingLab(7, kv_cache_dtype=kv_cache_dtype, on_gpu=True) as lab:
        builder, _, config = lab.builders["draft"]
        hq, hkv, d = builder.num_qo_heads, builder.num_kv_heads, builder.head_dim
        for batch in BOUND_BATCHES:
            bounded = common_metadata(batch, device="cuda", first_page=3)
            kv = torch.randn(int(bounded.block_table_tensor.max()) + 8, 2, KV_PAGE_SIZE, hkv, d, dtype=torch.bfloat16,
                             device="cuda")
            kv = kv.to(torch.float8_e4m3fn) if kv_cache_dtype == "fp8" else kv
            q = torch.randn(sum(batch.query_lens), hq, d, dtype=torch.bfloat16, device="cuda")
            with set_current_vllm_config(config):
                from_bounds = builder.build(0, bounded).prefill.wrapper.run(q, kv).float()
                copied = bounded._seq_lens_cpu is not None
                exact = replace(bounded, _seq_lens_cpu=bounded.seq_lens.cpu())
                from_exact = builder.build(0, exact).prefill.wrapper.run(q, kv).float()
            ref = paged_attention_reference(q, kv.float(), bounded.block_table_tensor, exact._seq_lens_cpu,
                                            bounded.query_start_loc_cpu, causal=False).float()
            rows.append({"batch": batch.name, "kv_dtype": kv_cache_dtype, "copied_from_gpu": copied,
                         "bounds_vs_exact": (from_bounds - from_exact).abs().max().item(),
                         "bounds_vs_reference": (from_bounds - ref).abs().max().item(),
                         "exact_vs_reference": (from_exact - ref).abs().max().item()})
    return rows
