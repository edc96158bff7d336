"""What one engine run is: `RunSpec`, checked before any process starts, and the `LLM(...)` call it makes.

`engine_arguments(spec)` is the one place that turns a spec into vLLM's `LLM(**kwargs)`: the engine process
calls it, and the notebooks print it (`engine_call`), so the call a reader sees is the call that ran.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from dflash_fi.engine.identity import RunId, Workload
from dflash_fi.errors import BadInput
from dflash_fi.models import (DEFAULT_DRAFTER, DEFAULT_NEW_TOKENS, DEFAULT_NUM_PROMPTS, DEFAULT_PROMPTS,
                              DEFAULT_TARGET, check_model_dir, require_count, require_prompts)
from dflash_fi.vocabulary import DRAFT_BACKENDS, KV_CACHE_DTYPES, NUM_SPECULATIVE_TOKENS

TARGET_BACKENDS = (None, "FLASHINFER", "FLASH_ATTN")  # None: vLLM's own choice for the target
FLASH_ATTN_VERSIONS = (None, 2, 3)  # None: vLLM's choice (FA3 on SM 9.0); 2: all an RTX 4090 has


@dataclass(frozen=True)
class BenchPlan:
    """A benchmark engine's rounds: per batch size b, the first b prompts decoded together, `repeats` times; batch 1
    decodes one prompt alone instead, one of the first `batch1_prompts` (one prompt alone says more about it than the
    engine; `dflash_fi.engine.generate.benchmark_batch`)."""

    batch_sizes: tuple[int, ...]
    batch1_prompts: int = 1
    repeats: int = 1


@dataclass(frozen=True)
class RunSpec:
    """One engine run: what it is (`run`) and the engine parameters that make it so."""

    run: RunId
    target: str = str(DEFAULT_TARGET)
    drafter: str = str(DEFAULT_DRAFTER)
    prompts_file: str = str(DEFAULT_PROMPTS)
    num_prompts: int = DEFAULT_NUM_PROMPTS
    max_new_tokens: int = DEFAULT_NEW_TOKENS
    # Generated, in order, in the one engine (dflash_fi.engine.workloads).
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

    def validate(self) -> "RunSpec":
        """This spec, checked (BadInput says what to change), with model paths as given or hub ids."""
        from dflash_fi.steps import check_step

        run = replace(self.run, step=check_step(self.run.step))
        if run.draft_backend not in (*DRAFT_BACKENDS, None):
            raise BadInput(f"draft backend {run.draft_backend!r}: leave it out (vLLM's selector chooses) or "
                           f"choose one of {', '.join(DRAFT_BACKENDS)}")
        if run.target_backend not in TARGET_BACKENDS:
            raise BadInput(f"target backend {run.target_backend!r}: leave it out (vLLM chooses) or choose "
                           f"one of {', '.join(b for b in TARGET_BACKENDS if b)}")
        if run.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise BadInput(f"KV cache dtype {run.kv_cache_dtype!r}: choose one of {', '.join(KV_CACHE_DTYPES)}")
        if run.flash_attn_version not in FLASH_ATTN_VERSIONS:
            raise BadInput(f"FlashAttention version {run.flash_attn_version!r}: leave it out or choose 2 or 3")
        try:
            workloads = tuple(Workload(w) for w in self.workloads)
        except ValueError:
            workloads = ()
        if not workloads:
            raise BadInput(f"workloads {self.workloads!r}: choose from {', '.join(w.value for w in Workload)}")
        require_prompts(self.num_prompts, Path(self.prompts_file))
        require_count("--max-new-tokens", self.max_new_tokens)
        for name in ("num_gpu_blocks", "max_num_seqs", "logprobs"):
            if getattr(self, name) is not None:
                require_count(f"--{name.replace('_', '-')} (or leave it out)", getattr(self, name))
        if self.bench is not None:
            require_count("--repeats", self.bench.repeats)
            require_count(f"prompts decoded alone at batch 1 (at most --prompts {self.num_prompts})",
                          self.bench.batch1_prompts, self.num_prompts)
            for b in self.bench.batch_sizes:
                require_count(f"a batch size (at most --prompts {self.num_prompts})", b, self.num_prompts)
        if not 0 < self.gpu_memory_utilization <= 1:
            raise BadInput(f"--gpu-memory-utilization must be in (0, 1], not {self.gpu_memory_utilization}")
        return replace(self, run=run, workloads=workloads, target=check_model_dir("target", self.target),
                       drafter=check_model_dir("drafter", self.drafter))

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


def engine_arguments(spec: RunSpec) -> dict:
    """vLLM's `LLM(**kwargs)` for this spec: what the engine process passes, and what a notebook prints."""
    kwargs = dict(
        model=spec.target, tokenizer=spec.target, dtype="bfloat16", seed=0,
        enforce_eager=not spec.run.cuda_graphs, kv_cache_dtype=spec.run.kv_cache_dtype,
        max_model_len=spec.max_model_len, gpu_memory_utilization=spec.gpu_memory_utilization,
        disable_log_stats=False, load_format=spec.load_format, skip_tokenizer_init=spec.load_format == "dummy",
    )
    if spec.run.target_backend:
        kwargs["attention_backend"] = spec.run.target_backend
    if spec.run.flash_attn_version is not None:
        kwargs["attention_config"] = {"flash_attn_version": spec.run.flash_attn_version}
    if spec.num_gpu_blocks:
        kwargs["num_gpu_blocks_override"] = spec.num_gpu_blocks
    if spec.kv_cache_memory_bytes:
        kwargs["kv_cache_memory_bytes"] = spec.kv_cache_memory_bytes
    if spec.max_num_seqs:
        kwargs["max_num_seqs"] = spec.max_num_seqs
    if spec.run.speculative:
        kwargs["speculative_config"] = {"method": "dflash", "model": spec.drafter,
                                        "num_speculative_tokens": spec.num_speculative_tokens}
        if spec.run.draft_backend:
            kwargs["speculative_config"]["attention_backend"] = spec.run.draft_backend
    return kwargs


# What a reader needs to see to run the same engine; the rest (memory, KV blocks) only lets engines share a GPU.
SHOWN_ARGUMENTS = ("model", "enforce_eager", "kv_cache_dtype", "attention_backend", "attention_config",
                   "max_num_seqs", "speculative_config")


def engine_call(spec: RunSpec, root: Path | None = None) -> str:
    """The engine as a reader would start it in a script: the step's environment variable and `LLM(...)`.

    Paths are shown relative to `root` (the repository), so the text is the same on every machine.
    """
    from dflash_fi.plugin import STEP_ENV
    from dflash_fi.stack import REPO_ROOT

    root = Path(root or REPO_ROOT)

    def shown(value):
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k!r}: {shown(v)}" for k, v in value.items()) + "}"
        if isinstance(value, str) and Path(value).is_absolute():
            try:
                return repr(str(Path(value).relative_to(root)))
            except ValueError:
                return repr(value)
        return repr(value)

    kwargs = engine_arguments(spec)
    lines = [f"os.environ[{STEP_ENV!r}] = {str(spec.run.step)!r}  # FLASHINFER is step {spec.run.step}"
             + (" (vLLM's own)" if spec.run.step == 0 else ""),
             "llm = LLM("]
    lines += [f"    {name}={shown(kwargs[name])}," for name in SHOWN_ARGUMENTS if name in kwargs]
    lines.append(")")
    return "\n".join(lines)
