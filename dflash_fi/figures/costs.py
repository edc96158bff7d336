"""What the final FlashInfer draft costs end to end (notebook 08), as data and its table: its cost per decoding step
against the FLASH_ATTN draft's, and the RTX 4090 path's gain, read from the engine benchmark's section (`draft_cost`,
`rtx4090`, `method`) as the benchmark judged it (nothing here judges again). What they say: `cost_verdicts`."""

from __future__ import annotations

from dataclasses import dataclass, fields

from dflash_fi.records.checks import Outcome

# Kernel-benchmark names as a reader reads them (rendering only: nothing is parsed back).
KERNEL_NAMES = {"flashinfer-xqa": "XQA", "dflash-fi-final": "fa2, kept plan", "flashinfer-fa2": "FlashInfer fa2",
                "flashinfer-fa3": "FlashInfer fa3", "flashinfer-auto": "FlashInfer auto",
                "vllm-flash-attn": "FlashAttention", "dflash-fi-final-graph": "fa2, graph wrapper"}
PAIR_NAMES = {"embedded": "embedded pair", "qwen3-4b-shape": "Qwen3-4B shape"}
FLASH_ATTN_KERNEL = "vllm-flash-attn"  # the FLASH_ATTN draft's kernel, in the kernel benchmark
GAIN = "{:.2f}x"  # a tokens/s ratio, as tables and verdicts print it


@dataclass(frozen=True)
class Interval:
    """A paired comparison: the median over the measured rounds and its 95% bootstrap interval."""

    value: float
    low: float
    high: float

    @classmethod
    def of(cls, d: dict | None) -> "Interval | None":
        return None if d is None else cls(d["value"], d["low"], d["high"])


def interval_text(e: Interval | None, fmt: str = "{:+.3f}") -> str:
    return "not measured" if e is None else f"{fmt.format(e.value)} [{fmt.format(e.low)}, {fmt.format(e.high)}]"


@dataclass(frozen=True)
class KernelTime:
    kernel: str
    ms: float
    share_of_copy: float  # KV bytes read per second over the GPU's copy bandwidth


@dataclass(frozen=True)
class ShapeCost:
    """One pair x batch: the draft's cost per decoding step (one draft forward), final FlashInfer - FLASH_ATTN draft."""

    pair: str
    batch: int
    heads: tuple | None  # the drafter's (query, KV) heads, where recorded
    route: str | None  # the kernel the final draft's builds made there: XQA, or fa2 with its plan kept
    attention: Interval | None  # final - FLASH_ATTN, GPU ms
    attention_aa: Interval | None  # the FLASH_ATTN draft's twin - the FLASH_ATTN draft
    build: Interval | None  # final - FLASH_ATTN, host ms
    build_aa: Interval | None
    aa_bound_ms: float | None  # the A/A pair's intervals should stay within +-this
    aa_within: bool
    build_outcome: Outcome
    kernels: tuple[KernelTime, ...]  # what the kernel benchmark timed at this shape, where recorded with it
    kernel_outcome: Outcome
    fastest: str | None = None  # the fastest FlashInfer kernel the kernel benchmark timed at this shape
    build_bound_ms: float | None = None  # the build's A/A bound, where recorded apart from the attention's
    step_ms: float | None = None  # the FLASH_ATTN draft's median decoding step
    builds: tuple = ()  # the final draft's builds: {"kernel", "num_reqs", "builds"}, where recorded

    @property
    def build_bound(self) -> float | None:
        return self.aa_bound_ms if self.build_bound_ms is None else self.build_bound_ms

    @property
    def name(self) -> str:
        return f"{PAIR_NAMES.get(self.pair, self.pair)}, batch {self.batch}"

    def kernel(self, name: str | None) -> KernelTime | None:
        return next((k for k in self.kernels if k.kernel == name), None)

    @classmethod
    def of(cls, d: dict) -> "ShapeCost":
        heads = (d["num_qo_heads"], d["num_kv_heads"]) if "num_qo_heads" in d else None
        return cls(d["pair"], d["batch"], heads, d["final"].get("kernel"),
                   *(Interval.of(d[k]) for k in ("attention", "attention_aa", "build", "build_aa")), d.get("aa_bound_ms"),
                   d["aa_within"],
                   Outcome[d["build_outcome"]], tuple(KernelTime(k["kernel"], k["ms"], k["share_of_copy"])
                                                      for k in d.get("kernels", ())),
                   Outcome[d.get("kernel_outcome", "NOT_MEASURED")], d.get("fastest_flashinfer"),
                   d.get("build_bound_ms"), d["flash_attn"].get("step_ms"), tuple(d["final"].get("routes", ())))


