"""README.md's generated blocks hold exactly what the committed records and results files render to."""

import pytest

from dflash_fi.readme import README, blocks, pattern


@pytest.mark.parametrize("name", ["walkthrough-table", "mixed-table", "performance-targets", "kernel-summary",
                                  "e2e-summary", "draft-overhead"])
def test_readme_block_is_generated_not_typed(name):
    block = pattern(name).search(README.read_text())
    assert block, f"README.md lost its <!-- {name} --> block"
    assert block.group(2) == blocks()[name], "stale: run `dflash-fi report --update-readme`"


def test_readme_links_what_exists():
    text = README.read_text()
    for path in ("runs/nvidia-h200.walkthrough-20261130T162949-01f210.txt", "docs/figures/bench-kernels.svg",
                 "docs/figures/bench-e2e.svg", "runs/nvidia-h200.notebooks-78addc4.txt",
                 "runs/nvidia-h200.gpu-tests-78addc4.txt", "runs/nvidia-h200.engine-variation.json"):
        assert path in text and (README.parent / path).is_file(), path
