"""What one engine run is: `RunSpec`, checked before any process starts, and the `LLM(...)` call it makes.

`engine_arguments(spec)` is the one place that turns a spec into vLLM's `LLM(**kwargs)`: the engine process
calls it, and the notebooks print it (`engine_call`), so the call a reader sees is the call that ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dflash_fi.errors import BadInput
from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_PROMPTS, DEFAULT_TARGET, check_model_dir, require_count
from dflash_fi.vocabulary import DRAFT_BACKENDS, KV_CACHE_DTYPES, NUM_SPECULATIVE_TOKENS

TARGET_BACKENDS = (None, "FLASHINFER", "FLASH_ATTN")  # None: vLLM's own choice for the target
FLASH_ATTN_VERSIONS = (None, 2, 3)  # None: vLLM's choice (FA3 on SM 9.0); 2: all an RTX 4090 has
WORKLOADS = ("uniform", "mixed")  # see dflash_fi.engine.workloads


@dataclass
class RunSpec:
    label: str
    step: int = 0
    draft_backend: str | None = "FLASHINFER"  # None: left to vLLM's selector, as when a user names none
    target_backend: str | None = None
    kv_cache_dtype: str = "auto"
    flash_attn_version: int | None = None
    speculative: bool = True
    target: str = str(DEFAULT_TARGET)
    drafter: str = str(DEFAULT_DRAFTER)
    prompts_file: str = str(DEFAULT_PROMPTS)
    num_prompts: int = 32
    max_new_tokens: int = 128
    # Generates, in order, in the one engine: "uniform" (num_prompts prompts, max_new_tokens each) and
    # "mixed" (prompts of other lengths, other max_tokens, more requests than max_num_seqs).
    workloads: tuple[str, ...] = ("uniform",)
    cuda_graphs: bool = False  # False: enforce_eager=True; True: vLLM's default compilation and graphs
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
    # Benchmarks: generate with the first b prompts for each b, after one warm-up, `repeats` times each.
    batch_sizes: tuple[int, ...] | None = None
    repeats: int = 1
    timeout_s: int = 420
    extra: dict = field(default_factory=dict)

    def validate(self) -> "RunSpec":
        from dflash_fi.steps import check_step

        self.step = check_step(self.step)
        if self.draft_backend not in (*DRAFT_BACKENDS, None):
            raise BadInput(f"draft backend {self.draft_backend!r}: leave it out (vLLM's selector chooses) or "
                           f"choose one of {', '.join(DRAFT_BACKENDS)}")
        if self.target_backend not in TARGET_BACKENDS:
            raise BadInput(f"target backend {self.target_backend!r}: leave it out (vLLM chooses) or choose "
                           f"one of {', '.join(b for b in TARGET_BACKENDS if b)}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise BadInput(f"KV cache dtype {self.kv_cache_dtype!r}: choose one of {', '.join(KV_CACHE_DTYPES)}")
        if self.flash_attn_version not in FLASH_ATTN_VERSIONS:
            raise BadInput(f"FlashAttention version {self.flash_attn_version!r}: leave it out or choose 2 or 3")
        unknown = [w for w in self.workloads if w not in WORKLOADS]
        if unknown or not self.workloads:
            raise BadInput(f"workloads {self.workloads!r}: choose from {', '.join(WORKLOADS)}")
        self.target = check_model_dir("target", self.target)
        self.drafter = check_model_dir("drafter", self.drafter)
        require_count("--prompts", self.num_prompts)
        require_count("--max-new-tokens", self.max_new_tokens)
        require_count("--repeats", self.repeats)
        for name in ("num_gpu_blocks", "max_num_seqs", "logprobs"):
            if getattr(self, name) is not None:
                require_count(f"--{name.replace('_', '-')} (or leave it out)", getattr(self, name))
        if self.batch_sizes is not None:
            for b in self.batch_sizes:
                require_count(f"a batch size (at most --prompts {self.num_prompts})", b, self.num_prompts)
        if not 0 < self.gpu_memory_utilization <= 1:
            raise BadInput(f"--gpu-memory-utilization must be in (0, 1], not {self.gpu_memory_utilization}")
        return self


def engine_arguments(spec: RunSpec) -> dict:
    """vLLM's `LLM(**kwargs)` for this spec: what the engine process passes, and what a notebook prints."""
    kwargs = dict(
        model=spec.target, tokenizer=spec.target, dtype="bfloat16", seed=0,
        enforce_eager=not spec.cuda_graphs, kv_cache_dtype=spec.kv_cache_dtype,
        max_model_len=spec.max_model_len, gpu_memory_utilization=spec.gpu_memory_utilization,
        disable_log_stats=False, load_format=spec.load_format, skip_tokenizer_init=spec.load_format == "dummy",
    )
    if spec.target_backend:
        kwargs["attention_backend"] = spec.target_backend
    if spec.flash_attn_version is not None:
        kwargs["attention_config"] = {"flash_attn_version": spec.flash_attn_version}
    if spec.num_gpu_blocks:
        kwargs["num_gpu_blocks_override"] = spec.num_gpu_blocks
    if spec.kv_cache_memory_bytes:
        kwargs["kv_cache_memory_bytes"] = spec.kv_cache_memory_bytes
    if spec.max_num_seqs:
        kwargs["max_num_seqs"] = spec.max_num_seqs
    if spec.speculative:
        kwargs["speculative_config"] = {"method": "dflash", "model": spec.drafter,
                                        "num_speculative_tokens": spec.num_speculative_tokens}
        if spec.draft_backend:
            kwargs["speculative_config"]["attention_backend"] = spec.draft_backend
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
    lines = [f"os.environ[{STEP_ENV!r}] = {str(spec.step)!r}  # FLASHINFER is step {spec.step}"
             + (" (vLLM's own)" if spec.step == 0 else ""),
             "llm = LLM("]
    lines += [f"    {name}={shown(kwargs[name])}," for name in SHOWN_ARGUMENTS if name in kwargs]
    lines.append(")")
    return "\n".join(lines)
