"""What one generate records, and a benchmark's rounds: `GenerateResult` and its parts, as types.

    GenerateResult  one `llm.generate`: tokens, speed, vLLM's spec-decode counters, near-ties, metadata builds,
                    the intervals between the engine's steps
    BuildTiming     the host time of one attention metadata builder's builds, keyed by (role, backend, layers)
    BatchRun, Round a benchmark round: per batch size, its generates
    BuildProfile    where one builder's builds spent host time (cProfile)
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, fields, replace
from enum import Enum


class Role(str, Enum):
    TARGET = "target step"  # the model runner's builds, one per attention group, each target forward
    DRAFT = "draft step"  # the drafter's own builds


@dataclass(frozen=True)
class BuildKey:
    role: Role
    backend: str  # the builder's backend, AttentionBackendEnum name
    layers: int  # attention layers the builder serves

    def __post_init__(self):
        object.__setattr__(self, "role", Role(self.role))


@dataclass(frozen=True)
class BuildTiming:
    key: BuildKey
    builds: int
    seconds: float
    largest_tokens: int  # most tokens in one build
    above_largest_graph: int  # builds of more tokens than the largest captured CUDA graph


@dataclass(frozen=True)
class PlanWatch:
    """FlashInfer plan() calls of one builder role over a generate (`instruments.plan_watch`): `pending` came while
    the same wrapper's previous plan had not reached the GPU, `pending_changed` of those for another batch, which a
    run queued behind the previous plan would read (the plan race, docs/plan-race.md)."""

    role: Role | None  # None: a plan outside any metadata build
    plans: int
    pending: int
    pending_changed: int

    def __post_init__(self):
        object.__setattr__(self, "role", None if self.role is None else Role(self.role))


@dataclass(frozen=True)
class Acceptance:
    """vLLM's spec-decode counters over one generate."""

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    per_position: tuple[float, ...]

    @property
    def tau(self) -> float | None:
        """Mean tokens per target forward: 1 + accepted drafts per draft block."""
        return 1 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else None


@dataclass(frozen=True)
class StepTimes:
    """Intervals between the engine's successive steps (model runner calls) during one generate, in ms."""

    count: int
    median: float
    p10: float
    p90: float

    @classmethod
    def of(cls, intervals_ms: list[float]) -> "StepTimes | None":
        if len(intervals_ms) < 2:
            return None
        q = statistics.quantiles(intervals_ms, n=10)
        return cls(len(intervals_ms), round(statistics.median(intervals_ms), 4), round(q[0], 4), round(q[-1], 4))


@dataclass(frozen=True)
class GenerateResult:
    num_requests: int
    generate_s: float
    output_tokens_per_s: float
    steps: float  # the engine's steps (model-runner calls); in records before they were counted, target forwards per request
    tokens_sha256: str
    tokens: tuple[tuple[int, ...], ...] = ()  # per request; benchmarks keep only the hash
    tpot_ms: float | None = None
    acceptance: Acceptance | None = None
    # Per request, [position, gap]: where the target's two best candidates were under near_tie_cap nats apart.
    near_ties: tuple[tuple[tuple[int, float], ...], ...] | None = None
    near_tie_cap: float | None = None
    builds: tuple[BuildTiming, ...] = ()
    step_times: StepTimes | None = None
    plans: tuple[PlanWatch, ...] | None = None  # None: not watched (benchmarks, profiles)

    def plan_watch(self, role: Role) -> PlanWatch | None:
        return next((w for w in self.plans or () if w.role is role), None)

    @property
    def tau(self) -> float | None:
        return self.acceptance.tau if self.acceptance else None

    @property
    def decode_tokens_per_s(self) -> float:
        """Output tokens per second at the median step period: the generate's tokens per engine step over the median
        interval between steps. Whole-generate tokens/s also counts what is not decoding (the prefill, the generate's
        start and end) and every stall of the host; this counts the typical step."""
        if not self.step_times:
            return self.output_tokens_per_s
        return self.output_tokens_per_s * self.generate_s / (self.steps * self.step_times.median / 1000)

    def build_ms_per_step(self, role: Role | None = None) -> float:
        """Host time of the metadata builds per decoding step, over the builders of `role` (all: None)."""
        return sum(b.seconds for b in self.builds if role in (None, b.key.role)) * 1000 / max(self.steps, 1)

    def without_tokens(self) -> "GenerateResult":
        return replace(self, tokens=())


@dataclass(frozen=True)
class TurnCpu:
    """The vCPU a benchmark turn's engine ran its main thread on (`dflash_fi.engine.vcpus`), and the ms of the same
    loop of pure Python on it before the turn, on the other vCPUs at the round's start (their median), and on it after
    the turn."""

    cpu: int
    loop_ms: float
    others_median_loop_ms: float
    loop_ms_after: float
    # the hypervisor's steal time on that vCPU during the turn (/proc/stat); None where not read
    steal_ms: float | None = None


@dataclass(frozen=True)
class BatchRun:
    """A benchmark round at one batch size: its generates (tokens/s of each, the rest of the typical one), and the
    vCPU the turn ran on (None where the benchmark did not choose one)."""

    batch: int
    generates: tuple[GenerateResult, ...]
    cpu: TurnCpu | None = None

    @property
    def tokens_per_s(self) -> float:
        return statistics.median(g.output_tokens_per_s for g in self.generates)

    @property
    def decode_tokens_per_s(self) -> float:
        return statistics.median(g.decode_tokens_per_s for g in self.generates)

    @property
    def step_ms(self) -> float:
        """Median over generates of each one's median interval between engine steps (whole generate if absent)."""
        return statistics.median(g.step_times.median if g.step_times else g.generate_s * 1000 / max(g.steps, 1)
                                 for g in self.generates)


@dataclass(frozen=True)
class Round:
    index: int
    batches: tuple[BatchRun, ...]
    # CPU seconds the other engines' processes used while this engine worked (they should be idle)
    others_cpu_s: float | None = None


@dataclass(frozen=True)
class ProfiledFunction:
    function: str
    file: str
    line: int
    calls: int
    own_s: float
    cumulative_s: float


@dataclass(frozen=True)
class BuildProfile:
    """Where one builder's builds spent their host time (cProfile, which slows what it watches)."""

    key: BuildKey
    total_s: float
    functions: tuple[ProfiledFunction, ...]


def generate_from_json(data: dict) -> GenerateResult:
    values = {f.name: data[f.name] for f in fields(GenerateResult) if f.name in data}
    values["tokens"] = tuple(tuple(t) for t in data.get("tokens") or ())
    if data.get("acceptance"):
        values["acceptance"] = Acceptance(**{**data["acceptance"], "per_position": tuple(data["acceptance"]["per_position"])})
    if data.get("near_ties") is not None:
        values["near_ties"] = tuple(tuple((int(p), g) for p, g in request) for request in data["near_ties"])
    values["builds"] = tuple(BuildTiming(BuildKey(**b["key"]), b["builds"], b["seconds"], b["largest_tokens"],
                                         b["above_largest_graph"]) for b in data.get("builds") or ())
    if data.get("step_times"):
        values["step_times"] = StepTimes(**data["step_times"])
    if data.get("plans") is not None:
        values["plans"] = tuple(PlanWatch(**w) for w in data["plans"])
    return GenerateResult(**values)


def decoding_steps(acceptance: Acceptance | None, num_requests: int, max_tokens: int) -> float:
    """Target forwards a request needed: draft blocks per request with speculation, one per token without."""
    return acceptance.num_drafts / max(num_requests, 1) if acceptance else float(max_tokens)
