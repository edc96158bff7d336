"""The kernel benchmark's plan and rows, and the benchmark figures, on the CPU (the timings exist only on a GPU)."""



from dflash_fi.bench.e2e import BATCHES
from dflash_fi.bench.kernels import KERNELS, format_row, shapes


def test_kernel_shapes_and_rows():
    grid = shapes((4, 2))
    assert len(grid) == 2 * 2 * 3 * len(BATCHES) and {s.query_len for s in grid} == {16}
    assert {s.batch for s in grid} >= set(BATCHES)  # every e2e batch has a kernel row, and so a plan() time
    assert {(s.num_qo_heads, s.num_kv_heads) for s in grid} == {(4, 2), (32, 8)}
    assert set(KERNELS) == {"flashinfer-auto", "flashinfer-fa2", "flashinfer-fa3", "vllm-flash-attn", "dflash-fi-final",
                            "dflash-fi-final-graph", "flashinfer-xqa"}
    row = {"kernel": "flashinfer-fa3", "kv_dtype": "fp8-e4m3", "batch": 1, "context": 512, "num_qo_heads": 32,
           "num_kv_heads": 8, "error_type": "NotBuilt", "error": "no kernel"}
    assert "ERROR NotBuilt no kernel" in format_row(row)


def test_benchmark_figures_are_text(tmp_path):
    from dflash_fi.figures import write_benchmark_figures

    kernels = {"gpu": "GPU", "rows": [
        {"kernel": k, "kv_dtype": "bf16", "batch": b, "context": c, "num_qo_heads": 32, "num_kv_heads": 8,
         "median_ms": 0.01 * b * (2 if k == "flashinfer-fa3" else 1)} for k in KERNELS for b in (1, 4) for c in (512,)]}
    from tests.bench.test_e2e import turns

    paths = write_benchmark_figures(kernels, turns([0.95, 0.99, 1.02]), tmp_path)
    assert [p.name for p in paths] == ["bench-kernels.svg", "bench-e2e.svg", "bench-draft-step.svg"]
    assert all(p.read_text().lstrip().startswith("<?xml") for p in paths)
