"""Bad input on the command line: one clear line (exit 2), and nothing changed on disk. Run as a new user would."""

import hashlib

import pytest

from dflash_fi.cli import main
from dflash_fi.models import MODELS_DIR
from dflash_fi.stack import REPO_ROOT


def fingerprint() -> dict:
    """Every file of the shipped pair and of the committed evidence, by content."""
    files = [*MODELS_DIR.rglob("*"), *(REPO_ROOT / "evidence").glob("*")]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(files) if p.is_file()}


@pytest.fixture
def unchanged():
    before = fingerprint()
    yield
    assert fingerprint() == before, "a refused command changed the shipped pair or evidence/"


def refused(capsys, *argv: str) -> str:
    """The one line of a refusal (besides the note naming vLLM's log file, which commands print first)."""
    assert main(list(argv)) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("(vLLM's log lines")]
    assert len(err) == 1 and err[0].startswith(f"dflash-fi {argv[0]}: "), err
    return err[0]


@pytest.mark.parametrize("argv, says", [
    (("train", "--smoke", "--out", str(MODELS_DIR)), "already holds a trained pair (training.json)"),
    (("walkthrough", "--prompts", "1000"), "at most 64, not 1000"),
    (("run", "--step", "3", "--prompts", "1000"), "at most 64, not 1000"),
    (("run", "--step", "12"), "unknown step '12'"),
    (("bench", "e2e", "--rounds", "1"), "--rounds must be at least 2"),  # refused before the GPU is asked for
    (("reference", "--prompts", "1000"), "at most 64, not 1000"),
    (("run", "--step", "3", "--drafter", "./nowhere"), "neither an existing model directory nor a hub id"),
    (("record", "gpu-tests", "--junit", "/nonexistent.xml", "--ran", "pytest"), "no file /nonexistent.xml"),
    (("record", "gpu-tests", "--junit", __file__, "--ran", "pytest"), "is not JUnit XML"),
])
def test_bad_input_is_one_line_and_changes_nothing(capsys, unchanged, argv, says):
    assert says in refused(capsys, *argv)


@pytest.mark.parametrize("argv", [("reference", "--device", "cuda", "--prompts", "1"),
                                  ("train", "--smoke", "--device", "cuda"),
                                  ("bench", "e2e", "--record"), ("profile",), ("near-ties",),
                                  ("record", "gpu-tests", "--junit", "JUNIT", "--ran", "pytest tests/gpu")])
def test_gpu_commands_without_a_gpu_say_so_in_one_line(capsys, unchanged, tmp_path, argv):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite name="pytest"><testcase classname="t" name="a" time="0.1"/>'
                     '</testsuite></testsuites>')
    argv = tuple(str(junit) if a == "JUNIT" else a for a in argv)
    argv = (*argv, "--out", str(tmp_path / "out")) if argv[0] == "train" else argv
    assert "needs a CUDA GPU" in refused(capsys, *argv)


def test_training_goes_to_artifacts_unless_told_otherwise():
    from dflash_fi.cli import build_parser

    out = build_parser().parse_args(["train", "--smoke"]).out
    assert "artifacts" in out and not out.startswith(str(MODELS_DIR))
