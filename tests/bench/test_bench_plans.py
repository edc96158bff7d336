"""The kernel benchmark's plan and rows, and the benchmark figures, on the CPU (the timings exist only on a GPU)."""

import pytest

from dflash_fi.proof.bench.e2e import BATCHES
from dflash_fi.proof.bench.kernels import KERNELS, format_row, shapes


def test_kernel_shapes_and_rows():
    grid = shapes((4, 2))
    assert len(grid) == 2 * 2 * 3 * len(BATCHES) and {s.query_len for s in grid} == {16}
    assert {s.batch for s in grid} >= set(BATCHES)  # every e2e batch has a kernel row, and so a plan() time
    assert {(s.num_qo_heads, s.num_kv_heads) for s in grid} == {(4, 2), (32, 8)}
    row = {"kernel": "flashinfer-fa3", "kv_dtype": "fp8-e4m3", "batch": 1, "context": 512, "num_qo_heads": 32,
           "num_kv_heads": 8, "error_type": "NotBuilt", "error": "no kernel"}
    assert "ERROR NotBuilt no kernel" in format_row(row)


def test_a_kernel_name_the_registry_lacks_is_refused_not_run_as_another(monkeypatch):
    """measure() once ran any unknown name as the final step's wrapper; now the registry refuses it before any GPU
    work, and each known name makes its own kernel."""
    from dflash_fi.errors import BadInput
    from dflash_fi.proof.bench import kernel_calls, kernels

    made = []
    monkeypatch.setattr(kernel_calls, "flashinfer_kernel", lambda inputs, backend, *a: made.append(backend) or 1 / 0)
    monkeypatch.setattr(kernel_calls, "final_step_backend", lambda: "final-backend")
    shape = shapes((4, 2), quick=True)[0]
    with pytest.raises(BadInput, match="flashinfer-fa4"):
        kernels.measure(shape, "flashinfer-fa4", None, 1.0, {"inputs": None})
    rows = [kernels.measure(shape, name, None, 1.0, {"inputs": None}) for name in ("flashinfer-fa2", "dflash-fi-final")]
    assert made == ["fa2", "final-backend"] and all(r["error_type"] == "ZeroDivisionError" for r in rows)
    assert [r["kernel"] for r in rows] == ["flashinfer-fa2", "dflash-fi-final"]


def test_the_kernel_benchmarks_method_is_a_constant_not_a_slice_of_its_docstring():
    from dflash_fi.proof.bench import kernels

    assert kernels.METHOD.startswith("Timing:") and "Timing:" not in kernels.__doc__


def test_benchmark_figures_are_text(tmp_path):
    from dflash_fi.errors import NoRecord
    from dflash_fi.figures import write_benchmark_figures

    kernels = {"gpu": "GPU", "rows": [
        {"kernel": k, "kv_dtype": "bf16", "batch": b, "context": c, "num_qo_heads": 32, "num_kv_heads": 8,
         "median_ms": 0.01 * b * (2 if k == "flashinfer-fa3" else 1)} for k in KERNELS for b in (1, 4) for c in (512,)]}

    class Kernels:  # a summary with these kernel rows and no engine benchmark (the draft cost: tests/test_figures.py)
        path = tmp_path / "gpu.json"

        def rows(self, section):
            return kernels

        def entry(self, section):
            raise NoRecord("no engine benchmark")

    paths = write_benchmark_figures(Kernels(), tmp_path)
    assert [p.name for p in paths] == ["bench-kernels.svg"]
    assert all(p.read_text().lstrip().startswith("<?xml") for p in paths)
