"""README.md's generated blocks hold exactly what the committed records and results files render to."""

import re

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
    paths = set(re.findall(r"\b((?:runs|docs|notebooks|dflash_fi|tests)/[\w./-]+\.(?:txt|json|svg|py|md|ipynb))", text))
    assert len(paths) >= 10
    missing = [p for p in sorted(paths) if "*" not in p and not (README.parent / p).is_file()]
    assert missing == []
