"""Steps 7-9 on the lab's builders, judged: what notebook 07 checks. Nothing runs at import.

    busy_build_ms(step)        GPU only: the wait step 7 removes, timed. A draft build of step `step`'s real builder
                               with a kernel queued first: one that reads vLLM's lazy `seq_lens_cpu` (step 6) waits
                               for it, one planned from the host bounds (step 7) does not
    step7_holds, step8_holds, gpu_holds  whether the lab's runs (`lab.host_work`) show what each step claims
    route_cases(), route_claim, routes_hold  step 9's route rule at its bounds and one past each, each case named
"""

from __future__ import annotations

from dataclasses import dataclass

from dflash_fi.lab.routes import Prefill
from dflash_fi.vocabulary import HOPPER

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


def step7_holds(lengths: dict, runner: dict) -> bool:
    """Step 6 copies the lengths from the GPU, step 7 does not and its kernel reads step 6's page table; step 6
    plans for the draft layers at every target batch, step 7 at none."""
    return (lengths[6]["copied_from_gpu"] and not lengths[7]["copied_from_gpu"]
            and lengths[7]["kernel_indptr"] == lengths[6]["kernel_indptr"]
            and all(r["planned"] for r in runner[6]) and not any(r["planned"] for r in runner[7]))


def step8_holds(over: dict) -> bool:
    """Step 7 plans at every draft step; step 8 where it should (the first, a request joined); some step empties
    rows of the kept plan and those read nothing; every kernel reads the exact page table."""
    return (all(r["plans"] for r in over[7])
            and [bool(r["plans"]) for r in over[8]] == [r["expects_plan"] for r in over[8]]
            and any(r["empty_rows"] for r in over[8])
            and all(r["empty_rows_read_nothing"] for r in over[8] if r["empty_rows"])
            and all(r["reads_exact_page_table"] for rows in over.values() for r in rows))


def gpu_holds(bounded: list[dict], reused: list[dict], waited: dict) -> bool:
    """Bound-planned outputs within bf16/fp8 rounding of exact-planned ones; kept plans bit-equal to fresh unsplit
    ones, writing nothing past the batch; step 6's build waits for the queued kernel where step 7's does not."""
    return (max(r["bounds_vs_exact"] for r in bounded) < 5e-3
            and all(r["reused_vs_fresh_unsplit"] == 0 and not r["writes_past_output"] for r in reused)
            and waited[6] > 2.5 > waited[7])


@dataclass(frozen=True)
class RouteCase:
    """A draft step as step 9's builder asks the rule about it, and the path the rule should give."""

    name: str
    capability: tuple[int, int]
    kv_cache_dtype: str  # vLLM's name: "auto" (the model's bf16) or "fp8"
    num_qo_heads: int
    num_kv_heads: int
    num_reqs: int
    expected: Prefill

    def holds(self) -> bool:
        from dflash_fi.lab.draft_route import final_draft_route

        return final_draft_route(self.capability, self.kv_cache_dtype, self.num_qo_heads, self.num_kv_heads,
                                 self.num_reqs) is self.expected


def route_cases() -> tuple[RouteCase, ...]:
    """At the rule's bounds (XQA), then one past each bound, an fp8 cache and an RTX 4090 (SM 8.9): fa2."""
    from dflash_fi.steps import backend_module

    ratio, reqs = backend_module(9).XQA_DRAFT_MAX_HEAD_RATIO, backend_module(9).XQA_DRAFT_MIN_REQS
    at, fa2 = dict(capability=HOPPER, kv_cache_dtype="auto", num_qo_heads=2 * ratio, num_kv_heads=2,
                   num_reqs=reqs), Prefill.NON_CAUSAL
    return (RouteCase(f"SM 9.0, bf16, {2 * ratio} / 2 heads, {reqs} requests", **at, expected=Prefill.XQA),
            RouteCase(f"{2 * ratio + 2} / 2 heads", **{**at, "num_qo_heads": 2 * ratio + 2}, expected=fa2),
            RouteCase(f"{reqs - 1} requests", **{**at, "num_reqs": reqs - 1}, expected=fa2),
            RouteCase("an fp8 cache", **{**at, "kv_cache_dtype": "fp8"}, expected=fa2),
            RouteCase("SM 8.9", **{**at, "capability": (8, 9)}, expected=fa2))


def route_claim(cases: tuple[RouteCase, ...]) -> str:
    """The check's words: where the rule takes XQA, and each case one past it that takes fa2."""
    xqa = [c.name for c in cases if c.expected is Prefill.XQA]
    fa2 = [c.name for c in cases if c.expected is not Prefill.XQA]
    return f"the route rule takes XQA at {'; '.join(xqa)}; fa2 with {', '.join(fa2)}"


def routes_hold(cases: tuple[RouteCase, ...]) -> bool:
    return all(case.holds() for case in cases)
