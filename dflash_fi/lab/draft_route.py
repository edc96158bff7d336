"""Which path the final step's DFlash draft takes per GPU and shape: step 9's `use_xqa_for_draft`, asked as the builder
asks it, and set beside the kernel times that decided it.

The rule lives in step 9's hunks (the patched flashinfer.py); this module only calls it. `route_by_shape` takes the
kernel benchmark's rows (`dflash-fi bench kernels`: one dict per kernel and shape) and says, per shape, what XQA and
the kept-plan FA2 kernel took, which one the rule picks, and whether that pick is the faster one or level with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dflash_fi.lab.routes import Prefill

XQA_KERNEL, FA2_KERNEL = "flashinfer-xqa", "flashinfer-fa2"  # the benchmark's names for the two paths' kernels
# Level: within what #39 asks the benchmark to resolve (an A/A interval of +-2%, or +-0.005 ms where larger).
TIE_MS, TIE_SHARE = 0.005, 0.02
KV_DTYPES = {"auto": "bfloat16", "bf16": "bfloat16", "fp16": "float16", "fp8": "float8_e4m3fn",
             "fp8-e4m3": "float8_e4m3fn"}


def final_draft_route(capability: tuple[int, int], kv_cache_dtype: str, num_qo_heads: int, num_kv_heads: int,
                      num_reqs: int) -> Prefill:
    """The path step 9's builder sends a draft step of uniform blocks down (head and page sizes XQA compiles, no
    window or soft cap): Prefill.XQA or Prefill.NON_CAUSAL (step 8's kept-plan FA2 wrapper). `kv_cache_dtype`: vLLM's
    name ("auto", the model's bf16; "fp8") or the benchmark's ("bf16", "fp8-e4m3")."""
    import torch

    from dflash_fi.steps import backend_module

    dtype = getattr(torch, KV_DTYPES[kv_cache_dtype])
    takes_xqa = backend_module(9).use_xqa_for_draft(tuple(capability), dtype, num_qo_heads, num_kv_heads, num_reqs)
    return Prefill.XQA if takes_xqa else Prefill.NON_CAUSAL


@dataclass(frozen=True)
class ShapeRoute:
    kv_dtype: str
    num_qo_heads: int
    num_kv_heads: int
    batch: int
    context: int
    xqa_ms: float | None  # None: XQA was not built for this shape (an FP8 cache)
    fa2_ms: float
    route: Prefill

    @property
    def picked_ms(self) -> float:
        return self.xqa_ms if self.route is Prefill.XQA else self.fa2_ms

    @property
    def other_ms(self) -> float | None:
        return self.fa2_ms if self.route is Prefill.XQA else self.xqa_ms

    @property
    def faster(self) -> bool:
        """The rule's pick took no longer than the other kernel (or the other was not built)."""
        return self.other_ms is None or self.picked_ms <= self.other_ms

    @property
    def level(self) -> bool:
        """The pick is slower, but within the tie band."""
        return not self.faster and self.picked_ms - self.other_ms <= max(TIE_MS, TIE_SHARE * self.other_ms)


def route_by_shape(rows: list[dict], capability: tuple[int, int]) -> list[ShapeRoute]:
    """Per shape the rows time FA2 at (kv dtype, heads, batch, context): both kernels' median ms and the rule's pick.
    Rows without a time (a kernel not built there) count as absent."""
    timed: dict[tuple, dict[str, float]] = {}
    for row in rows:
        if row.get("kernel") in (XQA_KERNEL, FA2_KERNEL) and "median_ms" in row:
            key = (row["kv_dtype"], row["num_qo_heads"], row["num_kv_heads"], row["batch"], row["context"])
            timed.setdefault(key, {})[row["kernel"]] = row["median_ms"]
    return [ShapeRoute(*key, times.get(XQA_KERNEL), times[FA2_KERNEL],
                       final_draft_route(capability, key[0], key[1], key[2], key[3]))
            for key, times in sorted(timed.items()) if FA2_KERNEL in times]
