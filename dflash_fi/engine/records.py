"""What an engine run records, as types: `EngineRecord` and its parts. JSON at the file's edge only.

    EngineRecord    the run (`spec.run`), what vLLM selected, what failed and where, each workload's generate,
                    a benchmark's rounds, and where it came from (GPU, versions, commit, command)
    GenerateResult  one `llm.generate`: tokens, speed, vLLM's spec-decode counters, near-ties, metadata builds
    BuildTiming     the host time of one attention metadata builder's builds, keyed by (role, backend, layers)
    Failure         what went wrong, in which `Phase` (set where it happened, never guessed from text)

Records written before these types (no "schema" key) are read by `from_json` too: every field they have maps to
data here, except the old builder keys ("target step, FLASHINFER (2 layers)"), which stay opaque text.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, fields, replace
from enum import Enum

from dflash_fi.engine.identity import RunId, Workload
from dflash_fi.engine.spec import BenchPlan, RunSpec

SCHEMA = 2


class Phase(str, Enum):
    IMPORT = "import"
    ENGINE_START = "engine start"
    SELECTION = "selection"  # vLLM's selector refused every backend, or the one asked for
    FIRST_DRAFT_STEP = "first draft step"  # the drafter failed before it ever proposed
    DRAFT_STEP = "draft step"
    GENERATION = "generation"
    PROCESS = "process"  # the engine process ended without a result
    ROUNDS = "rounds"  # a benchmark engine stopped answering


class Role(str, Enum):
    TARGET = "target step"  # the model runner's builds, one per attention group, each target forward
    DRAFT = "draft step"  # the drafter's own builds


@dataclass(frozen=True)
class Failure:
    type: str
    message: str
    phase: Phase
    traceback_tail: str = ""

    def __post_init__(self):
        object.__setattr__(self, "phase", Phase(self.phase))


@dataclass(frozen=True)
class Backend:
    """One attention backend class of an engine: vLLM's name for it, and the dflash-fi step it was built at."""

    qualname: str
    name: str | None = None  # AttentionBackendEnum name, e.g. FLASHINFER (None: recorded before it was)
    step: int | None = None  # the dflash-fi step of a patched module; None: vLLM's own class


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
    legacy_builds: dict | None = None  # builder timings recorded under text keys, kept as written

    @property
    def tau(self) -> float | None:
        return self.acceptance.tau if self.acceptance else None

    def build_ms_per_step(self, role: Role | None = None) -> float:
        """Host time of the metadata builds per decoding step, over the builders of `role` (all: None)."""
        return sum(b.seconds for b in self.builds if role in (None, b.key.role)) * 1000 / max(self.steps, 1)

    def without_tokens(self) -> "GenerateResult":
        return replace(self, tokens=())


@dataclass(frozen=True)
class BatchRun:
    """A benchmark round at one batch size: its generates (tokens/s of each, the rest of the typical one)."""

    batch: int
    generates: tuple[GenerateResult, ...]

    @property
    def tokens_per_s(self) -> float:
        return statistics.median(g.output_tokens_per_s for g in self.generates)

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


@dataclass(frozen=True)
class Provenance:
    """Where a record came from."""

    gpu: str | None
    compute_capability: str | None
    versions: dict
    git_commit: str | None
    command: str | None
    finished_at: str
    wall_s: float | None = None
    log_file: str | None = None
    log_tail: str = ""
    models: dict = field(default_factory=dict)  # sha256 of each local model's weight files


