"""Many engines at once: sized to share a GPU, run as many at a time as there are slots, records in plan order."""

import threading
import time
from dataclasses import replace

from dflash_fi.engine.identity import RunId, label
from dflash_fi.engine.pool import SHARED_GPU_KV_CACHE_BYTES, engines_per_gpu, run_engines, share_gpus
from dflash_fi.engine.records import EngineRecord, Failure, Phase, Provenance
from dflash_fi.engine.spec import RunSpec


def test_engines_share_a_gpu_by_its_memory():
    specs = [RunSpec(RunId(step=s)) for s in (3, 4)]
    shared, slots = share_gpus(specs, gpus=["0", "1"], per_gpu=engines_per_gpu(total_gib=139))
    assert slots == ["0", "1"] * 6 and [s.run for s in shared] == [s.run for s in specs]
    assert {s.kv_cache_memory_bytes for s in shared} == {SHARED_GPU_KV_CACHE_BYTES}  # reserved: no profiling
    assert engines_per_gpu(total_gib=24) == 1 and engines_per_gpu(total_gib=80) == 4


def test_engines_run_side_by_side_and_come_back_in_plan_order(tmp_path):
    running, most, lock, lines = set(), [0], threading.Lock(), []
    log = tmp_path / "engine.log"
    log.write_text("the engine's whole log\n")

    def run_one(spec, command, gpu):  # a double of one engine process: it takes a while, and step 1 fails
        with lock:
            running.add(spec.run)
            most[0] = max(most[0], len(running))
        time.sleep(0.2 if spec.run.step != 3 else 0.5)
        with lock:
            running.discard(spec.run)
        provenance = Provenance("GPU", "9.0", {}, "abc", command, "now", log_file=str(log))
        failure = Failure("AssertionError", "no non-causal support", Phase.FIRST_DRAFT_STEP) if spec.run.step == 1 else None
        return EngineRecord(spec, failure is None, failure, provenance=provenance)

    specs = [RunSpec(RunId(step=s)) for s in (3, 1, 4, 5)]
    kept = []
    records = run_engines(specs, ["0", "0"], "test", on_record=lambda r: kept.append(r) or replace(r, walkthrough="w"),
                          expected_to_fail=lambda run: run.step in (1, 4), print_fn=lines.append, run_one=run_one)
    assert [r.run for r in records] == [s.run for s in specs] and most[0] == 2  # two slots: two at a time
    assert all(r.walkthrough == "w" for r in records) and len(kept) == 4  # what on_record hands back is kept
    progress = [line for line in lines if line.strip().startswith("[")]
    assert len(progress) == 4 and any(label(RunId(step=1)) in line and "AssertionError at first draft step" in line
                                      for line in progress)
    unexpected = [line for line in lines if line.strip().startswith("unexpected outcome")]
    assert len(unexpected) == 1 and "the engine's whole log" in unexpected[0]  # step 4 ran, but was to fail
