"""The pinned stack and the machine: which versions are installed, which GPU (if any) is here."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from dflash_fi.errors import NoGpu, StackMismatch

PINNED = {"vllm": "0.22.1", "flashinfer-python": "0.6.11.post2"}


def installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def stack_problems() -> list[str]:
    """One line per pinned package that is missing or at another version."""
    problems = []
    for dist, want in PINNED.items():
        have = installed_version(dist)
        if have != want:
            problems.append(
                f"{dist} is {have or 'not installed'}, but dflash-fi needs {dist}=={want}: "
                f"reinstall with `pip install -e .` from the repository root (see README)."
            )
    return problems


def require_pinned_stack() -> None:
    problems = stack_problems()
    if problems:
        raise StackMismatch("\n".join(problems))


@dataclass(frozen=True)
class Gpu:
    name: str
    capability: tuple[int, int]

    @property
    def sm(self) -> str:
        from dflash_fi.vocabulary import sm

        return sm(self.capability)


def cuda_gpu() -> Gpu | None:
    """The first CUDA GPU, or None. Imports torch, not vLLM."""
    import torch

    if not torch.cuda.is_available():
        return None
    return Gpu(torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))


def require_gpu(what: str) -> Gpu:
    gpu = cuda_gpu()
    if gpu is None:
        raise NoGpu(
            f"{what} needs a CUDA GPU and this machine has none. Run it on a GPU machine, "
            "or use the CPU parts (`dflash-fi reference`, `selector-matrix`, `routing`)."
        )
    return gpu


COMMIT_ENV = "DFLASH_FI_GIT_COMMIT"
REPO_ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS_DIR = REPO_ROOT / "artifacts"  # what commands write that is not committed (git-ignored)


def git_commit(repo: Path | None = None) -> str | None:
    """HEAD of the checkout this package runs from, with '+dirty' when it has local changes.

    A copy of the tree without .git (the GPU machine gets one) is named by DFLASH_FI_GIT_COMMIT instead.
    """
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]
    repo = repo or REPO_ROOT
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


@dataclass(frozen=True)
class StackReport:
    python: str
    vllm: str | None
    flashinfer: str | None
    torch: str | None
    cuda_runtime: str | None
    gpu: str | None
    compute_capability: str | None
    can_run: str

    def as_dict(self) -> dict:
        return asdict(self)


def stack_report() -> StackReport:
    import torch

    gpu = cuda_gpu()
    return StackReport(
        python=platform.python_version(),
        vllm=installed_version("vllm"),
        flashinfer=installed_version("flashinfer-python"),
        torch=torch.__version__,
        cuda_runtime=torch.version.cuda,
        gpu=gpu.name if gpu else None,
        compute_capability=gpu.sm if gpu else None,
        can_run=(
            "everything: CPU parts and GPU runs of DFlash in vLLM"
            if gpu
            else "CPU parts only (reference decoder, selector matrix, routing); GPU runs are skipped"
        ),
    )


def doctor(as_json: bool = False) -> int:
    report = stack_report()
    problems = stack_problems()
    if as_json:
        print(json.dumps({**report.as_dict(), "problems": problems}, indent=2))
    else:
        rows = [
            ("python", report.python),
            ("vllm", report.vllm or "not installed"),
            ("flashinfer-python", report.flashinfer or "not installed"),
            ("torch", report.torch),
            ("CUDA runtime (torch)", report.cuda_runtime or "none"),
            ("GPU", report.gpu or "no CUDA GPU"),
            ("compute capability", f"SM {report.compute_capability}" if report.compute_capability else "-"),
            ("can run here", report.can_run),
        ]
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            print(f"{key:<{width}}  {value}")
        for problem in problems:
            print(f"PROBLEM: {problem}")
    return 1 if problems else 0


def run_context(command: str | None = None) -> dict:
    """What every committed result carries about where it came from: versions, GPU, commit, command, time."""
    import shlex
    import sys
    import time

    report = stack_report()
    return {
        "versions": {"vllm": report.vllm, "flashinfer": report.flashinfer, "torch": report.torch,
                     "cuda": report.cuda_runtime, "python": report.python},
        "gpu": report.gpu,
        "compute_capability": report.compute_capability,
        "git_commit": git_commit(),
        "command": command or " ".join(shlex.quote(a) for a in sys.argv),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
