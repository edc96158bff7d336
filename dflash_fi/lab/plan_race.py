"""GPU only: FlashInfer's pinned-buffer plan race, in isolation (`python -m dflash_fi.lab.plan_race` prints JSON).

`BatchPrefillWithPagedKVCacheWrapper.plan()` writes its schedule into a pinned host buffer at once and queues a copy
of it to the wrapper's GPU int workspace on the current stream (`cudaMemcpyAsync` in FlashInfer's `scheduler.cuh`).
A second `plan()` before that copy has run rewrites the host buffer the copy still reads from. Here the GPU is held
busy (`torch.cuda._sleep`) while one wrapper is planned for batch A, A's `run()` is queued, and the wrapper is planned
again for batch B. A device copy of the int workspace queued between A's plan and A's run (the probe) holds what A's
run reads. The control plans B only after the GPU has finished with A.

Three cases, each its own process (`python -m dflash_fi.lab.plan_race probe|run|control`): `probe` queues the probe
but not A's run (a run that reads B's schedule with A's grid may fault, and the fault would hide the bytes), `run`
queues A's run too, and `control` plans B after a synchronize. `tests/gpu/test_xqa.py` runs each in a child,
so that a faulting run cannot take the test session's CUDA context with it. docs/plan-race.md says where vLLM's
engines stand.
"""

from __future__ import annotations

import json
import sys

# Long enough that the host plans twice, runs and probes while the GPU still sleeps (checked: `gpu_was_busy`).
SLEEP_CYCLES = 4_000_000_000


def _batch(num_reqs: int, contexts: tuple[int, ...]):
    from dflash_fi.lab.batches import Batch, common_metadata
    from dflash_fi.vocabulary import DRAFT_BLOCK_SIZE

    batch = Batch("race", (DRAFT_BLOCK_SIZE,) * num_reqs, contexts[:num_reqs], False)
    return common_metadata(batch, device="cuda", first_page=1)


def _plan_args(cad) -> tuple:
    """plan()'s page table of a batch, made before the experiment: reading seq_lens on the host waits for the GPU."""
    import torch

    from dflash_fi.vocabulary import KV_PAGE_SIZE

    lengths = cad.seq_lens.cpu()
    pages = (lengths + KV_PAGE_SIZE - 1) // KV_PAGE_SIZE
    indptr = torch.cat([torch.zeros(1, dtype=torch.int32), pages.cumsum(0).to(torch.int32)])
    indices = torch.cat([cad.block_table_tensor[r, :n] for r, n in enumerate(pages.tolist())])
    last = ((lengths - 1) % KV_PAGE_SIZE + 1).to(torch.int32)
    return cad.query_start_loc_cpu, indptr, indices, last


def _plan(wrapper, args: tuple, heads: tuple[int, int, int]):
    import torch

    from dflash_fi.vocabulary import KV_PAGE_SIZE

    wrapper.plan(*args, *heads, KV_PAGE_SIZE, causal=False, q_data_type=torch.bfloat16,
                 kv_data_type=torch.bfloat16, disable_split_kv=True)


CASES = ("probe", "run", "control")


def race(case: str, seed: int = 0) -> dict:
    """One experiment: plan A and probe behind a sleeping GPU, queue A's run (unless `probe`), plan B (after the GPU
    finished, for `control`), then compare what the probe read and what A's run wrote."""
    second_plan_waits, queue_run = case == "control", case != "probe"
    import torch
    from flashinfer import BatchPrefillWithPagedKVCacheWrapper

    from dflash_fi.reference.paged_attention import paged_attention_reference
    from dflash_fi.vocabulary import KV_PAGE_SIZE

    torch.manual_seed(seed)
    heads = (4, 2, 128)  # the embedded pair's draft layer
    contexts = (37, 90, 150, 304)
    first, second = _batch(4, contexts), _batch(2, contexts)  # B: A's first two requests
    kv = torch.randn(int(first.block_table_tensor.max()) + 1, 2, KV_PAGE_SIZE, heads[1], heads[2],
                     dtype=torch.bfloat16, device="cuda")
    q = torch.randn(first.num_actual_tokens, heads[0], heads[2], dtype=torch.bfloat16, device="cuda")
    wrapper = BatchPrefillWithPagedKVCacheWrapper(torch.empty(128 << 20, dtype=torch.uint8, device="cuda"), "NHD",
                                                  backend="fa2")
    plan_first, plan_second = _plan_args(first), _plan_args(second)
    for args, cad in ((plan_second, second), (plan_first, first)):  # JIT-load and warm up outside the experiment
        _plan(wrapper, args, heads)
        wrapper.run(q[: cad.num_actual_tokens], kv)
    seq_lens = first.seq_lens.cpu()
    torch.cuda.synchronize()

    torch.cuda._sleep(SLEEP_CYCLES)
    slept = torch.cuda.Event()
    slept.record()
    _plan(wrapper, plan_first, heads)
    pinned = wrapper._pin_memory_int_workspace_buffer
    plan_a = pinned.clone()
    probe = wrapper._int_workspace_buffer.clone()  # queued after A's copy: what A's run reads
    out = torch.full_like(q, float("nan"))
    if queue_run:
        wrapper.run(q, kv, out=out)
    if second_plan_waits:
        torch.cuda.synchronize()
    _plan(wrapper, plan_second, heads)
    gpu_was_busy = not slept.query()
    plan_b = pinned.clone()
    torch.cuda.synchronize()

    probe = probe.cpu()
    differ = (plan_a != plan_b).nonzero().flatten()
    differ = differ[differ < probe.numel()]
    ref = paged_attention_reference(q, kv.float(), first.block_table_tensor, seq_lens,
                                    first.query_start_loc_cpu, causal=False).float()
    return {"case": case, "gpu_was_busy_at_second_plan": gpu_was_busy,
            "bytes_where_plans_differ": int(differ.numel()),
            "run_read_first_plan": bool(differ.numel()) and bool((probe[differ] == plan_a[differ]).all()),
            "run_read_second_plan": bool(differ.numel()) and bool((probe[differ] == plan_b[differ]).all()),
            "rows_not_written": int(out.isnan().any(-1).any(-1).sum()) if queue_run else None,
            "max_abs_err": float((out.float() - ref).nan_to_num(float("inf")).abs().max()) if queue_run else None}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in CASES:
        print(f"usage: python -m dflash_fi.lab.plan_race {'|'.join(CASES)}", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("python -m dflash_fi.lab.plan_race: needs a CUDA GPU (FlashInfer's wrapper and a sleeping GPU)",
              file=sys.stderr)
        return 2
    print(json.dumps(race(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
