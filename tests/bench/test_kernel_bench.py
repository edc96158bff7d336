"""The kernel benchmark's pieces that run without a GPU: the guard on an output the kernel did not write, the
host-build rows beside the kernel rows, and the real builders the host-build rows time (FlashInfer's wrappers are the
lab's doubles here; the timings themselves only exist on a GPU)."""

import json

import pytest
import torch

from dflash_fi.bench.builds import WHAT, build_row, builder_names, count_plans, draft_builders
from dflash_fi.bench.kernels import KERNELS, format_row, max_abs_err
from dflash_fi.bench.results import (ROW_KEYS, build_rows, build_summary, final_draft_kernel, kernel_pivot, kernel_ratios,
                                     kernel_summary)
from dflash_fi.steps import FINAL_STEP


def kernel_row(kernel, **extra):
    return {"kernel": kernel, "kv_dtype": "bf16", "batch": 4, "context": 512, "num_qo_heads": 32, "num_kv_heads": 8,
            "ran": "fa2", "timing": "cuda-graph", "median_ms": 0.01, "achieved_GBps": 100.0, "share_of_copy": 0.5,
            "max_abs_err": 1e-3, "plan_ms": 0.1, **extra}


def test_an_output_the_kernel_did_not_write_is_reported_not_crashed_on():
    reference = torch.zeros(4, 2, 8)
    out = reference.clone()
    assert max_abs_err(out + 0.5, reference) == 0.5
    out[1, 0, 3] = float("nan")  # as measure() fills the output before the kernel runs
    assert max_abs_err(out, reference) is None
    row = kernel_row("dflash-fi-final", max_abs_err=None)
    assert "err NaN in the output (not all written)" in format_row(row)
    json.dumps(row, allow_nan=False)  # the results file stays strict JSON


def test_host_build_rows_sit_beside_the_kernel_rows_without_disturbing_their_readers():
    kernels = [kernel_row(k) for k in KERNELS]
    names = list(builder_names())
    builds = [build_row(name, kv, 4, 512, (32, 8), 0.5 + i, 0.6 + i, builds=106, plans=0)
              for i, name in enumerate(names) for kv in ("auto", "fp8")]
    results = {"rows": kernels + builds}
    assert all(set(ROW_KEYS["kernels"]) <= set(r) for r in builds)  # latest_results() keys every row by these
    assert len({tuple(r[k] for k in ROW_KEYS["kernels"]) for r in results["rows"]}) == len(results["rows"])
    assert kernel_summary(results) == kernel_summary({"rows": kernels})
    assert kernel_pivot(results) == kernel_pivot({"rows": kernels})
    summary = build_summary(results)
    assert summary.count("\n") == 1 + 2 and "0.500 / 0.600" in summary and "2.500 / 2.600" in summary
    assert summary.splitlines()[-1].endswith("| -1.000 ms, yes |")  # final 1.6 ms busy against FLASH_ATTN's 2.6
    slow = [{**r, "host_ms_busy": 9.0} if r["kernel"] == names[1] else r for r in builds]
    assert build_summary({"rows": slow}).splitlines()[-1].endswith("| +6.400 ms, **no** |")
    assert all(r["what"] == WHAT for r in builds) and names == [
        "build: step 7 FLASHINFER draft", f"build: step {FINAL_STEP} FLASHINFER draft", "build: FLASH_ATTN draft"]


def test_a_file_without_host_build_rows_says_so_and_the_short_pivot_keeps_the_batches_asked_for():
    from dflash_fi.errors import NoRecord

    kernels = [kernel_row(k, batch=b, median_ms=0.01 * b * (2 if k == "dflash-fi-final" else 1))
               for k in KERNELS for b in (1, 4, 8)]
    with pytest.raises(NoRecord, match="no host-build rows"):
        build_rows({"rows": kernels, "file": "old.json"})
    with pytest.raises(NoRecord):
        build_summary({"rows": kernels})
    assert [p["batch"] for p in kernel_pivot({"rows": kernels}, batches=(1, 8))] == [1, 8]
    ratios = kernel_ratios({"rows": kernels}, "dflash-fi-final", "vllm-flash-attn", batches=(4,))
    assert ratios == [{"batch": 4, "context": 512, "ratio": pytest.approx(2.0)}]
    builds = [build_row(name, kv, 4, 512, (32, 8), 0.5, 0.6, builds=106, plans=0)
              for name in builder_names() for kv in ("auto", "fp8")]
    assert {r["kv_dtype"] for r in build_rows({"rows": kernels + builds}, ("bf16",))} == {"bf16"}
    assert build_summary({"rows": builds}, ("fp8-e4m3",)).count("\n") == 2  # header, separator, one shape


@pytest.mark.step9
def test_the_final_drafts_kernel_is_xqa_where_xqa_was_measured():
    fp8_xqa = kernel_row("flashinfer-xqa", kv_dtype="fp8-e4m3", error_type="NotBuilt", error="FP8 stays on FA2")
    del fp8_xqa["median_ms"]
    rows = [kernel_row(k, median_ms=0.02 if k == "flashinfer-xqa" else 0.01) for k in KERNELS]
    rows += [kernel_row(k, kv_dtype="fp8-e4m3") for k in KERNELS if k != "flashinfer-xqa"] + [fp8_xqa]
    results = {"rows": rows}
    assert final_draft_kernel(results, "bf16") == "flashinfer-xqa"
    assert final_draft_kernel(results, "fp8-e4m3") == "dflash-fi-final"
    (bf16,) = kernel_pivot(results)
    assert bf16["final_kernel"] == "flashinfer-xqa" and bf16["final_over_flash_attn"] == pytest.approx(2.0)
    assert kernel_pivot(results, "fp8-e4m3")[0]["final_over_flash_attn"] == pytest.approx(1.0)
    assert "error" in format_row(fp8_xqa) or "ERROR" in format_row(fp8_xqa)


