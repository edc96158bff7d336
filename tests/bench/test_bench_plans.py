"""The benchmarks' plans and result rows, on the CPU (the timings themselves only exist on a GPU)."""

import json

import pytest

from dflash_fi.bench.e2e import BATCHES, EMBEDDED_RUNS, SHAPE_BATCHES, e2e_plan, format_rows, rows_from
from dflash_fi.bench.kernels import KERNELS, format_row, shapes
from dflash_fi.vocabulary import KV_CACHE_DTYPES


def test_e2e_plan_covers_every_run_dtype_and_mode():
    specs = e2e_plan(shape=False)
    assert len(specs) == len(EMBEDDED_RUNS) * len(KV_CACHE_DTYPES) * 2
    assert {(s.cuda_graphs, s.kv_cache_dtype) for s in specs} == {(g, kv) for g in (False, True) for kv in KV_CACHE_DTYPES}
    assert all(s.batch_sizes == BATCHES and s.repeats == 3 and s.max_new_tokens == 256 for s in specs)
    for spec in specs:
        spec.validate()


def test_the_qwen3_4b_shape_is_written_as_configs_only(tmp_path):
    shape = [s for s in e2e_plan(shape_dir=tmp_path) if s.load_format == "dummy"]
    assert [s.extra["run"] for s in shape] == ["FLASH_ATTN draft", "step 4 FLASHINFER draft", "step 6 FLASHINFER draft"]
    assert [s for s in e2e_plan(shape_dir=tmp_path, kv_dtypes=("fp8",)) if s.load_format == "dummy"] == []
    target = json.loads((tmp_path / "target" / "config.json").read_text())
    drafter = json.loads((tmp_path / "drafter" / "config.json").read_text())
    assert (target["num_hidden_layers"], target["hidden_size"], target["num_attention_heads"],
            target["num_key_value_heads"], target["head_dim"]) == (36, 2560, 32, 8, 128)
    assert drafter["dflash_config"]["target_layer_ids"] == [1, 9, 17, 25, 33] and drafter["block_size"] == 16
    assert not list(tmp_path.rglob("*.safetensors"))


def _record(run, speculative, tokens, tau=None, drafts=None):
    batch = {"batch": 2, "output_tokens_per_s": 1000.0, "tpot_ms": 1.5, "generate_s": 0.5, "tokens": tokens,
             "tokens_sha256": "x", "repeats_tokens_per_s": [990.0, 1000.0, 995.0]}
    if speculative:
        batch.update({"tau": tau, "num_drafts": drafts})
    return {"ok": True, "cudagraph_mode": "FULL_AND_PIECEWISE", "batches": [batch],
            "spec": {"speculative": speculative, "step": 6, "draft_backend": "FLASHINFER", "kv_cache_dtype": "auto",
                     "cuda_graphs": True, "max_new_tokens": 100, "extra": {"model": "embedded", "run": run}}}


def test_rows_compare_with_no_speculation_of_the_same_mode_and_count_steps():
    records = {"base": _record("no speculation", False, [[1, 2], [3, 4]]),
               "six": _record("step 6 FLASHINFER draft", True, [[1, 2], [3, 5]], tau=4.0, drafts=50)}
    rows, engines = rows_from(records)
    base, six = rows
    assert base["same_as_no_spec"] is None and base["step_ms"] == pytest.approx(5.0)  # 0.5 s / 100 steps
    assert six["same_as_no_spec"] == 0.5 and six["step_ms"] == pytest.approx(20.0)  # 50 drafts / batch 2 = 25 steps
    assert six["step"] == 6 and six["cudagraph_mode"] == "FULL_AND_PIECEWISE" and "tokens" not in six
    assert len(engines) == 2 and "| step 6 FLASHINFER draft | bf16 | FULL_AND_PIECEWISE | 2 |" in format_rows(rows)


def test_kernel_shapes_and_rows():
    grid = shapes((4, 2))
    assert len(grid) == 2 * 2 * 3 * 5 and {s.query_len for s in grid} == {16}
    assert {s.batch for s in grid} >= set(SHAPE_BATCHES)  # the e2e batches have a kernel row each
    assert {(s.num_qo_heads, s.num_kv_heads) for s in grid} == {(4, 2), (32, 8)}
    assert set(KERNELS) == {"flashinfer-auto", "flashinfer-fa2", "flashinfer-fa3", "vllm-flash-attn", "dflash-fi-final",
                            "dflash-fi-final-graph"}
    row = {"kernel": "flashinfer-fa3", "kv_dtype": "fp8-e4m3", "batch": 1, "context": 512, "num_qo_heads": 32,
           "num_kv_heads": 8, "error": "NotBuilt: no kernel"}
    assert "ERROR NotBuilt" in format_row(row)


