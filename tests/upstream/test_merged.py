"""Step 4 is what vLLM merged: vLLM 0.24.0's own flashinfer.py decides every build as step 4 does, but where a named
difference says why not."""

import collections

import pytest

from dflash_fi.lab.merged import CONFIGS, Difference, batches, compare, difference

pytestmark = pytest.mark.step4
SEEDS = 8


@pytest.fixture(scope="module")
def builds(upstream_wheels):
    return compare(seeds=SEEDS)


def test_every_configuration_and_batch_was_decided_by_both(builds):
    assert len(builds) == len(CONFIGS) * len(batches(SEEDS))
    assert {b.config for b in builds} == set(CONFIGS)
    assert all(b.step4.refusal is None for b in builds if b.config.kv_cache_dtype != "nvfp4" and b.batch.causal)


def test_every_difference_is_a_named_one_and_each_named_one_occurs(builds):
    found = collections.Counter(difference(b) for b in builds)
    assert Difference.UNEXPLAINED not in found, [b for b in builds if difference(b) is Difference.UNEXPLAINED][:3]
    assert set(found) == {None, Difference.NVFP4_NEEDS_SM100F, Difference.NVFP4_REFUSED_LATER}


def test_outside_nvfp4_every_decision_is_the_same(builds):
    same = [b for b in builds if b.config.kv_cache_dtype != "nvfp4"]
    assert same and all(b.step4 == b.merged for b in same)
    drafts = [b for b in same if not b.batch.causal and not b.config.dcp]
    assert drafts and all(b.merged.plan_causal == (False,) and b.merged.dflash_check for b in drafts)
