"""The later vLLMs' files: fetched once, each checked against its sha256, a clear line when they cannot be had."""

import os
import subprocess
import sys

import pytest

from dflash_fi import upstream
from dflash_fi.errors import PatchError, UpstreamUnavailable


@pytest.fixture
def wheels_if_needed(request):
    if request.node.callspec.params["version"] != upstream.LESSON:  # 0.22.1's files are installed
        request.getfixturevalue("upstream_wheels")


@pytest.mark.parametrize("version, path", sorted(upstream.SHA256))
def test_every_pinned_file_reads_and_matches_its_sha256(wheels_if_needed, version, path):
    assert upstream.source(version, path).startswith("# SPDX-License-Identifier")


@pytest.mark.parametrize("version", [upstream.LESSON, upstream.TODAY])
def test_a_file_other_than_the_pinned_one_is_refused(wheels_if_needed, monkeypatch, version):
    monkeypatch.setitem(upstream.SHA256, (version, upstream.FLASHINFER), "0" * 64)
    with pytest.raises(PatchError, match=f"is not vLLM {version}'s"):
        upstream.source(version, upstream.FLASHINFER)


def test_without_pypi_the_fetch_fails_in_one_line_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(upstream.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens there
    monkeypatch.setenv("PIP_NO_CONFIG", "1")
    with pytest.raises(UpstreamUnavailable) as caught:
        upstream.source(upstream.MERGED, upstream.FLASHINFER)
    message = str(caught.value)
    assert "\n" not in message and "vLLM 0.24.0's wheel could not be fetched" in message
    assert not list((tmp_path / "cache").glob("*.whl"))


def test_the_cli_turns_it_into_one_line_and_exit_2(tmp_path):
    env = {**os.environ, upstream.CACHE_ENV: str(tmp_path), "PIP_INDEX_URL": "http://127.0.0.1:9/simple"}
    done = subprocess.run([sys.executable, "-m", "dflash_fi.cli", "upstream"], capture_output=True, text=True, env=env)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
