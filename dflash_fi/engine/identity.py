"""What an engine run is, as data: `RunId`. Plans, records, checks and benchmarks key runs by it; a run's label
is rendered from it (`label`) where a person reads it, and never read back.

    step               the step FLASHINFER resolves to in that engine (DFLASH_FI_STEP; 0: vLLM's own)
    speculative        DFlash on, or plain greedy decoding
    draft_backend      speculative_config["attention_backend"]; None: left to vLLM's selector
    target_backend     the target's attention_backend; None: vLLM's choice
    kv_cache_dtype     "auto" (bf16 here) or "fp8"
    flash_attn_version vLLM's FlashAttention forced to 2 or 3; None: vLLM's choice (3 on SM 9.0)
    cuda_graphs        vLLM's default compilation and graphs, or enforce_eager
    pair               the models: the embedded pair, the Qwen3-4B shape (random weights), or the user's own
    replica            a second engine of the same configuration (a benchmark's A/A pair)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum


class Workload(str, Enum):
    """What an engine generates (dflash_fi.engine.workloads)."""

    UNIFORM = "uniform"
    MIXED = "mixed"


class Pair(str, Enum):
    EMBEDDED = "embedded"
    QWEN3_4B_SHAPE = "qwen3-4b-shape"  # random weights: every draft is rejected, only time means anything
    CUSTOM = "custom"  # models the user named (`dflash-fi run --target ... --drafter ...`)


@dataclass(frozen=True)
class RunId:
    step: int = 0
    speculative: bool = True
    draft_backend: str | None = "FLASHINFER"
    target_backend: str | None = None
    kv_cache_dtype: str = "auto"
    flash_attn_version: int | None = None
    cuda_graphs: bool = False
    pair: Pair = Pair.EMBEDDED
    replica: int = 0

    def __post_init__(self):
        object.__setattr__(self, "pair", Pair(self.pair))
        if not self.speculative:  # plain decoding has no draft
            object.__setattr__(self, "draft_backend", None)

    def to_json(self) -> dict:
        """What differs from the defaults (`from_json` fills them in)."""
        default = RunId()
        return {f.name: (v.value if isinstance(v, Enum) else v) for f in fields(self)
                if (v := getattr(self, f.name)) != getattr(default, f.name)}

    @classmethod
    def from_json(cls, data: dict) -> "RunId":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def draft_on_flashinfer(self) -> bool:
        """The draft asks for FlashInfer by name (not FLASH_ATTN, not the selector's choice)."""
        return self.speculative and self.draft_backend == "FLASHINFER"


def label(run: RunId) -> str:
    """The run as a person reads it, e.g. 'step 7 FLASHINFER target and draft, CUDA graphs'."""
    if not run.speculative:
        what = "no speculation"
        if run.target_backend:
            what += f", {run.target_backend} target" + (f" (step {run.step})" if run.step else "")
    elif run.draft_backend is None:
        what = f"step {run.step}, draft backend left to the selector"
    elif run.draft_backend == "FLASHINFER":
        what = f"step {run.step} FLASHINFER " + ("target and draft" if run.target_backend == "FLASHINFER" else "draft")
    else:
        what = f"{run.draft_backend} draft" + (f", {run.target_backend} target" if run.target_backend else "")
    if run.kv_cache_dtype != "auto":
        what += f", {run.kv_cache_dtype} KV"
    if run.flash_attn_version is not None:
        what += f", FlashAttention {run.flash_attn_version} forced"
        if run.flash_attn_version == 2 and run.kv_cache_dtype == "fp8":
            what += " (the RTX 4090 case)"
    if run.cuda_graphs:
        what += ", CUDA graphs"
    if run.pair is Pair.QWEN3_4B_SHAPE:
        what = f"Qwen3-4B shape: {what}"
    elif run.pair is Pair.CUSTOM:
        what = f"your models: {what}"
    if run.replica:
        what += f" (engine {run.replica + 1})"
    return what


def slug(run: RunId) -> str:
    """The run in a file name (log files): the label's words joined by hyphens."""
    import re

    return re.sub(r"[^A-Za-z0-9]+", "-", label(run)).strip("-").lower()
