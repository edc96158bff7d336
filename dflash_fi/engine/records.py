"""What an engine run records, as types: `EngineRecord` and its parts. JSON at the file's edge only.

    EngineRecord    the run (`spec.run`), what vLLM selected, what failed and where, each workload's generate
                    (`dflash_fi.engine.outputs`), a benchmark's rounds, and where it came from (GPU, versions, commit)
    Failure         what went wrong, in which `Phase` (set where it happened, never guessed from text)
    Backend         an attention backend class as vLLM named it, and the dflash-fi step it was patched at
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum

from dflash_fi.engine.identity import RunId, Workload
from dflash_fi.engine.outputs import (Acceptance, BatchRun, BuildKey, BuildProfile, BuildTiming, GenerateResult,
                                      PlanWatch, ProfiledFunction, Role, Round, StepTimes, TurnCpu, decoding_steps,
                                      generate_from_json)
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
    async_scheduling: bool | None = None  # vLLM's resolved setting (None: recorded before it was)
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
        if data.get("schema") != SCHEMA:
            from dflash_fi.errors import BadInput

            raise BadInput(f"an engine record of schema {data.get('schema')}; this dflash-fi reads {SCHEMA}")
        return cls(
            spec=RunSpec.from_json(data["spec"]), ok=data["ok"],
            failure=Failure(**data["failure"]) if data.get("failure") else None,
            target_backends=tuple(Backend(**b) for b in data.get("target_backends", ())),
            draft_backends=tuple(Backend(**b) for b in data.get("draft_backends", ())),
            cudagraph_mode=data.get("cudagraph_mode"), max_cudagraph_capture_size=data.get("max_cudagraph_capture_size"),
            flash_attn_version=data.get("flash_attn_version"), async_scheduling=data.get("async_scheduling"),
            flash_attn_log_lines=tuple(data.get("flash_attn_log_lines", ())), engine_start_s=data.get("engine_start_s"),
            generates={Workload(w): generate_from_json(g) for w, g in (data.get("generates") or {}).items()},
            rounds=tuple(Round(r["index"], tuple(BatchRun(b["batch"], tuple(generate_from_json(g) for g in b["generates"]),
                                                          TurnCpu(**b["cpu"]) if b.get("cpu") else None)
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
           "Failure", "GenerateResult", "Phase", "PlanWatch", "ProfiledFunction", "Provenance", "Role", "Round", "StepTimes", "TurnCpu",
           "decoding_steps", "outcome", "short_backend"]
