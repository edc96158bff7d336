"""What the final FlashInfer draft costs end to end (notebook 08), its tables and bottom line: its cost per decoding
step against the FLASH_ATTN draft's, and the RTX 4090 path's gain, read from the engine benchmark's section
(`draft_cost`, `rtx4090`, `method`) as the benchmark judged it (nothing here judges again)."""

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
                   Outcome[d.get("kernel_outcome", "NOT_MEASURED")], d.get("fastest_flashinfer"))


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
        raise NoRecord(f"the evidence has no engine benchmark of the draft's cost yet: `{section.command}` on a GPU")
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
        lines.append(f"| {s.name} | {interval_text(s.build)}: **{s.build_outcome.value}** | {interval_text(s.attention)} | "
                     f"{timed(s.kernel(s.route))} / {timed(s.kernel(FLASH_ATTN_KERNEL))} | {fastest}: "
                     f"**{s.kernel_outcome.value}** |")
    return "\n".join(lines)


def beyond_noise(e: Interval | None, bound: float | None) -> int:
    """+1 where the whole interval lies above the A/A pair's bound (a real cost), -1 where it lies below minus it (a
    real saving), 0 where it reaches into the noise (level) or was not measured."""
    bound = bound or 0.0
    return 0 if e is None else (e.low > bound) - (e.high < -bound)


def _side(s: ShapeCost) -> int:
    """+1 where the final draft costs more (its build or its attention), -1 where it costs less, 0 where level."""
    sides = {beyond_noise(s.build, s.aa_bound_ms), beyond_noise(s.attention, s.aa_bound_ms)}
    return 1 if 1 in sides else -1 if -1 in sides else 0


def figure_verdict(costs: Costs) -> str:
    """What to see in `cost_figure`, from its numbers."""
    noise = max((aa.high - aa.low for s in costs.shapes for aa in (s.build_aa, s.attention_aa) if aa), default=0.0)
    real = [s.name for s in costs.shapes if _side(s)]
    bounds = sorted({f"{s.aa_bound_ms:.3f}" for s in costs.shapes if s.aa_bound_ms is not None})
    return (f"the grey bars are noise: two FLASH_ATTN drafts that differ in nothing give intervals up to {noise:.3f} ms "
            f"wide, within their bound (±{' to '.join(bounds[::max(len(bounds) - 1, 1)]) or '?'} ms) at "
            f"{sum(s.aa_within for s in costs.shapes)} of {len(costs.shapes)} shapes. A marker is a real difference only "
            f"where its whole interval lies beyond that bound: at {len(real)} of {len(costs.shapes)} shapes"
            f"{_which(costs, real)}; elsewhere the two drafts are level.")


def _which(costs: Costs, names: list[str]) -> str:
    """': a; b', or ', all but c' where that is the shorter list: the reader is told the few."""
    rest = [s.name for s in costs.shapes if s.name not in names]
    if not names or not rest:
        return ""
    return ": " + "; ".join(names) if len(names) <= len(rest) else ", all but " + "; ".join(rest)


def targets_verdict(costs: Costs) -> str:
    """What to see in `cost_table`: each target's outcomes, with the bounds the benchmark judged them by."""
    m, n = costs.method, len(costs.shapes)
    count = {o: sum(s.build_outcome is o for s in costs.shapes) for o in Outcome}
    bounds = (f" (at most 0 ms, the interval's high end at most +{m['build_ceiling_ms']} ms)"
              if "build_ceiling_ms" in m else "")
    within = f" (within {m['kernel_tolerance'] - 1:.0%})" if "kernel_tolerance" in m else ""
    return (f"the host-build target{bounds} is met at {count[Outcome.MET]} of {n} shapes, missed at "
            f"{count[Outcome.MISSED]}, unresolved at {count[Outcome.UNRESOLVED]} (its interval holds the target); the "
            f"route runs the fastest FlashInfer kernel{within} at {sum(s.kernel_outcome is Outcome.MET for s in costs.shapes)}"
            f". The A/A pair stayed within its bound at {sum(s.aa_within for s in costs.shapes)}"
            + ("." if all(s.aa_within for s in costs.shapes) else ": where it did not, that shape's intervals are as "
               "wide as noise."))


def bottom_line(costs: Costs | None) -> str:
    """Where the final draft stands against the FLASH_ATTN draft (beyond the A/A pair's noise, or level) and why (its
    host build or its kernel, with the kernels' shares of copy bandwidth), then the RTX 4090 path's gain; without
    `costs`, that it is not recorded yet."""
    if costs is None:
        return "where the final draft stands is not recorded yet: the GPU pass measures it."
    shapes, n = costs.shapes, len(costs.shapes)
    behind = [s for s in shapes if _side(s) == 1]
    ahead = [s for s in shapes if _side(s) == -1]
    kernel = [s for s in behind if beyond_noise(s.attention, s.aa_bound_ms) == 1]
    level = n - len(behind) - len(ahead)
    text = (f"beyond the noise, the final FlashInfer draft costs more per decoding step than the FLASH_ATTN draft at "
            f"{len(behind)} of {n} shapes, less at {len(ahead)}" + (f", and is level at {level}." if level else "."))
    if behind:
        why = ("the kernel" if len(kernel) == len(behind) else "the host build" if not kernel else
               f"the kernel at {len(kernel)} of them and the host build at {len(behind) - len(kernel)}")
        worst = max(behind, key=lambda s: max(s.attention.value if s.attention else 0, s.build.value if s.build else 0))
        ran, fa = worst.kernel(worst.route), worst.kernel(FLASH_ATTN_KERNEL)
        text += (f" Where it costs more, it is {why}. The largest gap, at {worst.name}, is "
                 f"{interval_text(worst.attention)} ms of attention and {interval_text(worst.build)} ms of build a "
                 f"step, on {KERNEL_NAMES.get(worst.route, worst.route or 'a kernel not recorded')}"
                 + (f" at {ran.share_of_copy:.0%} of copy bandwidth" if ran else "")
                 + (f" where FlashAttention reaches {fa.share_of_copy:.0%}" if fa else "") + ".")
    return text + " " + gains_sentence(costs)


def gain_words(gains, pick, what: str = "no speculation's tokens/s") -> str:
    """'2.20x <what> at every batch', or '1.90x, 2.20x <what> at batch 1, 8': `pick(gain)`'s medians."""
    shown = ["-" if pick(g) is None else GAIN.format(pick(g).value) for g in gains]
    if len(set(shown)) == 1:
        return f"{shown[0]} {what} at every batch"
    return f"{', '.join(shown)} {what} at batch {', '.join(str(g.batch) for g in gains)}"


def gains_sentence(costs: Costs) -> str:
    """The bottom line's sentence on the RTX 4090 path: both drafts' gains."""
    if not costs.gains:
        return "The RTX 4090 path's gain is not recorded yet."
    return (f"On the RTX 4090 path, where FlashInfer is the draft's only backend, DFlash with the final draft runs at "
            f"{gain_words(costs.gains, lambda g: g.final_gain)}; with the PR's own step-4 draft at "
            f"{gain_words(costs.gains, lambda g: g.step4_gain)}.")


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
