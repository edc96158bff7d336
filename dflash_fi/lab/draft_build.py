"""GPU only: the wait step 7 removes, timed. A DFlash draft build of step `step`'s real builder with a kernel queued on
the GPU before each: a build that reads vLLM's lazy `seq_lens_cpu` (step 6) waits for that kernel, one planned from
the host bounds (step 7) does not. Nothing runs at import."""

from __future__ import annotations

# A kernel of about this many GPU clock cycles is queued before each build: a few milliseconds on an H200.
QUEUED_CYCLES = 10_000_000


def busy_build_ms(step: int, num_reqs: int = 8, context: int = 512, builds: int = 20) -> float:
    """The fastest host ms of `builds` draft builds of step `step`'s builder, each with `QUEUED_CYCLES` queued on the
    GPU before it: a build that waits for the kernel is never fast, one that does not may be slowed by a busy host."""
    import time

    import torch
    from vllm.config import set_current_vllm_config

    from dflash_fi.lab.batches import draft_steps
    from dflash_fi.lab.routing import RoutingLab

    with RoutingLab(step, on_gpu=True) as lab:
        builder, _, config = lab.builders["draft"]
        cads = draft_steps(num_reqs, context, builds + 1, device="cuda")
        times = []
        with set_current_vllm_config(config):
            builder.build_for_drafting(cads[0], 0)
            for cad in cads[1:]:
                torch.cuda.synchronize()
                torch.cuda._sleep(QUEUED_CYCLES)
                start = time.perf_counter()
                builder.build_for_drafting(cad, 0)
                times.append((time.perf_counter() - start) * 1e3)
    return min(times)
