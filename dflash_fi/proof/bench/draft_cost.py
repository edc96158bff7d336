"""What the draft costs per decoding step, measured inside the engines (`dflash-fi bench e2e`), and the RTX 4090
path's gain: the bench-e2e section's `draft_cost` and `rtx4090`, their types and their reader.

Per pair and batch, the final FlashInfer draft against the FLASH_ATTN draft, round by round (`stats`):

    attention  GPU ms of the draft layers' attention per draft forward (CUDA events around each draft layer's
               `impl.forward`, summed over the layers; `dflash_fi.proof.engine.draft_timing`), final - FLASH_ATTN
    build      host ms of every attention metadata build per decoding step, final - FLASH_ATTN: the target's builders
               are the same in both engines, so the difference is the draft's (the drafter's own builds, and a
               runner group of its layers where its backend is not the target's); `draft_build_ms`: the drafter's own

The A/A pair (the FLASH_ATTN draft's twin) shows how far an interval reaches when nothing differs: it should stay
within +-AA_SHARE of the FLASH_ATTN draft's cost, or +-AA_MS where that is larger. The build target: final - FLASH_ATTN
at most 0 ms, its interval's high end at most BUILD_CEILING_MS. The attention is judged against the kernel benchmark
(`kernel_verdict`): the kernel the final draft ran (its route, as the engine built it) no slower than the fastest
FlashInfer kernel at that shape, within KERNEL_TOLERANCE; each kernel's share of copy bandwidth says how far from the
limit it is. The RTX 4090 path (FA2 forced, an FP8 cache, the draft's backend left to the selector): tokens/s at the
median step of DFlash with step 4's and with the final step's draft over no speculation.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from dflash_fi.proof.bench.e2e import draft_cost_runs
from dflash_fi.proof.bench.routes import builds_by_requests, kernel_of, most_common
from dflash_fi.proof.bench.rtx4090 import PathGain, path_gains
from dflash_fi.proof.bench.stats import AtMost, Estimate, Outcome, estimate_json, estimate_of, median_estimate
from dflash_fi.proof.bench.turns import Turns, paired, step_ms
from dflash_fi.records.outputs import BatchRun, Role
from dflash_fi.records.runs import Pair, RunId

__all__ = ["DraftCost", "DraftCosts", "DraftSide", "KernelShare", "PathGain", "draft_costs", "latest_draft_cost",
           "section_data"]

AA_SHARE, AA_MS = 0.02, 0.005
BUILD_CEILING_MS = 0.005
BUILD_TARGET = AtMost(0.0, ceiling=BUILD_CEILING_MS)
KERNEL_TOLERANCE = 1.02  # the final draft's kernel at most 2% slower than the fastest FlashInfer kernel
KERNEL_CONTEXT = 512  # the kernel-bench context nearest the engines' (prompts of a few hundred tokens and the turn's)


def attention_ms(b: BatchRun) -> float | None:
    """Draft layers' attention GPU ms per draft forward: the median over the turn's generates of their medians."""
    values = [g.draft_attention.median_ms for g in b.generates if g.draft_attention and g.draft_attention.median_ms]
    return statistics.median(values) if values else None


def build_ms(b: BatchRun) -> float:
    return statistics.median(g.build_ms_per_step() for g in b.generates)


def draft_build_ms(b: BatchRun) -> float:
    return statistics.median(g.build_ms_per_step(Role.DRAFT) for g in b.generates)


@dataclass(frozen=True)
class DraftSide:
    """One engine's draft at one batch size, medians over the measured rounds."""

    attention_ms: float | None
    build_ms: float
    draft_build_ms: float
    kernel: str | None
    step_ms: float | None = None  # the median decoding step, the draft timing's GPU sleeps included
    routes: tuple = ()  # [{"kernel", "num_reqs", "builds"}] over the measured rounds (routes.builds_by_requests)

    @classmethod
    def of(cls, d: dict) -> "DraftSide":
        return cls(**{**d, "routes": tuple(d.get("routes", ()))})


@dataclass(frozen=True)
class KernelShare:
    """One kernel at the kernel-bench shape matching an engine shape: its median ms and share of copy bandwidth (KV
    bytes read per second over the device's copy bandwidth, 0..1)."""

    kernel: str
    ms: float
    share_of_copy: float


