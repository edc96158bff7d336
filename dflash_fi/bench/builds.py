"""Host time of one draft step's attention metadata build, builder against builder (rows of `dflash-fi bench kernels`).

DFlash builds its draft metadata once per decoding step, `build_for_drafting()` (FlashInfer's and FlashAttention's
call `build(..., fast_build=True)`), from a `CommonAttentionMetadata` with no host copy of the sequence lengths. Here
the real builders of the CPU lab's engine (`RoutingLab`, the embedded pair, on this GPU) get the draft steps of one
batch at each kernel-bench batch size and context (`dflash_fi.lab.batches.draft_steps`: every request one 16-query
block, its context grown by one block per step, its host bound 0-15 tokens above the exact length):

    build: step 7 FLASHINFER draft      step 7's builder, which plans every step
    build: step N FLASHINFER draft      the final step's, in steady state: one plan before the timed builds
    build: FLASH_ATTN draft             vLLM's FlashAttentionMetadataBuilder, what the FLASH_ATTN draft builds

Each row: the median host milliseconds per build over BUILDS builds with the GPU idle before each (`host_ms_idle`),
and over BUILDS more with a kernel of BUSY_MS queued before each (`host_ms_busy`), so that a build that waits for the
GPU shows it (it then takes about BUSY_MS); `plans`: FlashInfer `plan()` calls in the `builds` after the shape's
first (warm-ups included). Heads are the embedded pair's, whatever the shape's kernel rows use.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager

WHAT = "host ms per draft-step metadata build"  # the rows' `what`, which kernel rows lack
BUILDS = 50
BUSY_MS = 5.0
# Room for the longest context of the bench and the blocks its draft steps add.
MAX_MODEL_LEN = 12288


def builder_names() -> dict[str, tuple[int, str]]:
    """Row name -> (step, the draft's attention backend)."""
    from dflash_fi.steps import FINAL_STEP

    return {"build: step 7 FLASHINFER draft": (7, "FLASHINFER"),
            f"build: step {FINAL_STEP} FLASHINFER draft": (FINAL_STEP, "FLASHINFER"),
            "build: FLASH_ATTN draft": (FINAL_STEP, "FLASH_ATTN")}


@contextmanager
def draft_builders(kv_cache_dtype: str, on_gpu: bool = True):
    """Row name -> (the draft layers' real metadata builder, its config), each from its own lab; and the heads."""
    from dflash_fi.lab.routing import RoutingLab

    with ExitStack() as stack:
        builders = {}
        for name, (step, backend) in builder_names().items():
            lab = stack.enter_context(RoutingLab(step, kv_cache_dtype=kv_cache_dtype, on_gpu=on_gpu,
                                                 max_model_len=MAX_MODEL_LEN, draft_backend=backend))
            builder, _, config = lab.builders["draft"]
            builders[name] = (builder, config)
        model = lab.vllm_config.model_config
        yield builders, (model.get_num_attention_heads(lab.vllm_config.parallel_config), lab.kv_cache_spec.num_kv_heads)


def count_plans(builder) -> list:
    """A list that grows by one at each plan() of the builder's non-causal wrapper (made by its first build)."""
    calls: list = []
    wrapper = getattr(builder, "_noncausal_prefill_wrapper", None)
    if wrapper is not None:
        plan = type(wrapper).plan  # the class's own: an earlier count is replaced, not wrapped

        def counted(*args, **kwargs):
            calls.append(1)
            return plan(wrapper, *args, **kwargs)
        wrapper.plan = counted
    return calls


def measure_builds(kv_cache_dtype: str, batches, contexts, print_fn=print) -> list[dict]:
    """GPU only. One row per builder, batch and context (see the module's docstring)."""
    from vllm.config import set_current_vllm_config

    from dflash_fi.bench.timing import host_ms
    from dflash_fi.lab.batches import draft_steps

    warmup, rows = 3, []
    with draft_builders(kv_cache_dtype) as (builders, (num_qo_heads, num_kv_heads)):
        for context in contexts:
            for batch in batches:
                # The shape's first step, then idle and busy builds: the contexts go on growing, the shape stays.
                cads = draft_steps(batch, context, 1 + 2 * (warmup + BUILDS), device="cuda")
                busy_from = 1 + warmup + BUILDS
                for name, (builder, config) in builders.items():
                    with set_current_vllm_config(config):
                        builder.build_for_drafting(cads[0], 0)  # step 8 plans here, once
                        calls = count_plans(builder)
                        idle = host_ms(lambda i: builder.build_for_drafting(cads[1 + i], 0), BUILDS, warmup=warmup)
                        busy = host_ms(lambda i: builder.build_for_drafting(cads[busy_from + i], 0), BUILDS,
                                       warmup=warmup, busy_ms=BUSY_MS)
                    row = build_row(name, kv_cache_dtype, batch, context, (num_qo_heads, num_kv_heads), idle, busy,
                                    builds=len(cads) - 1, plans=len(calls))
                    rows.append(row)
                    print_fn(format_build_row(row))
    return rows


def host_build_rows(shapes, print_fn=print) -> tuple[list[dict], list[str]]:
    """measure_builds at the batches and contexts of the kernel bench's shapes, per KV dtype. A KV dtype whose builds
    fail gives one line of error instead of rows, so that the kernel rows measured before are kept."""
    rows, errors = [], []
    for kv_cache_dtype in dict.fromkeys(s.kv_dtype for s in shapes):
        try:
            rows += measure_builds(kv_cache_dtype, sorted({s.batch for s in shapes}),
                                   sorted({s.context for s in shapes}), print_fn)
        except Exception as exc:
            first_line = str(exc).splitlines()[0][:300] if str(exc) else ""
            errors.append(f"{kv_cache_dtype}: {type(exc).__name__}: {first_line}")
            print_fn(f"host-build rows failed, {errors[-1]}")
    return rows, errors


def build_row(name: str, kv_cache_dtype: str, batch: int, context: int, heads: tuple[int, int], idle_ms: float,
              busy_ms: float, builds: int, plans: int) -> dict:
    """A results row; its kernel-row keys (`results.ROW_KEYS`) tell a later file's row for the same thing."""
    from dflash_fi.vocabulary import DRAFT_BLOCK_SIZE, KV_CACHE_DTYPE_NAMES

    return {"kernel": name, "what": WHAT, "kv_dtype": KV_CACHE_DTYPE_NAMES[kv_cache_dtype], "batch": batch,
            "context": context, "num_qo_heads": heads[0], "num_kv_heads": heads[1], "query_len": DRAFT_BLOCK_SIZE,
            "host_ms_idle": round(idle_ms, 4), "host_ms_busy": round(busy_ms, 4), "busy_ms": BUSY_MS,
            "builds": builds, "plans": plans}


def format_build_row(row: dict) -> str:
    return (f"{row['kv_dtype']:<8} b{row['batch']:<3} ctx {row['context']:<5} {row['kernel']:<32} host "
            f"{row['host_ms_idle']:.3f} ms idle, {row['host_ms_busy']:.3f} ms with the GPU busy "
            f"({row['busy_ms']:.0f} ms queued), {row['plans']} plan() in {row['builds']} builds")
