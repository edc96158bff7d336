"""Several engines, each in its own process and all started at once, taking turns: a benchmark in rounds.

Every engine starts (in parallel), then the parent asks each in turn for one benchmark round (A B C A B C ...),
so that only one engine works at a time and a slow or fast spell of the machine falls on all of them alike.
Round r of engine A and round r of engine B are a pair; their ratio is what a benchmark reports, per pair.
An engine that fails to start, or dies, is left out of the later rounds and its record says why.

Idle engines must not take the host from the working one: an idle vLLM process still has threads (and, right
after its round, spinning OpenMP workers). So from round 2 on, every engine but the working one is stopped
(SIGSTOP, its whole process tree) and continued for its own round. Each round records the CPU seconds the other
engines' processes used meanwhile: round 1, with nobody stopped, shows what idle engines take when they are not.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from dataclasses import replace
from multiprocessing.connection import Listener
from pathlib import Path

from dflash_fi.engine.identity import RunId, label
from dflash_fi.engine.records import EngineRecord, Failure, Phase
from dflash_fi.engine.runner import EngineProcess
from dflash_fi.engine.spec import RunSpec


def process_tree(pid: int) -> list[int]:
    """pid and all its descendants (Linux /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo += parents.get(current, [])
    return tree


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds used so far by these processes (all their threads)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / ticks


class _Served:
    def __init__(self, spec: RunSpec, command: str, gpu: str | None, folder: Path, index: int, module: str,
                 env: dict | None):
        address = str(folder / f"engine-{index}.sock")
        self.listener = Listener(address, family="AF_UNIX")
        self.engine = EngineProcess(spec, command, gpu, address=address, module=module, env=env)
        self.connection = None
        self.failed: str | None = None
        self.rounds_cpu: dict[int, float] = {}  # round -> the other engines' CPU seconds during it
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

    def signal(self, sig: int) -> None:
        if self.engine.alive():
            for pid in process_tree(self.engine.process.pid):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass

    def round(self, index: int, deadline: float) -> list[dict] | None:
        if self.failed:
            return None
        self.connection.send({"round": index})
        return self._receive(deadline).get("batches")

    def finish(self) -> EngineRecord:
        self.signal(signal.SIGCONT)
        if self.connection is not None and not self.failed:
            self.connection.send({"round": None})
        record = self.engine.finish(timeout_s=120)
        self.listener.close()
        if self.failed and record.ok:
            record = replace(record, ok=False, failure=Failure("BenchmarkError", self.failed, Phase.ROUNDS))
        rounds = tuple(replace(r, others_cpu_s=self.rounds_cpu.get(r.index)) for r in record.rounds)
        return replace(record, rounds=rounds)


def run_in_turns(specs: list[RunSpec], rounds: int, command: str, gpu: str | None = None,
                 start_timeout_s: int = 420, round_timeout_s: int = 300, print_fn=print,
                 module: str = "dflash_fi.engine.child", env_of=None, pause_idle: bool = True) -> dict[RunId, EngineRecord]:
    """Start every engine, then `rounds` rounds in turn; records by run, each with its rounds. From round 2 on
    (with `pause_idle`) the engines not working are stopped. `env_of(spec)`: more environment for an engine."""
    with tempfile.TemporaryDirectory(prefix="dflash-fi-turns-") as folder:
        served = [_Served(spec, command, gpu, Path(folder), i, module, env_of(spec) if env_of else None)
                  for i, spec in enumerate(specs)]
        started = time.time()
        for s in served:
            ok = s.wait_ready(started + start_timeout_s)
            print_fn(f"  {label(s.engine.spec.run):<60} {'up' if ok else 'FAILED to start'} after "
                     f"{time.time() - started:5.0f} s")
        try:
            for index in range(1, rounds + 1):
                for s in served:
                    others = [pid for o in served if o is not s and o.engine.alive()
                              for pid in process_tree(o.engine.process.pid)]
                    if pause_idle and index > 1:
                        for o in served:
                            o.signal(signal.SIGSTOP if o is not s else signal.SIGCONT)
                    t0, cpu0 = time.time(), cpu_seconds(others)
                    rows = s.round(index, time.time() + round_timeout_s)
                    if rows is None:
                        continue
                    s.rounds_cpu[index] = round(cpu_seconds(others) - cpu0, 3)
                    print_fn(f"  round {index}  {label(s.engine.spec.run):<60} " + "  ".join(
                        f"b{r['batch']} {r['generates'][0]['output_tokens_per_s']:.0f} tok/s" for r in rows)
                        + f"  ({time.time() - t0:.0f} s; others used {s.rounds_cpu[index]:.2f} CPU s)")
        finally:
            for s in served:
                s.signal(signal.SIGCONT)
        return {s.engine.spec.run: s.finish() for s in served}
