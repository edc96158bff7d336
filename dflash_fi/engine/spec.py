"""What one engine run is: `RunSpec`, checked before any process starts."""

from __future__ import annotations

from dataclasses import dataclass, field

from dflash_fi.errors import BadInput
from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_PROMPTS, DEFAULT_TARGET, check_model_dir, require_count
from dflash_fi.vocabulary import DRAFT_BACKENDS, KV_CACHE_DTYPES, NUM_SPECULATIVE_TOKENS

TARGET_BACKENDS = (None, "FLASHINFER", "FLASH_ATTN")  # None: vLLM's own choice for the target


@dataclass
class RunSpec:
    label: str
    step: int = 0
    draft_backend: str = "FLASHINFER"
    target_backend: str | None = None
    kv_cache_dtype: str = "auto"
    speculative: bool = True
    target: str = str(DEFAULT_TARGET)
    drafter: str = str(DEFAULT_DRAFTER)
    prompts_file: str = str(DEFAULT_PROMPTS)
    num_prompts: int = 32
    max_new_tokens: int = 128
    cuda_graphs: bool = False  # False: enforce_eager=True; True: vLLM's default compilation and graphs
    num_speculative_tokens: int = NUM_SPECULATIVE_TOKENS
    gpu_memory_utilization: float = 0.4  # tiny embedded pair; raise it for real models
    # Pins the KV cache to this many blocks (vLLM's num_gpu_blocks_override); None: sized from free memory.
    num_gpu_blocks: int | None = None
    # Reserves exactly this much for the KV cache and skips vLLM's memory profiling, which counts other
    # processes' allocations as its own: what lets several small engines share one GPU.
    kv_cache_memory_bytes: int | None = None
    max_model_len: int = 1024
    load_format: str = "auto"  # "dummy": random weights, for timing shapes whose weights are not here
    # Benchmarks: generate with the first b prompts for each b, after one warm-up, `repeats` times each.
    batch_sizes: tuple[int, ...] | None = None
    repeats: int = 1
    timeout_s: int = 420
    extra: dict = field(default_factory=dict)

    def validate(self) -> "RunSpec":
        from dflash_fi.steps import check_step

        self.step = check_step(self.step)
        if self.draft_backend not in DRAFT_BACKENDS:
            raise BadInput(f"draft backend {self.draft_backend!r}: choose one of {', '.join(DRAFT_BACKENDS)}")
        if self.target_backend not in TARGET_BACKENDS:
            raise BadInput(f"target backend {self.target_backend!r}: leave it out (vLLM chooses) or choose "
                           f"one of {', '.join(b for b in TARGET_BACKENDS if b)}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise BadInput(f"KV cache dtype {self.kv_cache_dtype!r}: choose one of {', '.join(KV_CACHE_DTYPES)}")
        self.target = check_model_dir("target", self.target)
        self.drafter = check_model_dir("drafter", self.drafter)
        require_count("--prompts", self.num_prompts)
        require_count("--max-new-tokens", self.max_new_tokens)
        require_count("--repeats", self.repeats)
        if self.num_gpu_blocks is not None:
            require_count("--num-gpu-blocks (or leave it out: sized from free memory)", self.num_gpu_blocks)
        if self.batch_sizes is not None:
            for b in self.batch_sizes:
                require_count(f"a batch size (at most --prompts {self.num_prompts})", b, self.num_prompts)
        if not 0 < self.gpu_memory_utilization <= 1:
            raise BadInput(f"--gpu-memory-utilization must be in (0, 1], not {self.gpu_memory_utilization}")
        return self
