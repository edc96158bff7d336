"""Many engine runs, one process each, as many at once as there are GPUs (one engine per GPU at a time)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from dflash_fi.engine.runner import outcome, run
from dflash_fi.logs import tail


# Small engines sharing one GPU reserve their KV cache outright: vLLM's memory profiling would count the
# other engines' allocations as their own.
SHARED_GPU_MEMORY_UTILIZATION, SHARED_GPU_KV_CACHE_BYTES = 0.12, 512 << 20


def engines_per_gpu() -> int:
    """Small engines that can share one GPU: one per 20 GB, six at most (an RTX 4090 runs them one at a time)."""
    import torch

    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    return max(1, min(6, int(total // 20)))


def share_gpus(specs) -> list[str]:
    """Size `specs` to share GPUs (correctness runs, not timings) and return the engine slots to run them in."""
    for spec in specs:
        spec.gpu_memory_utilization, spec.kv_cache_memory_bytes = SHARED_GPU_MEMORY_UTILIZATION, SHARED_GPU_KV_CACHE_BYTES
    return visible_gpus() * engines_per_gpu()


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, as CUDA_VISIBLE_DEVICES names them for a child."""
    import torch

    count = torch.cuda.device_count()
    names = [n.strip() for n in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if n.strip()]
    return names[:count] if names else [str(i) for i in range(count)]


def run_engines(specs, gpus: list[str], command: str, on_record=None, expected_to_fail=lambda spec: False,
                print_fn=print) -> dict[str, dict]:
    """Run every spec; `on_record(record)` as each finishes (e.g. append it to a ledger); records in spec order.

    One progress line per engine; the whole engine log when an engine's outcome is not the expected one.
    """
    queue, results, lock = list(specs), {}, threading.Lock()

    def worker(gpu: str) -> None:
        while True:
            with lock:
                if not queue:
                    return
                spec = queue.pop(0)
            started = time.time()
            record = run(spec, command=command, gpu=gpu)
            with lock:
                if on_record is not None:
                    on_record(record)
                results[spec.label] = record
                print_fn(f"  [{len(results):2d}/{len(specs)}] {spec.label:<50} {outcome(record)[:60]:<60} "
                         f"{time.time() - started:6.1f} s  GPU {gpu}  {record['log_file']}")
                if bool(record.get("ok")) == expected_to_fail(spec):
                    print_fn(f"  unexpected outcome; the engine's whole log ({record['log_file']}):\n"
                             + tail(Path(record["log_file"]), 10**6))

    threads = [threading.Thread(target=worker, args=(gpu,)) for gpu in gpus or ["0"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {spec.label: results[spec.label] for spec in specs}
