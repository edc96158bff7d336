"""The benchmarks' plans, the engines taking turns, and the summaries of rounds, on the CPU (the timings themselves
only exist on a GPU; here the engine process is `dflash_fi.lab.engine_double`)."""

import json

import pytest

from dflash_fi.bench.e2e import (BATCH1_PROMPTS, BATCHES, EMBEDDED, FLASH_ATTN_RUN, SHAPE_BATCHES, SHAPE_MODEL,
                                 e2e_plan, final_run, rows_from)
from dflash_fi.bench.kernels import KERNELS, format_row, shapes
from dflash_fi.bench.turns import build_table, pair_ratios, spread, targets, turns_table


def test_e2e_plan_starts_every_engine_of_both_models():
    specs = e2e_plan()
    runs = [(s.extra["model"], s.extra["run"]) for s in specs]
    assert runs == [(EMBEDDED, "no speculation"), (EMBEDDED, FLASH_ATTN_RUN), (EMBEDDED, "step 6 FLASHINFER draft"),
                    (EMBEDDED, final_run()), (SHAPE_MODEL, FLASH_ATTN_RUN), (SHAPE_MODEL, "step 6 FLASHINFER draft"),
                    (SHAPE_MODEL, final_run())]
    assert all(s.cuda_graphs and s.kv_cache_memory_bytes for s in specs)  # reserved KV: they start side by side
    assert {s.batch_sizes for s in specs} == {BATCHES, SHAPE_BATCHES}
    assert all(s.extra["batch1_prompts"] > 1 for s in specs) and BATCH1_PROMPTS > 1
    for spec in specs:
        spec.validate()


def test_the_qwen3_4b_shape_is_written_as_configs_only(tmp_path):
    shape = [s for s in e2e_plan(shape_dir=tmp_path) if s.load_format == "dummy"]
    assert [s.extra["run"] for s in shape] == [FLASH_ATTN_RUN, "step 6 FLASHINFER draft", final_run()]
    target = json.loads((tmp_path / "target" / "config.json").read_text())
    drafter = json.loads((tmp_path / "drafter" / "config.json").read_text())
    assert (target["num_hidden_layers"], target["hidden_size"], target["num_attention_heads"],
            target["num_key_value_heads"], target["head_dim"]) == (36, 2560, 32, 8, 128)
    assert drafter["dflash_config"]["target_layer_ids"] == [1, 9, 17, 25, 33] and drafter["block_size"] == 16
    assert not list(tmp_path.rglob("*.safetensors"))


def test_engines_take_turns_and_a_failed_start_is_recorded():
    """Real processes and sockets; the engine processes are doubles that answer with made-up rows."""
    from dflash_fi.engine.server import run_in_turns
    from dflash_fi.engine.spec import RunSpec

    def spec(label, tps, **extra):
        return RunSpec(label=label, batch_sizes=(1, 2), num_prompts=2, extra={"tokens_per_s": tps, **extra})
    lines = []
    records = run_in_turns([spec("a", 100.0), spec("b", 50.0), spec("broken", 1.0, fail="start")], rounds=3,
                           command="test", start_timeout_s=60, print_fn=lines.append,
                           module="dflash_fi.lab.engine_double")
    assert [r["round"] for r in records["a"]["rounds"]] == [1, 2, 3] and records["a"]["ok"]
    assert records["b"]["rounds"][0]["batches"][1]["output_tokens_per_s"] == 100.0
    assert records["broken"]["ok"] is False and records["broken"]["error"]["type"] == "ChildProcessError"
    turns = [line.split()[2] for line in lines if line.strip().startswith("round")]
    assert turns == ["a", "b"] * 3  # A B A B A B: one engine at a time, the broken one left out


