"""The host work of a FlashInfer draft's metadata, on the CPU: what the model runner builds for DFlash's draft
layers on every target step, and whether a draft build waits for the GPU.

vLLM 0.22.1's model runner builds metadata for every attention group on every step. With a FLASH_ATTN target,
DFlash's FlashInfer draft layers are a group of their own: the runner hands their builder each *target* batch
(causal), although those layers only ever run on the drafter's own non-causal builds. Here the draft layers'
real builder (`RoutingLab`) gets the target batches the runner would give it, and a draft batch as DFlash
builds it (no host copy of the sequence lengths, only an upper bound).
"""

from __future__ import annotations

from dflash_fi.lab.batches import STANDARD_BATCHES, common_metadata
from dflash_fi.lab.routing import RoutingLab
from dflash_fi.vocabulary import HOPPER


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
