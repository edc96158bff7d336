"""vLLM 0.24.0's and 0.33.0's files come from their wheels, fetched from PyPI once (dflash_fi.upstream). Without PyPI
the tests that read them are skipped with the reason; under CI (CI=true, where PyPI is reachable) they fail instead."""

import os

import pytest


@pytest.fixture(scope="session")
def upstream_wheels():
    from dflash_fi.errors import UpstreamUnavailable
    from dflash_fi.upstream import FLASHINFER, MERGED, TODAY, source

    try:
        for version in (MERGED, TODAY):
            source(version, FLASHINFER)
    except UpstreamUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must reach PyPI: {exc}")
        pytest.skip(str(exc))