def _turns(ratio_by_round, build_fi=0.2, build_fa=0.1):
    """Results of three engines over rounds: the final FlashInfer draft at `ratio` of the FLASH_ATTN draft."""
    rows = []
    for rnd, ratio in enumerate(ratio_by_round, 1):
        for model in (EMBEDDED, SHAPE_MODEL):
            for run, tps, build in ((FLASH_ATTN_RUN, 1000.0, build_fa), ("step 6 FLASHINFER draft", 800.0, 1.0),
                                    (final_run(), 1000.0 * ratio, build_fi)):
                for batch in ((1, 8, 32) if model == EMBEDDED else (1, 32)):
                    rows.append({"model": model, "run": run, "round": rnd, "batch": batch, "tokens_per_s": tps,
                                 "step_ms": 1000.0 / tps, "metadata_build_ms_per_step": {"draft step, x": build},
                                 "metadata_builds_per_step": {"draft step, x": 1.0}})
    return {"rows": rows, "rounds": len(ratio_by_round)}


KERNELS_WITH_PLANS = {"rows": [{"kernel": "dflash-fi-final", "kv_dtype": "bf16", "batch": b, "context": 512,
                                "num_qo_heads": h[0], "num_kv_heads": h[1], "plan_ms": 0.15}
                               for b in (1, 8, 32) for h in ((4, 2), (32, 8))]}


def test_pairs_of_rounds_give_min_median_max_and_the_targets():
    turns = _turns([0.95, 0.99, 1.02])
    assert pair_ratios(turns, EMBEDDED, final_run(), FLASH_ATTN_RUN, 8) == pytest.approx([0.95, 0.99, 1.02])
    assert spread([0.95, 0.99, 1.02]) == {"min": 0.95, "median": 0.99, "max": 1.02, "pairs": 3}
    met = {t["target"]: t["met"] for t in targets(KERNELS_WITH_PLANS, turns, (4, 2))}
    assert all(met.values()), met  # median 0.99 >= 0.97; builds 0.2 <= 0.1 + 0.15
    slow = {t["target"]: t for t in targets(KERNELS_WITH_PLANS, _turns([0.9, 0.93, 0.96], build_fi=0.5), (4, 2))}
    assert not any(t["met"] for t in slow.values())
    assert "0.900x / 0.930x / 0.960x" in next(t["measured"] for t in slow.values() if "batch 1:" in t["target"])
    table = turns_table(turns, EMBEDDED)
    assert "| 8 | 1000 | 800 | 990 | 0.800 / 0.800 / 0.800 | 0.950 / 0.990 / 1.020 |" in table
    assert f"| {final_run()} | draft step, x | 1.00 | 0.200 |" in build_table(turns, EMBEDDED, 1)


def test_rows_keep_every_round_and_say_whether_tokens_repeat():
    record = {"ok": True, "cudagraph_mode": "FULL_AND_PIECEWISE", "spec": {"extra": {"model": EMBEDDED, "run": "r"}},
              "rounds": [{"round": k, "batches": [{"batch": 1, "output_tokens_per_s": 10.0 * k,
                                                   "generates_tokens_per_s": [10.0 * k], "generates_step_ms": [2.0, 4.0],
                                                   "tokens_sha256_per_generate": ["x" if k < 3 else "y"]}]}
                         for k in (1, 2, 3)]}
    rows, engines = rows_from({"r": record})
    assert [(r["round"], r["tokens_per_s"], r["step_ms"], r["same_tokens_as_round_1"]) for r in rows] == [
        (1, 10.0, 3.0, True), (2, 20.0, 3.0, True), (3, 30.0, 3.0, False)]
    assert engines[0]["ok"] and "tokens" not in rows[0]


def test_kernel_shapes_and_rows():
    grid = shapes((4, 2))
    assert len(grid) == 2 * 2 * 3 * 6 and {s.query_len for s in grid} == {16}
    assert {s.batch for s in grid} >= set(BATCHES)  # every e2e batch has a kernel row, and so a plan() time
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
    paths = write_benchmark_figures(kernels, _turns([0.95, 0.99, 1.02]), tmp_path)
    assert [p.name for p in paths] == ["bench-kernels.svg", "bench-e2e.svg", "bench-draft-step.svg"]
    assert all(p.read_text().lstrip().startswith("<?xml") for p in paths)
