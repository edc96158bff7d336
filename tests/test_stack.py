import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dflash_fi import stack
from dflash_fi.errors import StackMismatch

ROOT = Path(__file__).resolve().parent.parent


def test_installed_stack_is_the_pinned_one():
    assert stack.stack_problems() == []
    import vllm
    from vllm.v1.attention.backends.flashinfer import FlashInferBackend

    assert vllm.__version__ == "0.22.1"
    # The whole tutorial exists because stock 0.22.1 says no here.
    assert FlashInferBackend.supports_non_causal() is False


def test_wrong_vllm_version_is_refused_with_instructions(monkeypatch):
    monkeypatch.setattr(stack, "installed_version", lambda dist: {"vllm": "0.24.0"}.get(dist, stack.PINNED.get(dist)))
    with pytest.raises(StackMismatch, match=r"vllm is 0\.24\.0, but dflash-fi needs vllm==0\.22\.1: reinstall"):
        stack.require_pinned_stack()
    assert stack.doctor() == 1


def test_doctor_reports_the_machine(capsys):
    assert stack.doctor() == 0
    out = capsys.readouterr().out
    assert "vllm                  0.22.1" in out
    assert "flashinfer-python     0.6.11.post2" in out
    gpu = stack.cuda_gpu()
    assert (f"SM {gpu.sm}" in out) if gpu else ("no CUDA GPU" in out and "CPU parts only" in out)


def test_environment_yml_installs_the_package_from_pyproject_only():
    env = (ROOT / "environment.yml").read_text()
    pip_lines = re.findall(r"^\s+- (.+)$", env.split("- pip:", 1)[1], flags=re.M)
    assert pip_lines == ["-e .[dev]"]
    python = re.search(r"- python=(\d+\.\d+)", env).group(1)
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=3.11" and tuple(map(int, python.split("."))) >= (3, 11)


def test_pyproject_pins_and_plugin_entry_point():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "vllm==0.22.1" in project["dependencies"]
    assert "flashinfer-python==0.6.11.post2" in project["dependencies"]
    assert project["entry-points"]["vllm.general_plugins"] == {"dflash_fi": "dflash_fi.plugin:register"}
    assert project["scripts"] == {"dflash-fi": "dflash_fi.cli:main"}


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    readme_command = re.search(r"<!-- test-command -->\n```bash\n(.+?)\n```", readme, re.S).group(1)
    ci_command = subprocess.run(["bash", str(ROOT / ".ci" / "run"), "--print-command"], capture_output=True,
                                text=True, check=True).stdout.rstrip("\n")
    assert ci_command == readme_command and "pytest" in ci_command


def cli(*args):
    return subprocess.run([sys.executable, "-m", "dflash_fi.cli", *args], capture_output=True, text=True)


@pytest.mark.parametrize("args, message", [
    (("routing", "--step", "10"), "unknown step '10': choose one of 0, 1, 2, 3, 4, 5, 6, 7, 8, 9"),
    (("reference", "--target", "/nonexistent/model"), "neither an existing model directory nor a hub id"),
    (("reference", "--prompts", "0"), "--prompts: must be at least 1, not 0"),
    (("walkthrough", "--max-new-tokens", "-2"), "--max-new-tokens: must be at least 1, not -2"),
    (("run", "--prompts", "0"), "--prompts: must be at least 1, not 0"),
    (("routing", "--sm", "7.5"), "SM '7.5': choose one of 8.0, 8.6, 8.9, 9.0, 10.0"),
])
def test_cli_fails_fast_on_bad_input(args, message):
    result = cli(*args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_cli_without_a_gpu_says_what_to_do():
    if stack.cuda_gpu() is not None:
        pytest.skip("this machine has a GPU")
    for args in (("run", "--step", "3"), ("bench", "kernels"), ("notebooks",)):
        result = cli(*args)
        assert result.returncode == 2 and "needs a CUDA GPU and this machine has none" in result.stderr


def test_a_programming_error_keeps_its_traceback(monkeypatch, capsys):
    from dflash_fi import cli as cli_module, commands

    monkeypatch.setattr(commands, "doctor", lambda args: {}["not a user error"])
    with pytest.raises(KeyError):
        cli_module.main(["doctor"])