@dataclass(frozen=True)
class DraftCost:
    pair: Pair
    batch: int
    num_qo_heads: int  # the drafter's heads
    num_kv_heads: int
    flash_attn: DraftSide
    final: DraftSide
    attention: Estimate | None  # final - FLASH_ATTN, ms per draft forward
    attention_aa: Estimate | None  # the FLASH_ATTN draft's twin - FLASH_ATTN
    build: Estimate | None  # final - FLASH_ATTN, host ms per decoding step
    build_aa: Estimate | None
    aa_bound_ms: float | None  # max(AA_SHARE x the FLASH_ATTN draft's attention, AA_MS)
    aa_within: bool  # both A/A intervals inside +-aa_bound_ms
    build_outcome: Outcome
    # The kernel benchmark at this shape (bf16, these heads and batch, KERNEL_CONTEXT), where it ran before: every
    # kernel timed, the fastest FlashInfer kernel a draft can run, and the final draft's kernel judged against it.
    kernels: tuple[KernelShare, ...] = ()
    fastest_flashinfer: str | None = None
    kernel_outcome: Outcome = Outcome.NOT_MEASURED
    build_bound_ms: float | None = None  # max(AA_SHARE x the FLASH_ATTN draft's build, BUILD_CEILING_MS)

    def to_json(self) -> dict:
        data = asdict(self)
        data.update(pair=self.pair.value, build_outcome=self.build_outcome.name, kernel_outcome=self.kernel_outcome.name,
                    **{k: estimate_json(getattr(self, k)) for k in ("attention", "attention_aa", "build", "build_aa")})
        return data

    @classmethod
    def from_json(cls, d: dict) -> "DraftCost":
        return cls(Pair(d["pair"]), d["batch"], d["num_qo_heads"], d["num_kv_heads"], DraftSide.of(d["flash_attn"]),
                   DraftSide.of(d["final"]), *(estimate_of(d[k]) for k in ("attention", "attention_aa", "build", "build_aa")),
                   d["aa_bound_ms"], d["aa_within"], Outcome[d["build_outcome"]],
                   tuple(KernelShare(**k) for k in d["kernels"]), d["fastest_flashinfer"], Outcome[d["kernel_outcome"]],
                   d.get("build_bound_ms"))


def drafter_heads(pair: Pair) -> tuple[int, int]:
    """The drafter's (query, KV) heads: the Qwen3-4B shape's, or the embedded drafter's config."""
    from dflash_fi.proof.bench.e2e import QWEN3_4B_DFLASH_DRAFTER

    if pair is Pair.QWEN3_4B_SHAPE:
        config = QWEN3_4B_DFLASH_DRAFTER
    else:
        import json

        from dflash_fi.models import DEFAULT_DRAFTER

        config = json.loads((DEFAULT_DRAFTER / "config.json").read_text())
    return config["num_attention_heads"], config["num_key_value_heads"]


def kernel_verdict(heads: tuple[int, int], batch: int, final_kernel: str | None, kernel_rows) -> tuple:
    """(every kernel's KernelShare, the fastest FlashInfer kernel a draft can run, Outcome: the final draft's kernel
    at most KERNEL_TOLERANCE x its time) from the kernel bench's rows at this shape."""
    from dflash_fi.proof.bench.kernel_calls import REGISTRY

    shares = tuple(KernelShare(r["kernel"], r["median_ms"], r["share_of_copy"]) for r in kernel_rows
                   if r["kv_dtype"] == "bf16" and (r["num_qo_heads"], r["num_kv_heads"]) == heads
                   and r["batch"] == batch and r["context"] == KERNEL_CONTEXT and "median_ms" in r
                   and r["kernel"] in REGISTRY)
    candidates = [s for s in shares if REGISTRY[s.kernel].flashinfer and REGISTRY[s.kernel].draft_reachable]
    fastest = min(candidates, key=lambda s: s.ms) if candidates else None
    final = next((s for s in shares if s.kernel == final_kernel), None)
    if fastest is None or final is None:
        return shares, None, Outcome.NOT_MEASURED
    return shares, fastest.kernel, Outcome.MET if final.ms <= fastest.ms * KERNEL_TOLERANCE else Outcome.MISSED


def _side(turns: Turns, run: RunId, batch: int) -> DraftSide | None:
    rounds = list(turns.measured(run, batch).values())
    if not rounds:
        return None
    attention = [a for a in map(attention_ms, rounds) if a is not None]
    return DraftSide(statistics.median(attention) if attention else None, statistics.median(map(build_ms, rounds)),
                     statistics.median(map(draft_build_ms, rounds)), most_common(list(map(kernel_of, rounds))),
                     statistics.median(map(step_ms, rounds)), tuple(builds_by_requests(rounds)))


