"""docs/steps/stepN.diff, each step's diff for readers without vLLM, says exactly what the step adds now."""

import pytest

from dflash_fi.steps import STEPS, hunk_diff
from dflash_fi.steps.diffs import DIFFS_DIR, step_diff_text, write_step_diffs

LATER_STEPS = [s for s in STEPS if s > 0]


@pytest.mark.parametrize("step", LATER_STEPS)
def test_the_committed_diff_is_the_steps_diff_now(step):
    committed = (DIFFS_DIR / f"step{step}.diff").read_text()
    assert committed == step_diff_text(step), (
        f"docs/steps/step{step}.diff is not what step {step} adds now: run `python -m dflash_fi.steps.diffs`")
    assert committed.endswith(hunk_diff(step)) and committed.startswith(f"# Step {step} - ")


def test_there_is_one_diff_per_step_and_the_writer_writes_them(tmp_path):
    assert sorted(p.name for p in DIFFS_DIR.iterdir()) == sorted(f"step{s}.diff" for s in LATER_STEPS)
    written = write_step_diffs(tmp_path)
    assert [p.name for p in written] == [f"step{s}.diff" for s in LATER_STEPS]
    assert all(p.read_text() == (DIFFS_DIR / p.name).read_text() for p in written)