def test_benchmark_figures_are_text(tmp_path):
    from dflash_fi.figures import write_benchmark_figures

    kernels = {"gpu": "GPU", "rows": [
        {"kernel": k, "kv_dtype": "bf16", "batch": b, "context": c, "num_qo_heads": 32, "num_kv_heads": 8,
         "median_ms": 0.01 * b * (2 if k == "flashinfer-fa3" else 1)} for k in KERNELS for b in (1, 4) for c in (512,)]}
    e2e = {"gpu": "GPU", "rows": [
        {"model": "embedded", "run": run, "kv_cache_dtype": "bf16", "batch": b, "cuda_graphs": g, "tokens_per_s": 10.0}
        for run, *_ in EMBEDDED_RUNS for b in (1, 8) for g in (False, True)]}
    paths = write_benchmark_figures(kernels, e2e, tmp_path)
    assert [p.name for p in paths] == ["bench-kernels.svg", "bench-e2e.svg"]  # no build times: no third figure
    for row in e2e["rows"]:
        row.update(step_ms=2.0, metadata_build_ms_per_step={"target step, FLASH_ATTN (4 layers)": 0.1,
                                                            "draft step, FLASHINFER (2 layers)": 0.5})
    paths = write_benchmark_figures(kernels, e2e, tmp_path)
    assert [p.name for p in paths] == ["bench-kernels.svg", "bench-e2e.svg", "bench-draft-step.svg"]
    assert all(p.read_text().lstrip().startswith("<?xml") for p in paths)


def _results_file(path, finished_at, rows, gpu="GPU"):
    path.write_text(json.dumps({"gpu": gpu, "compute_capability": "9.0", "git_commit": "c" * 40,
                                "finished_at": finished_at, "rows": rows, "engines": [{"label": path.name}]}))


def test_a_later_results_file_replaces_the_rows_it_measured_again(tmp_path, monkeypatch):
    from dflash_fi.bench import results

    def row(run, batch, tps):
        return {"model": "embedded", "run": run, "kv_cache_dtype": "bf16", "batch": batch, "cuda_graphs": True,
                "tokens_per_s": tps}
    monkeypatch.setattr(results, "RUNS_DIR", tmp_path)
    _results_file(tmp_path / "gpu.bench-e2e-auto.json", "2026-11-30T10:00:00Z", [row("a", 1, 1.0), row("b", 1, 2.0)])
    _results_file(tmp_path / "gpu.bench-e2e-fp8.json", "2026-11-30T11:00:00Z", [row("c", 1, 3.0)])
    _results_file(tmp_path / "gpu.bench-e2e-rerun.json", "2026-11-30T12:00:00Z", [row("a", 1, 9.0)])
    merged = results.latest_results("e2e")
    assert [(r["run"], r["tokens_per_s"], r["part"]) for r in merged["rows"]] == [
        ("a", 9.0, "gpu.bench-e2e-rerun.json"), ("b", 2.0, "gpu.bench-e2e-auto.json"), ("c", 3.0, "gpu.bench-e2e-fp8.json")]
    assert [(p["file"], p["rows"]) for p in merged["parts"]] == [
        ("gpu.bench-e2e-auto.json", 1), ("gpu.bench-e2e-fp8.json", 1), ("gpu.bench-e2e-rerun.json", 1)]
    _results_file(tmp_path / "gpu.bench-e2e-all.json", "2026-11-30T13:00:00Z",
                  [row("a", 1, 5.0), row("b", 1, 6.0), row("c", 1, 7.0)])
    assert [p["file"] for p in results.latest_results("e2e")["parts"]] == ["gpu.bench-e2e-all.json"]
    _results_file(tmp_path / "other.bench-e2e.json", "2026-11-30T14:00:00Z", [row("a", 1, 0.5)], gpu="Other GPU")
    assert results.latest_results("e2e")["rows"] == [{**row("a", 1, 0.5), "part": "other.bench-e2e.json"}]


def test_draft_overhead_sets_step_times_beside_metadata_builds():
    from dflash_fi.bench.results import build_breakdown, draft_overhead

    def row(run, step_ms, builds):
        return {"model": "embedded", "run": run, "kv_cache_dtype": "bf16", "batch": 1, "cuda_graphs": True,
                "step_ms": step_ms, "metadata_build_ms_per_step": builds,
                "metadata_builds_per_step": {where: 1.0 for where in builds}}
    e2e = {"rows": [row("FLASH_ATTN draft", 2.0, {"target step, FLASH_ATTN (6 layers)": 0.05}),
                    row("step 6 FLASHINFER draft", 2.5, {"target step, FLASH_ATTN (4 layers)": 0.05,
                                                         "target step, FLASHINFER (2 layers)": 0.2,
                                                         "draft step, FLASHINFER (2 layers)": 0.15})]}
    kernels = {"rows": [{"kernel": "dflash-fi-final", "kv_dtype": "bf16", "batch": 1, "context": 512,
                         "num_qo_heads": 4, "num_kv_heads": 2, "plan_ms": 0.04}]}
    assert "| 1 | 2.000 | 2.500 | +0.500 | 0.050 | 0.400 | 0.040 |" in draft_overhead(kernels, e2e)
    assert "| step 6 FLASHINFER draft | target step, FLASHINFER (2 layers) | 1.0 | 0.200 |" in build_breakdown(e2e)