def _difference(turns: Turns, run: RunId, baseline: RunId, batch: int, metric) -> Estimate | None:
    pairs = [(a, b) for a, b in paired(turns, run, baseline, batch, metric) if a is not None and b is not None]
    return median_estimate([a - b for a, b in pairs])


def _within(e: Estimate | None, bound: float | None) -> bool:
    return e is not None and bound is not None and -bound <= e.low and e.high <= bound


def draft_costs(turns: Turns, kernel_rows=()) -> list[DraftCost]:
    """Per pair and batch where both engines ran: the final FlashInfer draft against the FLASH_ATTN draft, and its
    kernel against the kernel benchmark's `kernel_rows` (none: not judged)."""
    out = []
    for pair in turns.pairs():
        aa, fa, final = draft_cost_runs(pair)
        heads = drafter_heads(pair)
        for batch in turns.batches(pair):
            ours, theirs = _side(turns, final, batch), _side(turns, fa, batch)
            if ours is None or theirs is None:
                continue
            attention, attention_aa = (_difference(turns, r, fa, batch, attention_ms) for r in (final, aa))
            build, build_aa = (_difference(turns, r, fa, batch, build_ms) for r in (final, aa))
            bound = None if theirs.attention_ms is None else max(AA_SHARE * theirs.attention_ms, AA_MS)
            # the build's A/A bound: its own share, or the build target's ceiling where that is larger
            build_bound = max(AA_SHARE * theirs.build_ms, BUILD_CEILING_MS)
            out.append(DraftCost(pair, batch, *heads, theirs, ours, attention, attention_aa, build, build_aa, bound,
                                 _within(attention_aa, bound) and _within(build_aa, build_bound),
                                 BUILD_TARGET.judge(build), *kernel_verdict(heads, batch, ours.kernel, kernel_rows),
                                 build_bound))
    return out


def section_data(turns: Turns, kernel_rows=(), rounds: int | None = None) -> dict:
    """What `dflash-fi bench e2e --record` adds to its section of the summary (`kernel_rows`: the kernel benchmark's,
    run before it in the pass)."""
    from dflash_fi.proof.bench import e2e

    method = {"rounds": rounds, "warm_up_rounds": turns.warm_up_rounds, "aa_share": AA_SHARE, "aa_ms": AA_MS,
              "build_ceiling_ms": BUILD_CEILING_MS, "kernel_tolerance": KERNEL_TOLERANCE, "kernel_context": KERNEL_CONTEXT,
              "new_tokens": {Pair.EMBEDDED.value: e2e.NEW_TOKENS, Pair.QWEN3_4B_SHAPE.value: e2e.SHAPE_NEW_TOKENS},
              "batch1_prompts": {Pair.EMBEDDED.value: e2e.BATCH1_PROMPTS,
                                 Pair.QWEN3_4B_SHAPE.value: e2e.SHAPE_BATCH1_PROMPTS},
              **lead_check(turns)}
    return {"draft_cost": [c.to_json() for c in draft_costs(turns, kernel_rows)],
            "rtx4090": [g.to_json() for g in path_gains(turns)], "method": method}


def lead_check(turns: Turns) -> dict:
    """How many draft layers' attention calls were timed in the measured rounds, and at how many the host's work
    outlasted the GPU sleep queued before the start event (`draft_timing.LEAD_US`: those events may hold host time)."""
    timed = [g.draft_attention for pair in turns.pairs() for run in turns.runs(pair) for batch in turns.batches(pair)
             for b in turns.measured(run, batch).values() for g in b.generates if g.draft_attention]
    return {"layer_calls_timed": sum(a.forwards * a.layers for a in timed),
            "layer_calls_over_lead": sum(a.over_lead for a in timed)}


@dataclass(frozen=True)
class DraftCosts:
    costs: tuple[DraftCost, ...]
    gains: tuple[PathGain, ...]
    aa_share: float = AA_SHARE
    aa_ms: float = AA_MS


def latest_draft_cost(summary=None) -> DraftCosts:
    """The draft cost and the RTX 4090 path's gain as the last `bench e2e --record` judged them; NoRecord before."""
    import dflash_fi.records.summary as S
    from dflash_fi.errors import NoRecord

    data = (summary or S.read()).entry(S.Section.BENCH_E2E).data
    if "draft_cost" not in data:
        raise NoRecord("the evidence summary's bench-e2e section has no draft cost: run `dflash-fi bench e2e --record` "
                       "on a GPU")
    return DraftCosts(tuple(map(DraftCost.from_json, data["draft_cost"])),
                      tuple(map(PathGain.from_json, data.get("rtx4090", ()))))
