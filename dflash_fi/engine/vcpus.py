"""The host's vCPUs, probed before each benchmark round: every turn of the round holds its engine's main thread on
the one fastest at the round's start.

The GPU machine is a VM whose vCPUs are not equally fast, and not for long: the same loop of pure Python takes
longer on some vCPUs than on others, and a vCPU can be slower after a turn than before it (each turn of the engine
benchmark records both, `TurnCpu`); an engine's step time can jump between levels from one turn to the next.
A host-bound engine is as fast as the vCPU its main thread lands on (vLLM's engine core runs in it: one process,
`VLLM_ENABLE_V1_MULTIPROCESSING=0`). So at a round's start the parent times the loop on every vCPU it may use
(`choose`); for each turn it holds the engine's main thread on the fastest (`os.sched_setaffinity` per thread) and its
other threads and processes on the rest, and times that vCPU before and after the turn. The engines compared in a
round run on one vCPU, seconds apart. Each turn records the three times and the hypervisor's steal time on the vCPU
during the turn (`TurnCpu`): the results file shows how far apart the vCPUs were, whether the chosen one stayed fast,
and whether a slow spell was the vCPU taken away (steal) or running slower.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from dflash_fi.engine.outputs import TurnCpu

LOOP_ITERATIONS = 20_000  # under a millisecond on a fast vCPU
LOOP_REPEATS = 3  # the fastest of three: a timer interrupt in one does not count


def loop_ms(iterations: int = LOOP_ITERATIONS) -> float:
    """ms for a fixed loop of pure Python, on whatever vCPU this thread runs."""
    start, total = time.perf_counter(), 0
    for i in range(iterations):
        total += i
    return (time.perf_counter() - start) * 1000


def vcpu_speeds(cpus) -> dict[int, float]:
    """The loop's ms on each of `cpus`, this thread held on each in turn (then given back its own affinity)."""
    own = os.sched_getaffinity(0)
    speeds = {}
    try:
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            speeds[cpu] = min(loop_ms() for _ in range(LOOP_REPEATS))
    finally:
        os.sched_setaffinity(0, own)
    return speeds


def steal_ms(cpu: int) -> float | None:
    """The hypervisor's steal time on `cpu` so far (ms; /proc/stat counts it in clock ticks), None where not found."""
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith(f"cpu{cpu} "):
                return int(line.split()[8]) * 1000 / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        pass
    return None


def threads(pid: int) -> list[int]:
    try:
        return [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:  # the process has exited
        return []


def hold(main_pid: int, pids: list[int], cpu: int, cpus: set[int]) -> None:
    """Hold `main_pid`'s main thread on `cpu`, and every other thread of `pids` on the rest of `cpus`."""
    rest = (cpus - {cpu}) or {cpu}
    for pid in pids:
        for tid in threads(pid):
            try:
                os.sched_setaffinity(tid, {cpu} if tid == main_pid else rest)
            except (ProcessLookupError, PermissionError):  # a thread that has just exited
                pass


class FastestVcpu:
    """Per round: `choose()` probes every vCPU and picks the fastest. Per turn: `before(main_pid, pids)` holds the
    engine there and probes it; `after()` probes it again and says how it went."""

    def __init__(self, cpus: set[int] | None = None):
        self.cpus = set(cpus or os.sched_getaffinity(0))
        self._chosen: tuple[int, float] | None = None  # the round's vCPU, the other vCPUs' median loop ms
        self._held: tuple[int, float, float, float | None] | None = None

    def choose(self) -> int:
        speeds = vcpu_speeds(sorted(self.cpus))
        cpu = min(speeds, key=speeds.get)
        self._chosen = (cpu, statistics.median([v for c, v in speeds.items() if c != cpu] or [speeds[cpu]]))
        return cpu

    def before(self, main_pid: int, pids: list[int]) -> None:
        if self._chosen is None:
            self.choose()
        cpu, others = self._chosen
        hold(main_pid, pids, cpu, self.cpus)
        self._held = (cpu, vcpu_speeds([cpu])[cpu], others, steal_ms(cpu))

    def after(self) -> TurnCpu | None:
        if self._held is None:
            return None
        cpu, before, others, stolen = self._held
        self._held = None
        now = steal_ms(cpu)
        return TurnCpu(cpu=cpu, loop_ms=round(before, 4), others_median_loop_ms=round(others, 4),
                       loop_ms_after=round(vcpu_speeds([cpu])[cpu], 4),
                       steal_ms=None if now is None or stolen is None else round(now - stolen, 1))