@pytest.mark.step7
@pytest.mark.step8
def test_the_builders_timed_are_the_real_ones_and_plan_as_their_steps_say():
    from vllm.config import set_current_vllm_config

    from dflash_fi.lab.batches import draft_steps

    cads = draft_steps(4, 2048, 6)
    assert len({tuple(c.query_start_loc_cpu.tolist()) for c in cads}) == 1  # one shape; contexts grow
    assert [c.seq_lens.tolist()[0] for c in cads] == [2048 + 16 * (k + 1) for k in range(6)]
    assert all((c.seq_lens_cpu_upper_bound >= c.seq_lens).all() and c._seq_lens_cpu is None for c in cads)
    with draft_builders("auto", on_gpu=False) as (builders, heads):
        planned = {}
        for name, (builder, config) in builders.items():
            with set_current_vllm_config(config):
                builder.build_for_drafting(cads[0], 0)
                calls = count_plans(builder)
                for cad in cads[1:]:
                    builder.build_for_drafting(cad, 0)
            planned[name] = len(calls)
        assert heads == (4, 2) and all(c._seq_lens_cpu is None for c in cads)
    step7, final, flash_attn = builder_names()
    flash_attn_builder = type(builders[flash_attn][0])
    assert (flash_attn_builder.__module__, flash_attn_builder.__name__) == (
        "vllm.v1.attention.backends.flash_attn", "FlashAttentionMetadataBuilder")
    assert planned == {step7: 5, final: 0, flash_attn: 0}  # step 7 plans every step; the final step only the first


@pytest.mark.step8
def test_measure_builds_runs_end_to_end_with_the_gpu_calls_stubbed(monkeypatch):
    """The GPU path's plumbing (which draft step each build gets, the plan counts, the rows), with the lab's builders
    on the CPU and torch.cuda's synchronize and spin kernel stubbed: the times are meaningless here."""
    from functools import partial

    from dflash_fi.bench import builds, timing
    from dflash_fi.lab import batches

    monkeypatch.setattr(builds, "BUILDS", 4)
    monkeypatch.setattr(builds, "draft_builders", partial(builds.draft_builders, on_gpu=False))
    on_the_cpu = batches.draft_steps
    monkeypatch.setattr(batches, "draft_steps", lambda *args, device: on_the_cpu(*args, device="cpu"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None)
    monkeypatch.setattr(timing, "_busy_cycles_per_ms", lambda: 1e6)
    rows = builds.measure_builds("fp8", [1, 3], [512], print_fn=lambda line: None)
    step7, final, flash_attn = builder_names()
    assert [(r["kernel"], r["batch"]) for r in rows] == [(n, b) for b in (1, 3) for n in (step7, final, flash_attn)]
    builds_after_first = 2 * (3 + 4)
    assert {r["kernel"]: r["plans"] for r in rows} == {step7: builds_after_first, final: 0, flash_attn: 0}
    assert all(r["builds"] == builds_after_first and r["kv_dtype"] == "fp8-e4m3" for r in rows)


def test_kernel_timing_uses_flashinfers_helpers_and_falls_back_when_a_kernel_cannot_be_captured(monkeypatch):
    import flashinfer.testing
    import flashinfer.testing.utils

    from dflash_fi.bench import timing

    asked = []

    def graph(call, input_args, num_iters_within_graph, cold_l2_cache):
        asked.append(("graph", num_iters_within_graph, cold_l2_cache, input_args))
        raise RuntimeError("operation not permitted when stream is capturing")

    def events(call, input_args, cold_l2_cache):
        asked.append(("events", cold_l2_cache, input_args))
        return [3.0, 1.0, 2.0]
    monkeypatch.setattr(flashinfer.testing, "bench_gpu_time_with_cudagraph", graph)
    monkeypatch.setattr(flashinfer.testing, "bench_gpu_time_with_cuda_event", events)
    monkeypatch.setattr(flashinfer.testing.utils, "calculate_rotation_count", lambda tensors: 37)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    args = (torch.zeros(2), torch.ones(2))
    assert timing.time_ms(lambda q, out: out.copy_(q), args) == (2.0, "eager")
    assert asked == [("graph", 37, True, args), ("events", True, args)]  # as many calls per graph as copies
    assert args[1].tolist() == [0.0, 0.0]  # the warm-up call ran


def test_failing_host_builds_leave_the_kernel_rows_and_say_why(monkeypatch):
    from dflash_fi.bench import builds
    from dflash_fi.bench.kernels import shapes

    def measure(kv_cache_dtype, batches, contexts, print_fn):
        if kv_cache_dtype == "fp8":
            raise RuntimeError("triton compile failed\nlong log")
        return [{"kv_dtype": kv_cache_dtype, "batches": batches, "contexts": contexts}]
    monkeypatch.setattr(builds, "measure_builds", measure)
    rows, errors = builds.host_build_rows(shapes((4, 2), quick=True), print_fn=lambda line: None)
    assert rows == [{"kv_dtype": "auto", "batches": [1, 16], "contexts": [2048]}]
    assert errors == ["fp8: RuntimeError: triton compile failed"]
