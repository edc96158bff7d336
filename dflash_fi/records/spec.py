"""What one engine run is asked to do: `RunSpec` (the run, the models, the prompts, the engine's parameters) and a
benchmark engine's `BenchPlan`. Data only: `dflash_fi.proof.engine.spec` checks a spec and turns it into vLLM's call.

The default models and prompts are the embedded pair's, which `dflash_fi.models` ships (named here, the one place).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path

from dflash_fi.records.runs import RunId, Workload
from dflash_fi.vocabulary import NUM_SPECULATIVE_TOKENS

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
DEFAULT_TARGET = MODELS_DIR / "target"
DEFAULT_DRAFTER = MODELS_DIR / "drafter"
DEFAULT_PROMPTS = MODELS_DIR / "prompts.json"
# What the walkthrough and a single run decode by default: held-out prompts x new tokens each.
DEFAULT_NUM_PROMPTS, DEFAULT_NEW_TOKENS = 32, 128
LIVE_PROMPTS, LIVE_NEW_TOKENS = 16, 96  # a notebook's live runs, smaller than the walkthrough's: engine start-up dominates


@dataclass(frozen=True)
class BenchPlan:
    """A benchmark engine's rounds: per batch size b, the first b prompts decoded together, `repeats` times; batch 1
    decodes one prompt alone instead, one of the first `batch1_prompts` (one prompt alone says more about it than the
    engine; `dflash_fi.proof.engine.generate.benchmark_batch`)."""

    batch_sizes: tuple[int, ...]
    batch1_prompts: int = 1
    repeats: int = 1
    # Time the draft layers' attention with CUDA events (`dflash_fi.proof.engine.draft_timing`): the engines whose
    # draft cost is compared; the others decode without the events' host work.
    time_draft: bool = False


@dataclass(frozen=True)
class RunSpec:
    """One engine run: what it is (`run`) and the engine parameters that make it so."""

    run: RunId
    target: str = str(DEFAULT_TARGET)
    drafter: str = str(DEFAULT_DRAFTER)
    prompts_file: str = str(DEFAULT_PROMPTS)
    num_prompts: int = DEFAULT_NUM_PROMPTS
    max_new_tokens: int = DEFAULT_NEW_TOKENS
    # Generated, in order, in the one engine (dflash_fi.proof.engine.workloads).
    workloads: tuple[Workload, ...] = (Workload.UNIFORM,)
    num_speculative_tokens: int = NUM_SPECULATIVE_TOKENS
    gpu_memory_utilization: float = 0.4  # tiny embedded pair; raise it for real models
    # Pins the KV cache to this many blocks (vLLM's num_gpu_blocks_override); None: sized from free memory.
    num_gpu_blocks: int | None = None
    # Reserves exactly this much for the KV cache and skips vLLM's memory profiling, which counts other
    # processes' allocations as its own: what lets several small engines share one GPU.
    kv_cache_memory_bytes: int | None = None
    max_model_len: int = 1024
    max_num_seqs: int | None = None  # None: vLLM's default
    # The target's top-k logprobs per output token (the near-tie rule reads the top 2); None: not asked.
    logprobs: int | None = None
    load_format: str = "auto"  # "dummy": random weights, for timing shapes whose weights are not here
    bench: BenchPlan | None = None  # a benchmark engine: rounds on request instead of the workloads
    timeout_s: int = 420

    def to_json(self) -> dict:
        data = asdict(self)
        data["run"] = self.run.to_json()
        data["workloads"] = [w.value for w in self.workloads]
        return data

    @classmethod
    def from_json(cls, data: dict) -> "RunSpec":
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["run"] = RunId.from_json(data["run"])
        values["workloads"] = tuple(Workload(w) for w in data.get("workloads", ("uniform",)))
        if data.get("bench"):
            values["bench"] = BenchPlan(**{**data["bench"], "batch_sizes": tuple(data["bench"]["batch_sizes"])})
        return cls(**values)
