"""`dflash-fi run`: one vLLM engine, in its own process, for one configuration; its record.

The parent never imports vLLM's engine: it starts `python -m dflash_fi.engine_child` with the step in
DFLASH_FI_STEP (read by the plugin in every vLLM process) and reads back one JSON result, so a crash,
a hang or CUDA state of one run cannot leak into the next.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dflash_fi.evaluate import DEFAULT_DRAFTER, DEFAULT_PROMPTS, DEFAULT_TARGET

DRAFT_BACKENDS = ("FLASHINFER", "FLASH_ATTN")
KV_CACHE_DTYPES = ("auto", "fp8")


@dataclass
class RunSpec:
    label: str
    step: int = 0
    draft_backend: str = "FLASHINFER"
    kv_cache_dtype: str = "auto"
    speculative: bool = True
    target: str = str(DEFAULT_TARGET)
    drafter: str = str(DEFAULT_DRAFTER)
    prompts_file: str = str(DEFAULT_PROMPTS)
    num_prompts: int = 32
    max_new_tokens: int = 128
    enforce_eager: bool = True
    num_speculative_tokens: int = 15
    gpu_memory_utilization: float = 0.4  # tiny embedded pair; raise it for real models
    # Pins the KV cache to this many blocks (vLLM's num_gpu_blocks_override); None: sized from free memory.
    num_gpu_blocks: int | None = None
    timeout_s: int = 420
    extra: dict = field(default_factory=dict)

    def validate(self) -> "RunSpec":
        from dflash_fi.steps import check_step

        self.step = check_step(self.step)
        if self.draft_backend not in DRAFT_BACKENDS:
            raise ValueError(f"draft backend {self.draft_backend!r}: choose one of {DRAFT_BACKENDS}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"KV cache dtype {self.kv_cache_dtype!r}: choose one of {KV_CACHE_DTYPES}")
        for name in ("target", "drafter"):
            value = getattr(self, name)
            if Path(value).exists() and not (Path(value) / "config.json").is_file():
                raise FileNotFoundError(f"{name} {value} has no config.json: not an HF model directory")
            looks_local = value.startswith(("/", ".", "~")) or value.count("/") != 1
            if not Path(value).exists() and looks_local:
                raise FileNotFoundError(
                    f"{name} {value!r} is neither an existing model directory nor a hub id (owner/name)"
                )
        if self.max_new_tokens < 1 or self.num_prompts < 1:
            raise ValueError("--prompts and --max-new-tokens must be at least 1")
        if self.num_gpu_blocks is not None and self.num_gpu_blocks < 1:
            raise ValueError("--num-gpu-blocks must be at least 1 (or left out: sized from free memory)")
        return self


def model_fingerprint(path: str) -> dict:
    """sha256 of a local model's weight files, so a record names the exact weights it ran."""
    root = Path(path)
    if not root.is_dir():
        return {"id": path}
    digests = {}
    for f in sorted(root.glob("*.safetensors")):
        digests[f.name] = hashlib.sha256(f.read_bytes()).hexdigest()
    return {"path": str(root), "weights_sha256": digests}


def run(spec: RunSpec, command: str | None = None) -> dict:
    """Run one engine in a child process and return its record (never raises for a failed run)."""
    from dflash_fi.plugin import STEP_ENV
    from dflash_fi.stack import git_commit, stack_report

    spec.validate()
    with tempfile.TemporaryDirectory(prefix="dflash-fi-run-") as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_path.write_text(json.dumps(asdict(spec)))
        env = dict(os.environ)
        env[STEP_ENV] = str(spec.step)
        # Engine core in this child process: errors keep their type and message.
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        env.setdefault("HF_HUB_OFFLINE", "1")
        child = [sys.executable, "-m", "dflash_fi.engine_child", str(spec_path), str(result_path)]
        started = time.time()
        try:
            proc = subprocess.run(child, env=env, capture_output=True, text=True, timeout=spec.timeout_s)
            rc, log = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, log = None, f"timed out after {spec.timeout_s} s\n{(exc.stdout or '')}{(exc.stderr or '')}"
        if result_path.exists():
            result = json.loads(result_path.read_text())
        else:
            result = {"ok": False, "error": {
                "type": "ChildProcessError", "phase": "process",
                "message": f"engine process exited with {rc} and no result; log tail:\n{log[-3000:]}",
            }}
    report = stack_report()
    result.update({
        "label": spec.label,
        "spec": asdict(spec),
        "models": {"target": model_fingerprint(spec.target), "drafter": model_fingerprint(spec.drafter)},
        "wall_s": round(time.time() - started, 2),
        "log_tail": log[-1500:],
        "versions": {"vllm": report.vllm, "flashinfer": report.flashinfer, "torch": report.torch,
                     "cuda": report.cuda_runtime, "python": report.python},
        "gpu": report.gpu,
        "compute_capability": report.compute_capability,
        "git_commit": git_commit(),
        "command": command or " ".join(shlex.quote(a) for a in sys.argv),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    })
    return result
