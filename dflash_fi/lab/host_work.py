"""The host work of a FlashInfer draft's metadata, on the CPU: what the model runner builds for DFlash's draft
layers on every target step, and whether a draft build waits for the GPU.

vLLM 0.22.1's model runner builds metadata for every attention group on every step. With a FLASH_ATTN target,
DFlash's FlashInfer draft layers are a group of their own: the runner hands their builder each *target* batch
(causal), although those layers only ever run on the drafter's own non-causal builds. Here the draft layers'
real builder (`RoutingLab`) gets the target batches the runner would give it, and a draft batch as DFlash
builds it (no host copy of the sequence lengths, only an upper bound). On a GPU, `bound_planning_errors` runs
step 7's real builder and FlashInfer's real kernel, planned from the bounds and from the exact lengths, and
`plan_reuse_errors` runs step 8's through a decode's draft steps, its plan reused while the batch keeps its block
length and gains no request (`plans_over_draft_steps`: the same draft steps on the CPU, plan() counted at any step).
"""

from __future__ import annotations

from typing import NamedTuple

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

class DraftStep(NamedTuple):
    batch: Batch
    expects_plan: bool  # step 8 plans it: the first, or a request joined (the batch outgrew the plan's filled rows)


def _draft(contexts: tuple[int, ...], grown: int, slack_seed: int) -> Batch:
    n = len(contexts)
    return Batch(f"{n} x (1 + 15), contexts {min(contexts) + grown}..{max(contexts) + grown}", (Q,) * n,
                 tuple(c + grown for c in contexts), False, tuple((slack_seed + 5 * r) % Q for r in range(n)))


_SHORT, _LONG = (37, 90, 150, 304), (4000, 8174)
_SENTINEL = 3.0  # fills the output past the batch's rows, where an empty row's queries would land
# One decode's draft steps as DFlash builds them: contexts grow by a block per step, requests leave (the plan's last
# rows go empty) and join (planned again), bounds exceed the exact lengths by 0-15 tokens (across a page, and for
# long contexts, where FlashInfer would otherwise split the KV).
PLAN_REUSE_STEPS = (
    *(DraftStep(_draft(_SHORT, Q * k, k), k == 0) for k in range(3)),
    *(DraftStep(_draft(_SHORT[:3], Q * k, k), False) for k in range(3, 5)),  # one leaves
    *(DraftStep(_draft(_SHORT, Q * k, k), k == 5) for k in range(5, 7)),  # it joins again
    *(DraftStep(_draft(_LONG, Q * k, k), False) for k in range(3)),  # two leave, the others' contexts long
    *(DraftStep(_draft(_LONG[1:], Q * k, k), False) for k in range(3, 5)),  # one alone
    DraftStep(_draft(_LONG, Q * 5, 5), True),  # one joins
)


