"""Several engines, each in its own process and all started at once, taking turns: a benchmark in rounds.

Every engine starts (in parallel), then the parent hands out turns, one batch size of one round each. The engines
that are compared with each other (a model pair) go through their rounds one batch size at a time: round 1 (a
warm-up), round 2, and so on, each round every engine of the pair in turn (A B C, the next round C B A), all on the
vCPU fastest at the round's start (`dflash_fi.engine.vcpus`). Only one engine works at a time, and the engines of a
round work on one vCPU within seconds: a slow or fast spell of the machine falls on all of them alike. Round r of
engine A and round r of engine B at batch b are a pair; their ratio is what a benchmark reports, per pair.
An engine that fails to start, or dies, is left out of the later rounds and its record says why.

Idle engines must not take the host from the working one: an idle vLLM process still has threads (and, right
after its turn, spinning OpenMP workers). So after the first round of the first batch size, every engine but the
working one is stopped (SIGSTOP, its whole process tree) and continued for its own turn. Each round records the CPU
seconds the other engines' processes used during the engine's turns: the first round, with nobody stopped, shows what
idle engines take when they are not.
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
from dflash_fi.engine.records import EngineRecord, Failure, Phase, TurnCpu
from dflash_fi.engine.runner import EngineProcess
from dflash_fi.engine.spec import RunSpec
from dflash_fi.engine.vcpus import FastestVcpu


def children_of() -> dict[int, list[int]]:
    """Every process's children, from one pass over /proc (Linux)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    return parents


def process_tree(pid: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """pid and all its descendants (`children`: a `children_of()` already taken)."""
    children = children_of() if children is None else children
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo += children.get(current, [])
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
        self.turn_cpus: dict[tuple[int, int], TurnCpu] = {}  # (round, batch) -> the vCPU the turn ran on
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

    def signal(self, sig: int, children: dict[int, list[int]] | None = None) -> None:
        if self.engine.alive():
            for pid in process_tree(self.engine.process.pid, children):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass

    def turn(self, index: int, batch: int, deadline: float) -> dict | None:
        """Round `index` at batch size `batch`: its batch run, or None if the engine failed."""
        if self.failed:
            return None
        self.connection.send({"round": index, "batch": batch})
        batches = self._receive(deadline).get("batches")
        return batches[0] if batches else None

    def stop(self) -> None:
        """Continue the engine and tell it to stop serving (it then writes its record and exits)."""
        self.signal(signal.SIGCONT)
        if self.connection is not None and not self.failed:
            try:
                self.connection.send({"round": None})
            except OSError:  # it died: finish() records how
                pass

    def finish(self) -> EngineRecord:
        record = self.engine.finish(timeout_s=120)
        self.listener.close()
        if self.failed and record.ok:
            record = replace(record, ok=False, failure=Failure("BenchmarkError", self.failed, Phase.ROUNDS))
        rounds = tuple(replace(r, others_cpu_s=self.rounds_cpu.get(r.index),
                               batches=tuple(replace(b, cpu=self.turn_cpus.get((r.index, b.batch)))
                                             for b in r.batches))
                       for r in record.rounds)
        return replace(record, rounds=rounds)


def schedule(specs: list[RunSpec], rounds: int) -> list[tuple[int, int, list[int]]]:
    """Every round, as (round, batch size, engines in turn order): per model pair (in the order of the specs), per
    batch size, rounds 1 to `rounds` back to back, each of the pair's engines that runs the batch size, forward in
    odd rounds and backward in even ones (so that no engine always follows the same one)."""
    out = []
    for pair in dict.fromkeys(spec.run.pair for spec in specs):
        members = [i for i, spec in enumerate(specs) if spec.run.pair is pair]
        for batch in dict.fromkeys(b for i in members for b in specs[i].bench.batch_sizes):
            order = [i for i in members if batch in specs[i].bench.batch_sizes]
            out += [(index, batch, order if index % 2 else order[::-1]) for index in range(1, rounds + 1)]
    return out


def run_in_turns(specs: list[RunSpec], rounds: int, command: str, gpu: str | None = None,
                 start_timeout_s: int = 420, turn_timeout_s: int = 300, print_fn=print,
                 module: str = "dflash_fi.engine.child", env_of=None, pause_idle: bool = True,
                 fastest_vcpu: bool = True) -> dict[RunId, EngineRecord]:
    """Start every engine, then `rounds` rounds of turns per pair and batch size (`schedule`); records by run, each
    with its rounds. After the first round (with `pause_idle`) the engines not working are stopped; with
    `fastest_vcpu` each round's engines run their main thread on the vCPU fastest at the round's start. `env_of(spec)`:
    more environment for an engine."""
    with tempfile.TemporaryDirectory(prefix="dflash-fi-turns-") as folder:
        served = [_Served(spec, command, gpu, Path(folder), i, module, env_of(spec) if env_of else None)
                  for i, spec in enumerate(specs)]
        vcpus = FastestVcpu() if fastest_vcpu else None
        started = time.time()
        for s in served:
            ok = s.wait_ready(started + start_timeout_s)
            print_fn(f"  {label(s.engine.spec.run):<60} {'up' if ok else 'FAILED to start'} after "
                     f"{time.time() - started:5.0f} s")
        try:
            for n, (index, batch, order) in enumerate(schedule(specs, rounds)):
                if vcpus:
                    vcpus.choose()  # the round's vCPU, for every engine of the round
                for i in order:
                    s = served[i]
                    if s.failed:
                        continue
                    children = children_of()
                    others = [pid for o in served if o is not s and o.engine.alive()
                              for pid in process_tree(o.engine.process.pid, children)]
                    if pause_idle and n > 0:
                        for o in served:
                            o.signal(signal.SIGSTOP if o is not s else signal.SIGCONT, children)
                    if vcpus:
                        vcpus.before(s.engine.process.pid, process_tree(s.engine.process.pid, children))
                    t0, cpu0 = time.time(), cpu_seconds(others)
                    run = s.turn(index, batch, time.time() + turn_timeout_s)
                    held = vcpus.after() if vcpus else None
                    if run is None:
                        continue
                    if held:
                        s.turn_cpus[(index, batch)] = held
                    used = cpu_seconds(others) - cpu0
                    s.rounds_cpu[index] = round(s.rounds_cpu.get(index, 0.0) + used, 3)
                    first = run["generates"][0]
                    step = f"{first['step_times']['median']:.3f} ms/step" if first.get("step_times") else ""
                    on = (f"; vCPU {held.cpu} {held.loop_ms:.2f} ms, others {held.others_median_loop_ms:.2f}, after "
                          f"{held.loop_ms_after:.2f}") if held else ""
                    print_fn(f"  round {index}  b{batch:<3} {label(s.engine.spec.run):<60} "
                             f"{first['output_tokens_per_s']:>8.0f} tok/s  {step}  ({time.time() - t0:.1f} s; others "
                             f"used {used:.2f} CPU s{on})")
        finally:
            for s in served:  # every engine shuts down at once
                s.stop()
        return {s.engine.spec.run: s.finish() for s in served}
