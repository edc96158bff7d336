"""`dflash-fi exercise N`: a reader's hunks for one of PR #43081's steps, checked by the CPU lab."""

import ast

import pytest

from dflash_fi.cli import main
from dflash_fi.errors import BadInput
from dflash_fi.exercises import PACKAGE_DIR, check_exercise, exercise_text
from dflash_fi.exercises.apply import EXERCISE_STEPS, base_source, own_hunks
from dflash_fi.exercises.checks import checks_of
from dflash_fi.exercises.layout import layout_text, read_exercise
from dflash_fi.stack import REPO_ROOT
from dflash_fi.steps.patching import Hunk

NOTEBOOKS = REPO_ROOT / "notebooks"

# What a reader who has changed nothing is told still fails: the step's own checks that stock text cannot pass.
STOCK_FAILS = {
    1: ["selector accepts the draft", "RTX 4090 fp8 draft"],
    2: ["draft all prefill", "metadata.causal", "DFlash's check"],
    3: ["plan(causal=False)", "a wrapper of its own", "DCP refused", "NVFP4 refused"],
    4: ["no TRTLLM for the draft", "one warning"],
}


def exercise(tmp_path, step, solved=False, text=None):
    path = tmp_path / f"step{step}.py"
    path.write_text(text if text is not None else exercise_text(step, solved=solved))
    return path


def try_it_yourself(step) -> str:
    """The last cell of step `step`'s notebook, its prose on one line."""
    import jupytext

    from dflash_fi.notebook import NOTEBOOK_OF_STEP

    cell = jupytext.read(NOTEBOOKS / f"{NOTEBOOK_OF_STEP[step]}.py").cells[-1]
    assert cell.cell_type == "markdown" and cell.source.startswith("## Try it yourself")
    return " ".join(cell.source.split())


def written(tmp_path, step, hunks):
    """An exercise file whose hunks are `hunks`, as a reader would have written them."""
    text = layout_text(step, "title", "base", ["somewhere"] * len(hunks), hunks, [], new=tuple(h.new for h in hunks))
    return exercise(tmp_path, step, text=text)


def checked(step, path):
    lines = []
    return check_exercise(step, path, out=lines.append), lines


def refused(capsys, *argv) -> str:
    """The one line of a refusal (the note naming vLLM's log file aside)."""
    assert main(list(argv)) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("(vLLM's log lines")]
    assert len(err) == 1 and err[0].startswith("dflash-fi exercise: "), err
    return err[0]


@pytest.mark.parametrize("step", EXERCISE_STEPS)
@pytest.mark.parametrize("solved", [False, True])
def test_the_layout_round_trips(tmp_path, step, solved):
    hunks, lines = read_exercise(exercise(tmp_path, step, solved), step)
    assert hunks == tuple(h if solved else Hunk(h.why, h.old, h.old) for h in own_hunks(step))
    text = (tmp_path / f"step{step}.py").read_text()
    assert [text.splitlines()[n - 1].strip() for n in lines] == ["{"] * len(hunks)
    for hunk in own_hunks(step):  # each lands in one place of the file it patches, which the layout names
        assert base_source(step).count(hunk.old) == 1


def test_the_layout_holds_any_text_as_it_is(tmp_path):
    texts = ("a\\n\nb'''c\n", 'x"""y\'\'\'z\\', "\n\nstarts blank\n", "ends with a quote'")
    hunks = tuple(Hunk(f"hunk {k}", old, new) for k, (old, new) in enumerate(zip(texts, reversed(texts))))
    path = exercise(tmp_path, 2, text=layout_text(2, "title", "base", ["somewhere"] * len(hunks), hunks, []))
    assert [(h.old, h.old) for h in read_exercise(path, 2)[0]] == [(t, t) for t in texts]


def test_the_layout_says_where_each_hunk_lands(tmp_path):
    text = exercise_text(1)
    assert "# It lands in FlashInferBackend.get_name, at line" in text
    assert "STEP = 1" in text and all(c.says.split()[0] in text for c in checks_of(1))
    ast.parse(text)


@pytest.mark.parametrize("step", EXERCISE_STEPS)
def test_the_steps_own_hunks_pass(tmp_path, step):
    rc, lines = checked(step, exercise(tmp_path, step, solved=True))
    assert rc == 0, lines
    assert len(lines) == 2 + len(checks_of(step)) and all(line.startswith("  pass  ") for line in lines[1:-1])
    assert lines[-1].startswith(f"step {step} passes: all {len(checks_of(step))} checks")
    assert f"`{lines[-1]}`" in try_it_yourself(step)  # what the notebook tells the reader


@pytest.mark.parametrize("step", EXERCISE_STEPS)
def test_the_stock_text_fails_saying_what_still_fails(tmp_path, step):
    rc, lines = checked(step, exercise(tmp_path, step))
    assert rc == 1
    failing = [c.name for c, line in zip(checks_of(step), lines[1:]) if line.startswith("  FAIL  ")]
    assert failing == STOCK_FAILS[step]
    assert lines[-1] == (f"step {step} still fails {len(failing)} of {len(checks_of(step))} checks: "
                         + "; ".join(failing))
    assert f"`{lines[-1]}`" in try_it_yourself(step)
    first = next(line for line in lines if line.startswith("  FAIL  "))
    assert {  # what the lab saw, as the reader reads it
        1: "vLLM refuses FLASHINFER: non-causal attention not supported",
        2: "SM 10.0 with TRTLLM, DFlash draft: 4 requests x (1 + 15): 4 decode + 0 prefill requests",
        3: "DFlash draft: 4 requests x (1 + 15): plan(causal=True)",
        4: "TRTLLMPrefill, whose kernels are causal only",
    }[step] in first


