"""vLLM's own log lines go to a log file under artifacts/logs/ (git-ignored), not to the terminal or a cell.

`send_vllm_logs_to(path)` reconfigures this process (vLLM, torch, FlashInfer and Python warnings) and, by
setting VLLM_LOGGING_CONFIG_PATH, every process vLLM or dflash-fi starts from it. The engine runner gives
each engine a log file of its own. `--verbose` on the command line skips all of this.
"""

from __future__ import annotations

import json
import logging
import logging.config
import os
import re
import time
from pathlib import Path

LOG_DIR = Path(__file__).resolve().parent.parent / "artifacts" / "logs"
# Loggers whose lines are vLLM's (or its stack's), not dflash-fi's.
STACK_LOGGERS = ("vllm", "torch", "flashinfer", "transformers", "triton", "py.warnings")


def new_log_path(name: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "run"
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    return LOG_DIR / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{slug}.log"


def logging_config(path: Path) -> dict:
    """A logging.config.dictConfig that sends vLLM's (and its stack's) loggers to `path`."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(levelname)s %(asctime)s %(name)s: %(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(path), "mode": "a",
                              "formatter": "plain", "encoding": "utf-8"}},
        "loggers": {name: {"handlers": ["file"], "level": "INFO", "propagate": False} for name in STACK_LOGGERS},
    }


def send_vllm_logs_to(path: Path) -> Path:
    """From now on, vLLM's log lines (here and in the processes started from here) are written to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    config = logging_config(path)
    config_path = path.with_suffix(".logging.json")
    config_path.write_text(json.dumps(config))
    os.environ["VLLM_CONFIGURE_LOGGING"] = "1"
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = str(config_path)
    import torch  # noqa: F401  (torch installs its own handlers at import: replace them now)

    for name in STACK_LOGGERS:
        logging.getLogger(name).handlers.clear()
    logging.config.dictConfig(config)
    logging.captureWarnings(True)
    return path


def quiet_vllm(name: str, verbose: bool = False) -> Path | None:
    """The CLI's and the notebooks' set-up: a fresh log file for `name`, unless `verbose`."""
    if verbose:
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # keep stdout for tables and --json
        return None
    return send_vllm_logs_to(new_log_path(name))


def relative(path: Path | None) -> str:
    """A log path as a reader at the repository root would type it."""
    if path is None:
        return "-"
    try:
        return str(Path(path).resolve().relative_to(LOG_DIR.parent.parent))
    except ValueError:
        return str(path)


def tail(path: Path, lines: int = 40) -> str:
    if not path or not Path(path).is_file():
        return ""
    return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
