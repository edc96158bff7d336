"""Several engines, each in its own process and all started at once, taking turns: a benchmark in rounds.

Every engine starts (in parallel), then the parent asks each in turn for one benchmark round (A B C A B C ...),
so that only one engine works at a time and a slow or fast spell of the machine falls on all of them alike.
Round r of engine A and round r of engine B are a pair; their ratio is what a benchmark reports, per pair.
An engine that fails to start, or dies, is left out of the later rounds and its record says why.
"""

from __future__ import annotations

import tempfile
import threading
import time
from multiprocessing.connection import Listener
from pathlib import Path

from dflash_fi.engine.runner import EngineProcess
from dflash_fi.engine.spec import RunSpec


class _Served:
    def __init__(self, spec: RunSpec, command: str, gpu: str | None, folder: Path, index: int, module: str):
        address = str(folder / f"engine-{index}.sock")
        self.listener = Listener(address, family="AF_UNIX")
        self.engine = EngineProcess(spec, command, gpu, address=address, module=module)
        self.connection = None
        self.failed: str | None = None
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def _accept(self):
        try:
            self.connection = self.listener.accept()
        except OSError:  # the listener was closed: the engine never came up
            pass

    def wait_ready(self, deadline: float) -> bool:
        while self.connection is None and self.engine.alive() and time.time() < deadline:
            self._accepting.join(timeout=0.5)
        if self.connection is None or not self._receive(deadline).get("ready"):
            self.failed = self.failed or "did not start"
            self.listener.close()
            return False
        return True

    def _receive(self, deadline: float) -> dict:
        while time.time() < deadline:
            if self.connection.poll(0.2):
                try:
                    return self.connection.recv()
                except EOFError:
                    break
            if not self.engine.alive():
                break
        self.failed = "stopped answering"
        return {}

    def round(self, index: int, deadline: float) -> list[dict] | None:
        if self.failed:
            return None
        self.connection.send({"round": index})
        return self._receive(deadline).get("batches")

    def finish(self) -> dict:
        if self.connection is not None and not self.failed:
            self.connection.send({"round": None})
        record = self.engine.finish(timeout_s=120)
        self.listener.close()
        if self.failed and record.get("ok"):
            record.update(ok=False, error={"type": "BenchmarkError", "phase": "rounds", "message": self.failed})
        return record


def run_in_turns(specs: list[RunSpec], rounds: int, command: str, gpu: str | None = None,
                 start_timeout_s: int = 420, round_timeout_s: int = 300, print_fn=print,
                 module: str = "dflash_fi.engine.child") -> dict[str, dict]:
    """Start every engine, then `rounds` rounds in turn; records by label, each with its `rounds`."""
    with tempfile.TemporaryDirectory(prefix="dflash-fi-turns-") as folder:
        served = [_Served(spec, command, gpu, Path(folder), i, module) for i, spec in enumerate(specs)]
        started = time.time()
        for s in served:
            ok = s.wait_ready(started + start_timeout_s)
            print_fn(f"  {s.engine.spec.label:<55} {'up' if ok else 'FAILED to start'} after "
                     f"{time.time() - started:5.0f} s")
        for index in range(1, rounds + 1):
            for s in served:
                t0 = time.time()
                rows = s.round(index, time.time() + round_timeout_s)
                if rows is not None:
                    print_fn(f"  round {index}  {s.engine.spec.label:<55} " + "  ".join(
                        f"b{r['batch']} {r['output_tokens_per_s']:.0f} tok/s" for r in rows)
                        + f"  ({time.time() - t0:.0f} s)")
        return {s.engine.spec.label: s.finish() for s in served}
