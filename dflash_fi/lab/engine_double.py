"""Double of the engine process (`python -m dflash_fi.engine.child`), for the CPU: no vLLM engine can exist
without a GPU, but the turn-taking around it can be tested for real (processes, sockets, failures).

    python -m dflash_fi.lab.engine_double SPEC.json RESULT.json ADDRESS

It speaks the child's protocol: connects to ADDRESS, says it is ready, answers each benchmark round with
made-up rows (tokens/s from the spec's `extra["tokens_per_s"]`), and writes RESULT.json when told to stop.
`extra["fail"] == "start"` makes it exit before connecting, as an engine that fails to start does.
"""

from __future__ import annotations

import json
import sys
from multiprocessing.connection import Client
from pathlib import Path


def rows(spec: dict, index: int) -> list[dict]:
    tps = spec["extra"].get("tokens_per_s", 100.0)
    return [{"batch": b, "output_tokens_per_s": tps * b, "generates_tokens_per_s": [tps * b],
             "generates_step_ms": [10.0 / b], "tokens_sha256_per_generate": ["same"], "tau": 2.0,
             "metadata_build_ms_per_step": {"draft step, FLASHINFER (2 layers)": 0.1}, "round_asked": index}
            for b in spec["batch_sizes"]]


def main(spec_path: str, result_path: str, address: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    if spec["extra"].get("fail") == "start":
        return 1
    rounds = []
    with Client(address) as parent:
        parent.send({"ready": True})
        while (request := parent.recv()).get("round") is not None:
            rounds.append({"round": request["round"], "batches": rows(spec, request["round"])})
            parent.send({"done": request["round"], "batches": rounds[-1]["batches"]})
    Path(result_path).write_text(json.dumps({"ok": True, "cudagraph_mode": "FULL_AND_PIECEWISE", "rounds": rounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