def exact_page_table(cad) -> tuple[list[int], list[int], list[int]]:
    """FlashInfer's paged_kv_indptr, paged_kv_last_page_len and paged_kv_indices of a batch's exact lengths."""
    lengths = cad.seq_lens.tolist()
    pages = [-(-n // KV_PAGE_SIZE) for n in lengths]
    indptr = [0]
    for n in pages:
        indptr.append(indptr[-1] + n)
    return (indptr, [(n - 1) % KV_PAGE_SIZE + 1 if n else 0 for n in lengths],
            [int(p) for r, n in enumerate(pages) for p in cad.block_table_tensor[r, :n]])


def plans_over_draft_steps(step: int, steps=PLAN_REUSE_STEPS, capability=HOPPER) -> list[dict]:
    """CPU. One decode's draft steps (`steps`) through step `step`'s real builder, wrappers doubles (step 8's page-table
    kernel runs under Triton's interpreter). Per draft step: the plan() calls its build made, whether it copied
    seq_lens from the GPU, the launches of step 8's page-table kernel (None before step 8), whether the page table
    the wrapper's run() reads is the exact lengths', and the rows past the batch it reads (requests that left a plan
    that holds: step 8 only), and whether those have neither queries nor pages."""
    from vllm.config import set_current_vllm_config

    rows = []
    with RoutingLab(step, capability) as lab:
        builder, _, config = lab.builders["draft"]
        kernel = getattr(lab.module, "_fill_paged_kv_kernel", None)
        for index, draft in enumerate(steps):
            cad = common_metadata(draft.batch)
            wrapper = builder._noncausal_prefill_wrapper
            plans, launches = len(wrapper.plans) if wrapper else 0, len(kernel.launches) if kernel else 0
            with set_current_vllm_config(config):
                wrapper = builder.build(0, cad).prefill.wrapper
            n = cad.num_reqs
            all_indptr = wrapper._paged_kv_indptr_buf.tolist()
            indptr = all_indptr[: n + 1]
            read = (indptr, wrapper._paged_kv_last_page_len_buf[:n].tolist(),
                    wrapper._paged_kv_indices_buf[: indptr[-1]].tolist())
            qo_indptr = wrapper._qo_indptr_buf.tolist()
            rows.append({"draft_step": index, "batch": draft.batch.name, "expects_plan": draft.expects_plan,
                         "plans": len(wrapper.plans) - plans, "copied_from_gpu": cad._seq_lens_cpu is not None,
                         "page_table_launches": len(kernel.launches) - launches if kernel else None,
                         "reads_exact_page_table": read == exact_page_table(cad),
                         "empty_rows": len(all_indptr) - 1 - n,
                         "empty_rows_read_nothing": set(all_indptr[n:]) == {indptr[-1]}
                         and set(qo_indptr[n:]) == {cad.num_actual_tokens}})
    return rows


def plan_reuse_errors(kv_cache_dtype: str = "auto", seed: int = 0) -> list[dict]:
    """GPU only. PLAN_REUSE_STEPS through step 8's real builder and FlashInfer's real kernel, `plan()` counted by a spy
    around FlashInfer's own method. Per step: whether the builder planned, whether the page table its kernel wrote is
    the exact lengths' (computed here on the host), the plan's empty rows (requests that left), whether the kernel
    wrote anything past the batch's rows of the output (a sentinel there), and the largest differences of its output
    from a FlashInfer wrapper planned afresh on the exact lengths with split KV off as the builder's plan has it (the
    same schedule: 0 expected), from one planned as FlashInfer plans by default, and from the fp32 reference."""
    from unittest import mock

    import torch
    from flashinfer import BatchPrefillWithPagedKVCacheWrapper
    from vllm.config import set_current_vllm_config

    from dflash_fi.reference.paged_attention import paged_attention_reference

    torch.manual_seed(seed)
    planned, real_plan = [], BatchPrefillWithPagedKVCacheWrapper.plan

    def spy(wrapper, *args, **kwargs):
        planned.append(wrapper)
        return real_plan(wrapper, *args, **kwargs)
    rows = []
    with (RoutingLab(8, kv_cache_dtype=kv_cache_dtype, on_gpu=True) as lab,
          mock.patch.object(BatchPrefillWithPagedKVCacheWrapper, "plan", spy)):
        builder, _, config = lab.builders["draft"]
        hq, hkv, d = builder.num_qo_heads, builder.num_kv_heads, builder.head_dim
        cads = [common_metadata(s.batch, device="cuda", first_page=3) for s in PLAN_REUSE_STEPS]
        kv = torch.randn(max(int(c.block_table_tensor.max()) for c in cads) + 8, 2, KV_PAGE_SIZE, hkv, d,
                         dtype=torch.bfloat16, device="cuda")
        kv = kv.to(torch.float8_e4m3fn) if kv_cache_dtype == "fp8" else kv
        # One wrapper per schedule: plan() writes its pinned host buffer at once and copies it to the GPU later, so
        # a wrapper planned again before its last run has run would hand that run the new plan.
        fresh = {split: BatchPrefillWithPagedKVCacheWrapper(torch.empty(128 << 20, dtype=torch.uint8, device="cuda"),
                                                            "NHD", backend=lab.module.NON_CAUSAL_PREFILL_BACKEND)
                 for split in (True, False)}
        for index, (step, cad) in enumerate(zip(PLAN_REUSE_STEPS, cads)):
            q = torch.randn(cad.num_actual_tokens, hq, d, dtype=torch.bfloat16, device="cuda")
            plans_before = sum(w is builder._noncausal_prefill_wrapper for w in planned)
            with set_current_vllm_config(config):
                md = builder.build(0, cad)
            tokens = cad.num_actual_tokens
            past = (builder._noncausal_plan_rows - cad.num_reqs + 1) * Q  # the empty rows' blocks, and one more
            out = torch.full((tokens + past, hq, d), _SENTINEL, dtype=torch.bfloat16, device="cuda")
            md.prefill.wrapper.run(q, kv, out=out[:tokens])  # what forward() hands it: the batch's rows
            reused = out[:tokens].float()
            lengths = cad.seq_lens.cpu()
            pages = (lengths + KV_PAGE_SIZE - 1) // KV_PAGE_SIZE
            indptr = torch.cat([torch.zeros(1, dtype=torch.int32), pages.cumsum(0).to(torch.int32)])
            indices = torch.cat([cad.block_table_tensor[r, :n] for r, n in enumerate(pages.tolist())])
            last_page_len = torch.where(lengths > 0, (lengths - 1) % KV_PAGE_SIZE + 1, 0).to(torch.int32)
            n = cad.num_reqs
            written = (builder.paged_kv_indptr.gpu[: n + 1].cpu(), builder.paged_kv_last_page_len.gpu[:n].cpu(),
                       builder.paged_kv_indices.gpu[: int(indptr[-1])])
            outputs = []
            for disable_split_kv in (True, False):
                wrapper = fresh[disable_split_kv]
                wrapper.plan(cad.query_start_loc_cpu, indptr, indices, last_page_len, hq, hkv, d, KV_PAGE_SIZE,
                             causal=False, sm_scale=builder.sm_scale, window_left=builder.window_left,
                             logits_soft_cap=builder.logits_soft_cap, q_data_type=torch.bfloat16,
                             kv_data_type=kv.dtype, o_data_type=torch.bfloat16, disable_split_kv=disable_split_kv)
                outputs.append(wrapper.run(q, kv).float())
            ref = paged_attention_reference(q, kv.float(), cad.block_table_tensor, lengths, cad.query_start_loc_cpu,
                                            causal=False).float()
            rows.append({"step": index, "batch": step.batch.name, "kv_dtype": kv_cache_dtype,
                         "expects_plan": step.expects_plan, "copied_from_gpu": cad._seq_lens_cpu is not None,
                         "planned": sum(w is builder._noncausal_prefill_wrapper for w in planned) - plans_before,
                         "empty_rows": builder._noncausal_plan_rows - n,
                         "writes_past_output": bool((out[tokens:] != _SENTINEL).any()),
                         "page_table_exact": all(torch.equal(a, b) for a, b in zip(written, (
                             indptr, last_page_len, indices))),
                         "reused_vs_fresh_unsplit": (reused - outputs[0]).abs().max().item(),
                         "reused_vs_fresh": (reused - outputs[1]).abs().max().item(),
                         "reused_vs_reference": (reused - ref).abs().max().item(),
                         "fresh_vs_reference": (outputs[1] - ref).abs().max().item()})
    return rows