@dataclass(frozen=True)
class EngineRecord:
    spec: RunSpec
    ok: bool
    failure: Failure | None = None
    target_backends: tuple[Backend, ...] = ()
    draft_backends: tuple[Backend, ...] = ()
    cudagraph_mode: str | None = None
    max_cudagraph_capture_size: int | None = None
    flash_attn_version: int | None = None  # what vLLM's get_flash_attn_version answered in the engine
    flash_attn_log_lines: tuple[str, ...] = ()
    engine_start_s: float | None = None
    generates: dict = field(default_factory=dict)  # Workload -> GenerateResult
    rounds: tuple[Round, ...] = ()
    build_profiles: tuple[BuildProfile, ...] = ()
    walkthrough: str | None = None  # the id of the walkthrough manifest this run belongs to
    provenance: Provenance | None = None

    def __post_init__(self):
        object.__setattr__(self, "generates", {Workload(w): g for w, g in self.generates.items()})

    @property
    def run(self) -> RunId:
        return self.spec.run

    def generate(self, workload: Workload = Workload.UNIFORM) -> GenerateResult | None:
        return self.generates.get(Workload(workload))

    @property
    def tau(self) -> float | None:
        uniform = self.generate()
        return uniform.tau if uniform else None

    def to_json(self) -> dict:
        data = {"schema": SCHEMA, "kind": "engine", **to_plain(self)}
        data["spec"] = self.spec.to_json()
        data["generates"] = {w.value: to_plain(g) for w, g in self.generates.items()}
        return data

    @classmethod
    def from_json(cls, data: dict) -> "EngineRecord":
        if data.get("schema") is None:
            return _from_legacy(data)
        return cls(
            spec=RunSpec.from_json(data["spec"]), ok=data["ok"],
            failure=Failure(**data["failure"]) if data.get("failure") else None,
            target_backends=tuple(Backend(**b) for b in data.get("target_backends", ())),
            draft_backends=tuple(Backend(**b) for b in data.get("draft_backends", ())),
            cudagraph_mode=data.get("cudagraph_mode"), max_cudagraph_capture_size=data.get("max_cudagraph_capture_size"),
            flash_attn_version=data.get("flash_attn_version"),
            flash_attn_log_lines=tuple(data.get("flash_attn_log_lines", ())), engine_start_s=data.get("engine_start_s"),
            generates={Workload(w): generate_from_json(g) for w, g in (data.get("generates") or {}).items()},
            rounds=tuple(Round(r["index"], tuple(BatchRun(b["batch"], tuple(generate_from_json(g) for g in b["generates"]))
                                                 for b in r["batches"]), r.get("others_cpu_s"))
                         for r in data.get("rounds", ())),
            build_profiles=tuple(BuildProfile(BuildKey(**p["key"]), p["total_s"],
                                              tuple(ProfiledFunction(**f) for f in p["functions"]))
                                 for p in data.get("build_profiles", ())),
            walkthrough=data.get("walkthrough"),
            provenance=Provenance(**data["provenance"]) if data.get("provenance") else None)


