"""The excerpts of FlashInfer's source that notebooks show resolve in the pinned flashinfer-python: each block found,
each marked line shown (a FlashInfer whose source moved fails here, not in a notebook)."""

import re
from pathlib import Path

import pytest

from dflash_fi.lab import flashinfer_source

EXCERPTS = {name: value for name, value in vars(flashinfer_source).items() if name.endswith("_EXCERPT")}


@pytest.mark.parametrize("name", sorted(EXCERPTS))
def test_each_excerpt_shows_its_blocks_and_marks(name):
    import flashinfer

    from dflash_fi.figures.listings import file_excerpt

    path, start, blocks, mark = EXCERPTS[name]
    listing = file_excerpt(Path(flashinfer.__file__).parent / "data" / "include" / path, start, blocks, mark, "cpp")
    lines = listing.text.splitlines()
    assert re.search(start, lines[1])  # under the file's path
    for first, _ in blocks:
        assert any(re.search(first, line) for line in lines), first
    for m in mark:
        assert any(re.search(m, line) for line in lines), m
