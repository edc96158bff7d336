"""The steps are vLLM 0.22.1's flashinfer.py plus hunks, each step adding only its own."""

import importlib

import pytest

from dflash_fi.errors import PatchError, UnknownStep
from dflash_fi.steps import (FINAL_STEP, STEPS, backend_module, check_step, hunk_diff, patched_source, step_module,
                             step_title)
from dflash_fi.steps.patching import Hunk, apply_hunks, stock_source

LATER_STEPS = [s for s in STEPS if s > 0]


@pytest.mark.step0
def test_step_zero_is_vllms_own_module():
    import vllm.v1.attention.backends.flashinfer as stock

    assert backend_module(0) is stock
    assert patched_source(0) == stock_source()
    assert hunk_diff(0) == ""


@pytest.mark.parametrize("step", LATER_STEPS)
def test_each_step_adds_only_its_own_hunks(step):
    previous, current = step_module(step - 1).HUNKS, step_module(step).HUNKS
    assert current[: len(previous)] == previous and len(current) > len(previous)
    diff = hunk_diff(step)
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    own = "".join(h.new for h in current[len(previous):])
    assert added and all(line in own for line in added)


@pytest.mark.parametrize("step", LATER_STEPS)
def test_patched_modules_are_real_importable_modules(step):
    module = importlib.import_module(f"dflash_fi.patched.step{step}")
    assert module.FlashInferBackend.get_name() == "FLASHINFER"
    assert module.FlashInferBackend.__module__ == f"dflash_fi.patched.step{step}"
    assert ("causal" in module.FlashInferMetadata.__dataclass_fields__) is (step >= 2)
    assert step_title(step).startswith(f"Step {step} - ")


@pytest.mark.step5
def test_step5_draft_kernel_is_fa2():
    assert backend_module(5).NON_CAUSAL_PREFILL_BACKEND == "fa2"
    assert not hasattr(backend_module(4), "NON_CAUSAL_PREFILL_BACKEND")


def test_hunk_that_does_not_match_fails_loudly():
    with pytest.raises(PatchError, match="matches 0 places"):
        apply_hunks(stock_source(), (Hunk("absent", "no such line in vLLM\n", "x"),))


def test_unknown_step_is_refused():
    with pytest.raises(UnknownStep, match=f"choose one of {', '.join(map(str, STEPS))}"):
        check_step(str(FINAL_STEP + 1))
    with pytest.raises(UnknownStep):
        check_step("seven")
    assert [check_step(str(step)) for step in STEPS] == list(STEPS)  # every step, as a user types it


@pytest.mark.parametrize("step", STEPS)
def test_upstream_non_causal_selection_expectation(step):
    """Port of upstream's expectation for FLASHINFER in the non-causal selection test: not supported -> supported."""
    import torch
    from vllm.platforms.interface import DeviceCapability

    backend = backend_module(step).FlashInferBackend

    def reasons(non_causal):
        return backend.validate_configuration(
            head_size=128, dtype=torch.bfloat16, kv_cache_dtype="auto", block_size=None,
            use_mla=False, has_sink=False, use_sparse=False, use_mm_prefix=False,
            use_per_head_quant_scales=False, device_capability=DeviceCapability(9, 0), attn_type="decoder",
            use_non_causal=non_causal)
    supported = step >= 1
    assert backend.supports_non_causal() is supported
    assert reasons(False) == [] and (reasons(True) == []) is supported  # refused for non-causal attention only



@pytest.mark.parametrize("step", LATER_STEPS)
def test_each_hunk_stands_on_its_own_and_defines_before_it_is_used(step):
    """A step reads in order, as PR #43081's four do: no hunk rewrites text another hunk of its step wrote (each one's
    old text is the previous step's), and a method or kernel a hunk defines comes no later than the first hunk of
    the step that uses it."""
    import re

    previous, own = patched_source(step - 1), step_module(step).HUNKS[len(step_module(step - 1).HUNKS):]
    for number, hunk in enumerate(own, 1):
        assert previous.count(hunk.old) == 1, f"step {step} hunk {number} ({hunk.why}) edits its own step's text"
    defined = {name: number for number, hunk in enumerate(own, 1)
               for name in re.findall(r"^\s*def (\w+)\(", hunk.new, re.M) if f"def {name}(" not in previous}
    for number, hunk in enumerate(own, 1):
        for name in set(re.findall(r"\b(_\w+)(?:\(|\[)", hunk.new)) & defined.keys():
            assert defined[name] <= number, (
                f"step {step} hunk {number} ({hunk.why}) uses {name}, which its hunk {defined[name]} defines later")
