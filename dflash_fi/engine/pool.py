"""Many engine runs, one process each, as many at once as there are GPUs (one engine per GPU at a time)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from pathlib import Path

from dflash_fi.engine.identity import label
from dflash_fi.engine.records import EngineRecord, outcome
from dflash_fi.engine.runner import run
from dflash_fi.engine.spec import RunSpec
from dflash_fi.logs import tail

# Small engines sharing one GPU reserve their KV cache outright: vLLM's memory profiling would count the
# other engines' allocations as their own.
SHARED_GPU_MEMORY_UTILIZATION, SHARED_GPU_KV_CACHE_BYTES = 0.12, 512 << 20


def engines_per_gpu(total_gib: float | None = None) -> int:
    """Small engines that can share one GPU: one per 20 GB, six at most (an RTX 4090 runs them one at a time)."""
    if total_gib is None:
        import torch

        total_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    return max(1, min(6, int(total_gib // 20)))


def share_gpus(specs: list[RunSpec], gpus: list[str] | None = None,
               per_gpu: int | None = None) -> tuple[list[RunSpec], list[str]]:
    """`specs` sized to share GPUs (correctness runs, not timings), and the engine slots to run them in."""
    shared = [replace(s, gpu_memory_utilization=SHARED_GPU_MEMORY_UTILIZATION,
                      kv_cache_memory_bytes=SHARED_GPU_KV_CACHE_BYTES) for s in specs]
    gpus = visible_gpus() if gpus is None else gpus
    return shared, gpus * (per_gpu or engines_per_gpu())


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, as CUDA_VISIBLE_DEVICES names them for a child."""
    import torch

    count = torch.cuda.device_count()
    names = [n.strip() for n in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if n.strip()]
    return names[:count] if names else [str(i) for i in range(count)]


def run_engines(specs: list[RunSpec], slots: list[str], command: str, on_record=None,
                expected_to_fail=lambda run: False, print_fn=print, run_one=run) -> list[EngineRecord]:
    """Run every spec, as many at once as there are slots; `on_record(record)` as each finishes (e.g. append it to
    the ledger); the records in spec order. One progress line per engine; the whole engine log when an engine's
    outcome is not the expected one. `run_one(spec, command, gpu)` runs one engine (a double in the CPU tests)."""
    queue, results, lock = list(enumerate(specs)), {}, threading.Lock()

    def worker(gpu: str) -> None:
        while True:
            with lock:
                if not queue:
                    return
                index, spec = queue.pop(0)
            started = time.time()
            record = run_one(spec, command=command, gpu=gpu)
            with lock:
                if on_record is not None:  # it may hand back the record as kept (e.g. with its walkthrough's id)
                    record = on_record(record) or record
                results[index] = record
                log = record.provenance.log_file if record.provenance else "-"
                print_fn(f"  [{len(results):2d}/{len(specs)}] {label(spec.run):<50} {outcome(record, True)[:60]:<60} "
                         f"{time.time() - started:6.1f} s  GPU {gpu}  {log}")
                if record.ok == expected_to_fail(spec.run):
                    print_fn(f"  unexpected outcome; the engine's whole log ({log}):\n" + tail(Path(log), 10**6))

    threads = [threading.Thread(target=worker, args=(gpu,)) for gpu in slots or ["0"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[i] for i in range(len(specs))]
