"""Notebook 00 names the glossary words the PR's notebooks use: found in their sources, not typed in."""

import re

from dflash_fi.lab.glossary import glossary, words_of
from dflash_fi.stack import REPO_ROOT
from dflash_fi.steps import PR_43081_STEPS


def test_words_of_the_prs_notebooks_are_those_their_sources_use():
    terms = glossary()
    words = words_of(PR_43081_STEPS, terms)
    assert words.notebooks == sorted(words.notebooks) and words.notebooks[0].startswith("01")
    text = "\n".join((REPO_ROOT / "notebooks" / f"{nb}.py").read_text() for nb in words.notebooks)
    for term in terms:
        found = any(re.search(p, text) for p in term.patterns)
        assert (term in words.used) == found, term.term
    assert words.basic and not any(t.patterns for t in words.basic) and "tau" in [t.term for t in words.used]
    # a rule that could fail: notebook 00 alone uses fewer of them
    assert len(words_of((0,), terms).used) < len(words.used)


def test_the_pr_numbers_word_names_every_pr_the_upstream_claims_cite():
    from dflash_fi.upstream import CLAIMS

    term = glossary()[-1]
    cited = {re.match(r"#\d+", pr)[0] for c in CLAIMS for pr in c.prs}
    assert term.term.startswith("vLLM PR numbers") and cited == set(re.findall(r"#\d+", term.term))
    assert "PR #43081 is the change this tutorial rebuilds (steps 1-4)" in term.definition
    assert all(re.search(p, "see #48167") for p in term.patterns) and not re.search(term.patterns[0], "PR #43081")