@dataclass(frozen=True)
class PathGain:
    """The RTX 4090 path (FA2 forced, an FP8 cache), embedded pair, one batch: tokens/s at the median step, and the
    gains over no speculation paired by round."""

    batch: int
    no_speculation: float | None
    step4: float | None
    final: float | None
    step4_gain: Interval | None
    final_gain: Interval | None
    final_over_step4: Interval | None
    tau_step4: float | None
    tau_final: float | None

    @classmethod
    def of(cls, d: dict) -> "PathGain":
        gains = ("step4_gain", "final_gain", "final_over_step4")
        return cls(**{f.name: Interval.of(d[f.name]) if f.name in gains else d.get(f.name) for f in fields(cls)})


@dataclass(frozen=True)
class Costs:
    gpu: str
    compute_capability: str
    commit: str | None
    shapes: tuple[ShapeCost, ...]
    gains: tuple[PathGain, ...]
    method: dict  # rounds and warm-up rounds: what the sources table says


def read_costs(summary=None) -> Costs:
    """The draft cost of the evidence summary's engine benchmark; `NoRecord` where it has none yet, or where the
    benchmark ran other code than the code at hand (its numbers would not be this code's)."""
    from dflash_fi.errors import NoRecord
    from dflash_fi.freshness import stale
    from dflash_fi.records.summary import Section, read

    summary = summary or read()
    entry, section = summary.entry(Section.BENCH_E2E), Section.BENCH_E2E
    if "draft_cost" not in entry.data:
        raise NoRecord(f"the evidence's engine benchmark (an older pass's) has no draft cost yet: `{section.command}` "
                       "on a GPU")
    for old in stale(summary, [section]):
        raise NoRecord(f"the engine benchmark ran other code ({', '.join(old.changed)}): `{section.command}` on a GPU")
    p, data = entry.provenance, entry.data
    return Costs(p.gpu, p.compute_capability, p.commit, tuple(map(ShapeCost.of, data["draft_cost"])),
                 tuple(map(PathGain.of, data.get("rtx4090", ()))), data.get("method", {}))


def cost_table(costs: Costs) -> str:
    """Markdown: per shape, the draft's two costs with each target's outcome (the A/A intervals: the figure's), the
    route's kernel and FlashAttention's as the kernel benchmark timed them, and the fastest FlashInfer kernel there."""
    def timed(k: KernelTime | None) -> str:
        return "not measured" if k is None else f"{KERNEL_NAMES.get(k.kernel, k.kernel)} {k.ms:.4f} ({k.share_of_copy:.0%})"
    m = costs.method
    context = f" at context {m['kernel_context']}" if "kernel_context" in m else ""
    within = f" (within {m['kernel_tolerance'] - 1:.0%})" if "kernel_tolerance" in m else ""
    lines = [f"| pair, batch | host build, ms a step [95%]: at most FLASH_ATTN's? | draft attention, ms a step [95%] | "
             f"route's kernel / FlashAttention's, ms a call{context} (share of copy bandwidth) | the fastest FlashInfer "
             f"kernel: the route's{within}? |", "|---|---|---|---|---|"]
    for s in costs.shapes:
        fastest = "the route's" if s.fastest in (None, s.route) else timed(s.kernel(s.fastest))
        lines.append(f"| {s.name}{f' (a step: {s.step_ms:.2f} ms)' if s.step_ms else ''} | {interval_text(s.build)}: **{s.build_outcome.value}** | {interval_text(s.attention)} | "
                     f"{timed(s.kernel(s.route))} / {timed(s.kernel(FLASH_ATTN_KERNEL))} | {fastest}: "
                     f"**{s.kernel_outcome.value}** |")
    return "\n".join(lines)


def recorded_on(costs: Costs) -> str:
    """Where and how the numbers were recorded: the GPU, the commit, the rounds, the turns' lengths."""
    m = costs.method
    parts = [f"{costs.gpu} (SM {costs.compute_capability}), commit {costs.commit}"]
    if m.get("rounds") and "warm_up_rounds" in m:
        parts.append(f"{m['rounds'] - m['warm_up_rounds']} measured rounds after {m['warm_up_rounds']} warm-up")
    parts += [", ".join(f"{tokens} new tokens a turn ({PAIR_NAMES.get(pair, pair)})"
                        for pair, tokens in m.get("new_tokens", {}).items())]
    parts += [f"kernel times at context {m['kernel_context']}"] if "kernel_context" in m else []
    parts += [f"{m['layer_calls_over_lead']} of {m['layer_calls_timed']} draft attention calls timed had host work "
              "longer than the GPU sleep before them (those may hold host time)"] if m.get("layer_calls_timed") else []
    return "; ".join(p for p in parts if p)
