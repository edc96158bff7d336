"""The places the lesson taught, read from three releases, and what upstream shipped against this project's steps."""

import pytest

from dflash_fi.lab import today
from dflash_fi.upstream import FLASHINFER, LESSON, MERGED, TODAY
from dflash_fi.vocabulary import BLACKWELL, HOPPER, RTX_4090


@pytest.mark.parametrize("capability", [RTX_4090, HOPPER, BLACKWELL])
def test_the_isolated_priority_function_agrees_with_vllm_0_22_1s_own(capability):
    from dflash_fi.lab.pretend_gpu import cuda_platform_class

    cuda_platform_class()  # vllm.platforms.cuda, importable without a driver
    from vllm.platforms.cuda import _get_backend_priorities
    from vllm.platforms.interface import DeviceCapability

    real = tuple(b.name for b in _get_backend_priorities(False, DeviceCapability(*capability)))
    assert today.priorities(LESSON, capability) == real


def test_0_33_0_puts_flash_attn_first_for_a_non_causal_layer_on_blackwell_only(upstream_wheels):
    changed = {cap for cap in (RTX_4090, HOPPER, BLACKWELL)
               if today.priorities(TODAY, cap, True) != today.priorities(TODAY, cap, False)}
    assert changed == {BLACKWELL} and today.priorities(TODAY, BLACKWELL, True)[0] == "FLASH_ATTN"


@pytest.mark.parametrize("row", today.UPSTREAM, ids=lambda r: f"step{r.step}-{r.ours[:24]}")
def test_each_claim_about_upstream_is_what_its_code_shows(upstream_wheels, row):
    assert row.since() == row.claimed


def test_a_place_that_changed_has_its_reason_and_one_that_did_not_has_none(upstream_wheels):
    for place in today.PLACES:
        for change in today.changes(place):
            assert bool(change.diff) == bool(change.why), (place.title, change.before)
    assert today.definition(LESSON, FLASHINFER, "FlashInferBackend.supports_non_causal") is None
    assert today.definition(MERGED, FLASHINFER, "FlashInferBackend.supports_non_causal") is not None
