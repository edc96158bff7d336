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


# Every command with --json, as a new user would run it on a CPU. GPU-only ones are refused there: one line on stderr,
# exit 2, and nothing on stdout, so a script reading stdout never parses half an answer.
JSON_RUNS = {
    "doctor": ("doctor", "--json"),
    "reference": ("reference", "--json", "--prompts", "1", "--new-tokens", "2"),
    "run": ("run", "--json"),
    "selector-matrix": ("selector-matrix", "--step", "0", "--json"),  # stock vLLM finds no backend for one draft
    "routing": ("routing", "--step", "4", "--trtllm", "--json"),
    "graphs": ("graphs", "--step", "4", "--json"),  # step 4 costs the engine its full graphs, and vLLM says so
}
GPU_ONLY = ("run",)


def test_every_command_with_json_is_run_here():
    from dflash_fi.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    assert {name for name, p in commands.items() if "--json" in p._option_string_actions} == set(JSON_RUNS)


@pytest.mark.parametrize("command", sorted(JSON_RUNS))
def test_json_is_json(capsys, unchanged, command):
    import json

    import torch

    if command in GPU_ONLY:
        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU: the command would run")
        assert "needs a CUDA GPU" in refused(capsys, *JSON_RUNS[command])
        return
    code = main(list(JSON_RUNS[command]))
    data = json.loads(capsys.readouterr().out)
    if command == "doctor":
        assert code == (1 if data["problems"] else 0) and data["vllm"] == "0.22.1"
        return
    assert code == 0
    if command == "selector-matrix":
        errors = [r["auto_error"] for r in data if r["auto_error"]]
        assert errors and all(e["type"] == "ValueError" and e["message"] for e in errors)
    if command == "graphs":
        warning = data[0]["vllm_warnings"][0]
        assert warning["hunk"] is None and warning["function"] == "resolve_cudagraph_mode_and_sizes"
    if command == "routing":
        assert data["capability"] == "10.0" and data["routes"][0]["prefill"] == "NON_CAUSAL"


@pytest.mark.parametrize("argv, says", [
    (("selector-matrix", "--step", "12", "--json"), "unknown step 12"),
    (("graphs", "--step", "x", "--json"), "invalid int value: 'x'"),
    (("routing", "--sm", "7.5", "--json"), "SM '7.5': choose one of"),
    (("reference", "--prompts", "0", "--json"), "must be at least 1, not 0"),
])
def test_bad_input_with_json_is_one_line_and_no_json(capsys, unchanged, argv, says):
    """Refused by argparse or by the command: one line on stderr, exit 2, stdout empty."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # argparse exits
        code = exit_.code
    out, err = capsys.readouterr()
    err = [line for line in err.splitlines() if not line.startswith("(vLLM's log lines")]
    assert code == 2 and out == "" and len(err) == 1 and err[0].startswith(f"dflash-fi {argv[0]}: "), (out, err)
    assert says in err[0]