def to_plain(obj) -> dict:
    """A dataclass as JSON-ready data (enums by value)."""
    def clean(value):
        if isinstance(value, Enum):
            return value.value
        if isinstance(value, dict):
            return {(k.value if isinstance(k, Enum) else k): clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value
    return {k: clean(v) for k, v in asdict(obj).items()}


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
    return GenerateResult(**values)


def _legacy_generate(data: dict) -> GenerateResult | None:
    if "tokens" not in data and "tokens_sha256" not in data:
        return None
    acceptance = None
    if data.get("num_drafts") is not None:
        acceptance = Acceptance(data["num_drafts"], data.get("num_draft_tokens", 0), data["num_accepted_tokens"],
                                tuple(data.get("per_position_acceptance") or ()))
    tokens = tuple(tuple(t) for t in data.get("tokens") or ())
    steps = acceptance.num_drafts / max(data.get("num_requests") or len(tokens) or 1, 1) if acceptance else \
        max((len(t) for t in tokens), default=0)
    legacy = {k: data[k] for k in ("metadata_build_ms_per_step", "metadata_builds_per_step", "largest_build_tokens",
                                   "builds_larger_than_largest_graph") if k in data}
    return GenerateResult(
        num_requests=data.get("num_requests") or len(tokens), generate_s=data.get("generate_s", 0.0),
        output_tokens_per_s=data.get("output_tokens_per_s", 0.0), steps=steps, tokens_sha256=data.get("tokens_sha256", ""),
        tokens=tokens, tpot_ms=data.get("tpot_ms"), acceptance=acceptance,
        near_ties=(tuple(tuple((int(p), g) for p, g in r) for r in data["near_ties"]) if "near_ties" in data else None),
        near_tie_cap=data.get("near_tie_cap"), legacy_builds=legacy or None)


def _from_legacy(data: dict) -> EngineRecord:
    """A record as written before these types: every field at the top, the mixed workload under "mixed"."""
    spec = RunSpec.from_legacy_json(data["spec"])
    generates = {}
    if (uniform := _legacy_generate(data)) is not None:
        generates[Workload.UNIFORM] = uniform
    if data.get("mixed") and (mixed := _legacy_generate(data["mixed"])) is not None:
        generates[Workload.MIXED] = mixed
    error = data.get("error")
    backends = data.get("backends") or {}
    provenance = Provenance(
        gpu=data.get("gpu"), compute_capability=data.get("compute_capability"), versions=data.get("versions") or {},
        git_commit=data.get("git_commit"), command=data.get("command"), finished_at=data.get("finished_at", ""),
        wall_s=data.get("wall_s"), log_file=data.get("log_file"), log_tail=data.get("log_tail", ""),
        models=data.get("models") or {})
    return EngineRecord(
        spec=spec, ok=bool(data.get("ok")),
        failure=Failure(error["type"], error.get("message", ""), error["phase"], error.get("traceback_tail", ""))
        if error else None,
        target_backends=tuple(Backend(q) for q in backends.get("target", ())),
        draft_backends=tuple(Backend(q) for q in backends.get("draft", ())),
        cudagraph_mode=data.get("cudagraph_mode"), max_cudagraph_capture_size=data.get("max_cudagraph_capture_size"),
        flash_attn_version=data.get("flash_attn_version"), flash_attn_log_lines=tuple(data.get("flash_attn_log_lines", ())),
        engine_start_s=data.get("engine_start_s"), generates=generates,
        walkthrough=(data["spec"].get("extra") or {}).get("walkthrough_id"), provenance=provenance)


def decoding_steps(acceptance: Acceptance | None, num_requests: int, max_tokens: int) -> float:
    """Target forwards a request needed: draft blocks per request with speculation, one per token without."""
    return acceptance.num_drafts / max(num_requests, 1) if acceptance else float(max_tokens)


def outcome(record: EngineRecord, detail: bool = False) -> str:
    """'runs', 'runs, tau 4.335' or 'ValueError at selection' (with detail: and the message, shortened)."""
    if record.ok:
        return f"runs, tau {record.tau:.3f}" if detail and record.tau is not None else "runs"
    failure = record.failure
    line = f"{failure.type} at {failure.phase.value}" if failure else "failed (no failure recorded)"
    if detail and failure:
        import textwrap

        line += ": " + textwrap.shorten(failure.message, 160, placeholder=" ...")
    return line


def short_backend(backend: Backend) -> str:
    """'FlashInfer (step 4)', 'FlashAttention': for tables."""
    names = {"FLASHINFER": "FlashInfer", "FLASH_ATTN": "FlashAttention"}
    name = names.get(backend.name, backend.name) if backend.name else backend.qualname.rsplit(".", 1)[-1]
    return name + (f" (step {backend.step})" if backend.step else "")


__all__ = ["Acceptance", "Backend", "BatchRun", "BenchPlan", "BuildKey", "BuildProfile", "BuildTiming", "EngineRecord",
           "Failure", "GenerateResult", "Phase", "ProfiledFunction", "Provenance", "Role", "Round", "StepTimes",
           "decoding_steps", "outcome", "short_backend"]
