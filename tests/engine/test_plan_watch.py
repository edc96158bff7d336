"""The engine's plan watch (`instruments.plan_watch`), off the GPU: FlashInfer's wrapper and CUDA's events are
doubles here (named so); tests/gpu/test_xqa.py runs the same watch on a real wrapper behind a busy GPU."""

from types import SimpleNamespace

import flashinfer
import torch

from dflash_fi.engine import instruments
from dflash_fi.engine.outputs import PlanWatch, Role, generate_from_json
from dflash_fi.engine.records import to_plain


class WrapperDouble:
    """A wrapper whose plan() writes its batch size into its pinned buffer, as a schedule would."""

    def __init__(self):
        self._pin_memory_int_workspace_buffer = torch.zeros(instruments.SCHEDULE_BYTES * 2, dtype=torch.uint8)

    def plan(self, qo_indptr, **kwargs):
        self._pin_memory_int_workspace_buffer[0] = len(qo_indptr) - 1


class EventDouble:
    """Reached when the test says the GPU got there."""

    gpu_done = True

    def record(self):
        pass

    def query(self):
        return EventDouble.gpu_done


def test_plans_made_while_the_last_ones_copy_is_queued_are_counted_and_changed_schedules_told_apart(monkeypatch):
    monkeypatch.setattr(flashinfer, "BatchPrefillWithPagedKVCacheWrapper", WrapperDouble)
    monkeypatch.setattr(flashinfer, "BatchDecodeWithPagedKVCacheWrapper", type("DecodeDouble", (WrapperDouble,), {}))
    monkeypatch.setattr(WrapperDouble, "plan", WrapperDouble.plan)  # restored after the test
    monkeypatch.setattr(torch.cuda, "Event", EventDouble)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    worker = SimpleNamespace(model_runner=SimpleNamespace())
    instruments.plan_watch(worker, install=True)
    wrapper = WrapperDouble()
    wrapper.plan(torch.tensor([0, 16, 32]))  # the first plan: nothing before it
    EventDouble.gpu_done = False  # the GPU has not reached the first plan's copy
    instruments._building[0] = Role.DRAFT.value
    wrapper.plan(torch.tensor([0, 16, 32]))  # the same schedule again
    wrapper.plan(torch.tensor([0, 16]))  # another batch: a queued run would read it
    EventDouble.gpu_done = True
    wrapper.plan(torch.tensor([0, 16]))
    instruments._building[0] = None
    watched = [PlanWatch(**w) for w in instruments.plan_watch(worker)]
    assert watched == [PlanWatch(None, 1, 0, 0), PlanWatch(Role.DRAFT, 3, 2, 1)]
    assert instruments.plan_watch(worker) == []  # reset by reading


def test_watched_plans_round_trip_with_their_generate():
    from tests.evidence.test_checks import output

    result = output(plans=(PlanWatch(Role.DRAFT, 5, 1, 0),))
    again = generate_from_json(to_plain(result))
    assert again.plans == result.plans and again.plan_watch(Role.DRAFT).pending == 1
    assert generate_from_json(to_plain(output(plans=None))).plans is None


def test_the_isolation_experiment_refuses_an_unknown_case_and_a_machine_without_a_gpu():
    import subprocess
    import sys

    for args in (["bogus"], ["probe"]):
        if args == ["probe"] and torch.cuda.is_available():
            continue  # on a GPU the probe runs: tests/gpu/test_xqa.py
        done = subprocess.run([sys.executable, "-m", "dflash_fi.lab.plan_race", *args], capture_output=True, text=True)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
