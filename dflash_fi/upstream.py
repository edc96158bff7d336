"""vLLM's own files in three releases: 0.22.1 (the lesson's), 0.24.0 (PR #43081 merged), 0.33.0 (today's).

0.22.1's are read from the installed vllm. The later ones are read from their wheels, by member name, never installed:
`wheel(version)` runs `pip download vllm==X --no-deps --only-binary=:all:` once (about 300 MB each) into
artifacts/upstream/ (git-ignored; DFLASH_FI_UPSTREAM_CACHE names another folder). Every file is checked against its
sha256 below, as step 0's flashinfer.py is, so a different file fails loudly instead of teaching something else.
Nothing here runs at import.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from dflash_fi.errors import PatchError, UpstreamUnavailable
from dflash_fi.stack import REPO_ROOT

LESSON, MERGED, TODAY = "0.22.1", "0.24.0", "0.33.0"
VERSIONS = (LESSON, MERGED, TODAY)
FLASHINFER = "vllm/v1/attention/backends/flashinfer.py"
CUDA = "vllm/platforms/cuda.py"
SELECTOR = "vllm/v1/attention/selector.py"
PROPOSER = "vllm/v1/spec_decode/llm_base_proposer.py"
SHA256 = {
    (LESSON, FLASHINFER): "05f7c09a0c28fd0b2ece6430fb2bd46643be62763ee539df2653364431d66dbd",
    (LESSON, CUDA): "911f5b3c66f4c6e173370d30a81af494f273b90e6832e4c6d1747e625c7f89e3",
    (LESSON, SELECTOR): "1a1249b4bfb7f114d9a6964bef0aa175f2f73caad514da6720a3becc26169809",
    (LESSON, PROPOSER): "31c4ac72f9615aa4e2d1932ce57ca0d07da8728ac65034e4fe72bffa85c4a1ae",
    (MERGED, FLASHINFER): "ce9071eade3d1a9c7dc9dd9f187212599e1c20058ffda901d6950b9dcde19913",
    (MERGED, CUDA): "d89827b5a063d81cb57f3c7255155e8a3fda111e537409a5c830de4b56a76b1b",
    (MERGED, SELECTOR): "4c555b51d39cc8bb9a2f0788d58d87810678970019a85bc8275844f4d7f1a761",
    (MERGED, PROPOSER): "9598b59bbb38ade0341685e8bfc2ff4d64d9f42c2cd0f3d1adec6eaefade6bb6",
    (TODAY, FLASHINFER): "5dbc8ee6bf006a1aedcc55a70877d008554e24344e50d6d9941550ad1ae67425",
    (TODAY, CUDA): "0cfa80cce99aae194689d822edef808e5c78454eec696fb1c2ded7d17dfe71bb",
    (TODAY, SELECTOR): "41ebb10143427827668a101a434fd59431960087ad9626dd76f69676990d2fb8",
    (TODAY, PROPOSER): "6e0420cc3910414a34aaebdc7c029b5befb4b7609c40df044d37bf8a68d3429d",
}
CACHE_ENV = "DFLASH_FI_UPSTREAM_CACHE"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or REPO_ROOT / "artifacts" / "upstream")


def download_command(version: str, into: Path) -> list[str]:
    # Few retries, short timeout: without PyPI this fails in seconds, not minutes.
    return [sys.executable, "-m", "pip", "download", f"vllm=={version}", "--no-deps", "--only-binary=:all:",
            "--retries", "1", "--timeout", "30", "--disable-pip-version-check", "-q", "-d", str(into)]


def _cached_wheel(version: str, folder: Path) -> Path | None:
    return next(iter(sorted(folder.glob(f"vllm-{version}-*.whl"))), None)


def wheel(version: str) -> Path:
    """vLLM `version`'s wheel in the cache, fetched from PyPI the first time."""
    if version not in VERSIONS[1:]:
        raise UpstreamUnavailable(f"no pinned vLLM wheel {version!r}: the lesson reads {', '.join(VERSIONS[1:])}")
    folder = cache_dir()
    if (found := _cached_wheel(version, folder)) is not None:
        return found
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".vllm-download-") as partial:  # no half a wheel left
        command = download_command(version, Path(partial))
        try:
            done = subprocess.run(command, capture_output=True, text=True)
            failed = done.returncode != 0 and ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
        except OSError as exc:
            failed = str(exc)
        if not failed and (downloaded := _cached_wheel(version, Path(partial))) is not None:
            folder.mkdir(exist_ok=True)
            found = folder / downloaded.name
            os.replace(downloaded, found)
    if failed or found is None:
        raise UpstreamUnavailable(
            f"vLLM {version}'s wheel could not be fetched from PyPI ({failed or 'no wheel written'}); "
            f"where PyPI is reachable run: pip download vllm=={version} --no-deps --only-binary=:all: -d {folder}")
    return found


def installed_file(path: str) -> Path:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise PatchError("vllm is not importable: install vllm==0.22.1 (see README).")
    return Path(spec.submodule_search_locations[0]).parent / path


def source(version: str, path: str) -> str:
    """The text of `path` (e.g. FLASHINFER) in vLLM `version`, checked against its pinned sha256."""
    if (version, path) not in SHA256:
        raise UpstreamUnavailable(f"{path} of vLLM {version} is not one of the files the lesson pins")
    if version == LESSON:
        data, where = installed_file(path).read_bytes(), str(installed_file(path))
    else:
        archive = wheel(version)
        try:
            with zipfile.ZipFile(archive) as zf:
                data = zf.read(path)
        except (zipfile.BadZipFile, KeyError) as exc:
            raise PatchError(f"{archive} is damaged or lacks {path} ({exc}): delete it to fetch it again") from exc
        where = f"{archive.name}:{path}"
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256[version, path]:
        raise PatchError(f"{where} is not vLLM {version}'s {path} (sha256 {digest[:12]}..., pinned "
                         f"{SHA256[version, path][:12]}...): delete it to fetch it again")
    return data.decode("utf-8")


def check_all() -> list[str]:
    """Every pinned file read (the wheels fetched first where they are missing) and checked, then one line each."""
    for version, path in sorted(SHA256):  # all before anything is said
        source(version, path)
    return [*(f"vllm {v} {p}: sha256 {SHA256[v, p][:12]}... as pinned" for v, p in sorted(SHA256)),
            f"wheels in {cache_dir()}"]
