"""`dflash-fi run`: one vLLM engine, in its own process, for one RunSpec; its record.

The parent never imports vLLM's engine: it starts `python -m dflash_fi.engine.child` with the step in
DFLASH_FI_STEP (read by the plugin in every vLLM process) and reads back one JSON result, so a crash,
a hang or the CUDA state of one run cannot leak into the next. Everything the engine prints (vLLM's log
lines included) goes to the run's own log file under artifacts/logs/, which the record names.

`run(spec)` waits for the engine to finish. `EngineProcess(spec, address=...)` starts one that, once up,
serves benchmark rounds (`dflash_fi.engine.server` takes several engines in turns).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dflash_fi.engine.identity import label, slug
from dflash_fi.engine.records import EngineRecord
from dflash_fi.engine.spec import RunSpec
from dflash_fi.logs import logging_config, new_log_path, relative, tail


def model_fingerprint(path: str) -> dict:
    """sha256 of a local model's weight files, so a record names the exact weights it ran."""
    root = Path(path)
    if not root.is_dir():
        return {"id": path}
    digests = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(root.glob("*.safetensors"))}
    return {"path": str(root), "weights_sha256": digests}


class EngineProcess:
    """One engine's process: started at construction, its record from `finish()` (never raises for a failed run).

    gpu: the CUDA device index for this engine (CUDA_VISIBLE_DEVICES); None: whatever the parent sees.
    address: where the engine connects to serve benchmark rounds (a `multiprocessing.connection` address).
    module: the engine process's module (the CPU tests run `dflash_fi.lab.engine_double` instead).
    env: more environment for this process (a double's behaviour, in the CPU tests).
    """

    def __init__(self, spec: RunSpec, command: str | None = None, gpu: str | None = None,
                 log_path: Path | None = None, address: str | None = None, module: str = "dflash_fi.engine.child",
                 env: dict | None = None):
        from dflash_fi.plugin import STEP_ENV

        self.spec, self.command = spec.validate(), command
        self.log_path = Path(log_path or new_log_path(slug(spec.run)))
        self._tmp = tempfile.TemporaryDirectory(prefix="dflash-fi-run-")
        tmp = Path(self._tmp.name)
        spec_path, self.result_path = tmp / "spec.json", tmp / "result.json"
        spec_path.write_text(json.dumps(self.spec.to_json()))
        config_path = tmp / "logging.json"
        config_path.write_text(json.dumps(logging_config(self.log_path)))
        child_env = {**os.environ, **(env or {})}
        child_env[STEP_ENV] = str(self.spec.run.step)
        child_env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core in the child: errors keep their type
        child_env["VLLM_CONFIGURE_LOGGING"], child_env["VLLM_LOGGING_CONFIG_PATH"] = "1", str(config_path)
        child_env["DFLASH_FI_LOG_FILE"] = str(self.log_path)
        child_env.setdefault("HF_HUB_OFFLINE", "1")
        if gpu is not None:
            child_env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        child = [sys.executable, "-m", module, str(spec_path), str(self.result_path)]
        child += [address] if address else []
        self.started = time.time()
        self._log = open(self.log_path, "a", encoding="utf-8")
        self._log.write(f"== dflash-fi run {label(self.spec.run)!r}: {' '.join(child)}\n")
        self._log.flush()
        self.process = subprocess.Popen(child, env=child_env, stdout=self._log, stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.process.poll() is None

    def finish(self, timeout_s: float | None = None) -> EngineRecord:
        waited = timeout_s if timeout_s is not None else self.spec.timeout_s
        try:
            rc = self.process.wait(timeout=waited)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            rc = None
            self._log.write(f"\n== timed out after {waited} s\n")
        self._log.close()
        if self.result_path.exists():
            result = json.loads(self.result_path.read_text())
        else:
            why = f"timed out after {waited} s" if rc is None else f"exited with {rc}"
            result = {"ok": False, "failure": {"type": "ChildProcessError", "phase": "process",
                                               "message": f"engine process {why} and no result; log tail:\n"
                                                          f"{tail(self.log_path, 30)}"}}
        self._tmp.cleanup()
        return record_of(self.spec, result, self.started, self.log_path, self.command)


def record_of(spec: RunSpec, result: dict, started: float, log_path: Path, command: str | None) -> EngineRecord:
    """The engine's result with its spec and where it came from (versions, GPU, commit, command, log)."""
    from dflash_fi.stack import run_context

    context = run_context(command)
    provenance = {**{k: context[k] for k in ("gpu", "compute_capability", "versions", "git_commit", "command",
                                              "finished_at")},
                  "wall_s": round(time.time() - started, 2), "log_file": relative(log_path),
                  "log_tail": tail(log_path, 15)[-1500:],
                  "models": {"target": model_fingerprint(spec.target), "drafter": model_fingerprint(spec.drafter)}}
    return EngineRecord.from_json({**result, "schema": 2, "spec": spec.to_json(), "provenance": provenance})


def run(spec: RunSpec, command: str | None = None, gpu: str | None = None, log_path: Path | None = None) -> EngineRecord:
    """Run one engine in a child process and return its record (never raises for a failed run)."""
    return EngineProcess(spec, command, gpu, log_path).finish()