def test_an_error_in_the_readers_code_fails_the_check_saying_where(tmp_path):
    hunks = own_hunks(2)
    typo = (hunks[0], Hunk(hunks[1].why, hunks[1].old, hunks[1].new.replace("if causal:", "if causl:")), hunks[2])
    rc, lines = checked(2, written(tmp_path, 2, typo))
    assert rc == 1 and lines[4].startswith("  FAIL  step 2: a DFlash draft batch is all prefill")
    assert "NameError: name 'causl' is not defined (flashinfer.py line" in lines[4]
    assert lines[4].endswith("if causl:; your hunk 2)")

    broken = (Hunk("a field", hunks[0].old, hunks[0].new.replace("causal: bool", "causal: bool =)")), *hunks[1:])
    rc, lines = checked(2, written(tmp_path, 2, broken))
    assert rc == 1 and len(lines) == 3 and "does not import (its 7 checks did not run)" in lines[-1]
    assert lines[1].startswith("  FAIL  flashinfer.py with your hunks imports -- instead: SyntaxError: ")
    assert lines[1].endswith("causal: bool =); your hunk 1)")


@pytest.mark.parametrize("where", ["nowhere", "twice"])
def test_a_hunk_that_matches_twice_or_nowhere_is_refused_with_where(capsys, tmp_path, where):
    base = base_source(3)
    lines = base.splitlines(keepends=True)
    twice = next(line for line in lines if len(line.strip()) > 20 and base.count(line) == 2 == lines.count(line))
    old = {"nowhere": "        self._decode_wrapper = None  # Wrapper for decode\n", "twice": twice}[where]
    hunks = list(own_hunks(3))
    hunks[1] = Hunk(hunks[1].why, old, hunks[1].new)
    path = written(tmp_path, 3, tuple(hunks))
    before = path.read_text()
    line = refused(capsys, "exercise", "3", "--check", str(path))
    hunk_line = read_exercise(path, 3)[1][1]
    assert line.startswith(f"dflash-fi exercise: {path} line {hunk_line}: hunk 2 ({hunks[1].why}): its \"old\" text ")
    if where == "nowhere":
        assert "matches nowhere in" in line
        assert "its line 1, 'self._decode_wrapper = None  # Wrapper for decode', is nowhere in it" in line
    else:
        at = [n for n, text in enumerate(lines, 1) if text == twice]
        assert f"matches 2 places (lines {at[0]}, {at[1]})" in line and "and your hunk 1" in line
    assert path.read_text() == before


@pytest.mark.parametrize("argv, says", [
    (("exercise", "5"), "no exercise for step 5: the exercises are PR #43081's steps, 1, 2, 3, 4"),
    (("exercise", "x"), "unknown step 'x'"),
    (("exercise", "2", "--out", str(PACKAGE_DIR / "step2.py")), "is inside the dflash_fi package"),
    (("exercise", "2", "--check"), "no exercise file exercises/step2.py: write one with `dflash-fi exercise 2`"),
    (("exercise", "0", "--check"), "no exercise for step 0"),
])
def test_bad_input_is_one_line_and_writes_nothing(capsys, tmp_path, monkeypatch, argv, says):
    monkeypatch.chdir(tmp_path)
    assert says in refused(capsys, *argv)
    assert list(tmp_path.iterdir()) == [] and not (PACKAGE_DIR / "step2.py").exists()


@pytest.mark.parametrize("text, says", [
    ("STEP = 2\nHUNKS = [\n", "line 2: not an exercise file (SyntaxError: '[' was never closed)"),
    ("import os\nSTEP = 2\nHUNKS = []\n", "line 1: an exercise file holds `STEP = 2` and `HUNKS = [...]`"),
    ("STEP = 2\nHUNKS = [dict(old='a', new='b')]\n", "line 2: HUNKS must be plain literals"),
    ("STEP = 3\nHUNKS = [{'old': 'a', 'new': 'b'}]\n", "is the exercise of step 3, not of step 2"),
    ("STEP = 2\nHUNKS = [\n  {'old': 'a'},\n]\n", "line 3, hunk 1: a hunk is a dict with \"old\" and \"new\""),
    ("STEP = 2\nHUNKS = [{'old': 'a', 'new': 3}]\n", "hunk 1: \"new\" must be a string, not int"),
    ("STEP = 2\nHUNKS = [{'old': '', 'new': 'b'}]\n", "hunk 1: \"old\" is empty"),
    ("STEP = 2\n", "no HUNKS in it"),
])
def test_a_malformed_exercise_file_is_refused_in_one_line(capsys, tmp_path, text, says):
    path = exercise(tmp_path, 2, text=text)
    assert says in refused(capsys, "exercise", "2", "--check", str(path))
    assert path.read_text() == text


def test_an_exercise_file_is_written_once_unless_forced(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["exercise", "3"]) == 0
    written = tmp_path / "exercises" / "step3.py"
    assert "dflash-fi exercise 3 --check exercises/step3.py" in capsys.readouterr().out
    written.write_text(written.read_text() + "# my edits\n")
    edited = written.read_text()
    assert "--force replaces it" in refused(capsys, "exercise", "3")
    assert written.read_text() == edited
    assert main(["exercise", "3", "--force"]) == 0 and written.read_text() == exercise_text(3)
    with pytest.raises(BadInput, match="is a directory"):
        from dflash_fi.exercises import write_exercise

        write_exercise(3, str(tmp_path))
