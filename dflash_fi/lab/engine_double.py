"""Double of the engine process (`python -m dflash_fi.engine.child`), for the CPU: no vLLM engine can exist
without a GPU, but the turn-taking around it can be tested for real (processes, sockets, pauses, failures).

    python -m dflash_fi.lab.engine_double SPEC.json RESULT.json ADDRESS

It speaks the child's protocol: connects to ADDRESS, says it is ready, answers each benchmark turn (a round at one
batch size) with a made-up batch run, and writes RESULT.json when told to stop. Its behaviour comes from its environment:
DOUBLE_TOKENS_PER_S (tokens/s per request, default 100), DOUBLE_FAIL=start (exit before connecting, as an engine
that fails to start does), DOUBLE_ROUND_S (seconds a turn takes, asleep) and DOUBLE_BUSY_S (seconds of CPU work
after each turn, as an idle vLLM engine's threads may do: what pausing idle engines is for).
"""

from __future__ import annotations

import json
import os
import sys
import time
from multiprocessing.connection import Client
from pathlib import Path

TOKENS_PER_S, FAIL, ROUND_S, BUSY_S = "DOUBLE_TOKENS_PER_S", "DOUBLE_FAIL", "DOUBLE_ROUND_S", "DOUBLE_BUSY_S"


def batch_run(batch: int) -> dict:
    tps = float(os.environ.get(TOKENS_PER_S, 100.0))
    generate = {"num_requests": 1, "generate_s": 1.0, "steps": 10.0, "tokens_sha256": "same",
                "acceptance": {"num_drafts": 10, "num_draft_tokens": 150, "num_accepted_tokens": 10,
                               "per_position": [0.5] * 15},
                "builds": [{"key": {"role": "draft step", "backend": "FLASHINFER", "layers": 2}, "builds": 10,
                            "seconds": 0.001, "largest_tokens": 16, "above_largest_graph": 0}]}
    return {"batch": batch, "generates": [{**generate, "num_requests": batch, "output_tokens_per_s": tps * batch}]}


def main(spec_path: str, result_path: str, address: str) -> int:
    if os.environ.get(FAIL) == "start":
        return 1
    rounds: dict[int, list] = {}
    with Client(address) as parent:
        parent.send({"ready": True})
        while (request := parent.recv()).get("round") is not None:
            time.sleep(float(os.environ.get(ROUND_S, 0)))
            run = batch_run(request["batch"])
            rounds.setdefault(request["round"], []).append(run)
            parent.send({"done": request["round"], "batches": [run]})
            busy_until = time.process_time() + float(os.environ.get(BUSY_S, 0))
            while time.process_time() < busy_until:  # CPU work while the next engine has its turn
                pass
    Path(result_path).write_text(json.dumps({"ok": True, "cudagraph_mode": "FULL_AND_PIECEWISE",
                                             "rounds": [{"index": i, "batches": b} for i, b in rounds.items()]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
