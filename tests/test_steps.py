"""The steps are vLLM 0.22.1's flashinfer.py plus the PR's hunks, each step adding only its own."""

import importlib

import pytest

from dflash_fi import plugin
from dflash_fi.steps import (STEP_MODULES, UnknownStep, backend_module, check_step, hunk_diff, patched_source,
                             step_module)
from dflash_fi.steps.patching import Hunk, PatchError, apply_hunks, stock_source


def test_step_zero_is_vllms_own_module():
    import vllm.v1.attention.backends.flashinfer as stock

    assert backend_module(0) is stock
    assert patched_source(0) == stock_source()
    assert hunk_diff(0) == ""


@pytest.mark.parametrize("step", [1, 2, 3, 4])
def test_each_step_adds_only_its_own_hunks(step):
    previous, current = step_module(step - 1).HUNKS, step_module(step).HUNKS
    assert current[: len(previous)] == previous and len(current) > len(previous)
    diff = hunk_diff(step)
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    own = "".join(h.new for h in current[len(previous):])
    assert added and all(line in own for line in added)


def test_patched_modules_are_real_importable_modules():
    for step in (1, 2, 3, 4):
        module = importlib.import_module(f"dflash_fi.patched.step{step}")
        assert module.FlashInferBackend.get_name() == "FLASHINFER"
        assert module.FlashInferBackend.__module__ == f"dflash_fi.patched.step{step}"
        assert ("causal" in module.FlashInferMetadata.__dataclass_fields__) is (step >= 2)


def test_hunk_that_does_not_match_fails_loudly():
    with pytest.raises(PatchError, match="matches 0 places"):
        apply_hunks(stock_source(), (Hunk("absent", "no such line in vLLM\n", "x"),))


def test_unknown_step_is_refused():
    with pytest.raises(UnknownStep, match="choose one of 0, 1, 2, 3, 4"):
        check_step("5")
    assert sorted(STEP_MODULES) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("step, supported", [(0, False), (1, True), (2, True), (3, True), (4, True)])
def test_upstream_non_causal_selection_expectation(step, supported):
    """Port of upstream's expectation for FLASHINFER in the non-causal selection test: not supported -> supported."""
    from vllm.platforms.interface import DeviceCapability

    backend = backend_module(step).FlashInferBackend
    reasons = backend.validate_configuration(
        head_size=128, dtype=__import__("torch").bfloat16, kv_cache_dtype="auto", block_size=None,
        use_mla=False, has_sink=False, use_sparse=False, use_mm_prefix=False,
        use_per_head_quant_scales=False, device_capability=DeviceCapability(9, 0), attn_type="decoder",
        use_non_causal=True)
    assert backend.supports_non_causal() is supported
    assert ("non-causal attention not supported" in reasons) is (not supported)


@pytest.mark.parametrize("value, registered", [("", None), ("0", None), ("3", "dflash_fi.patched.step3.FlashInferBackend")])
def test_plugin_registers_the_selected_step(monkeypatch, value, registered):
    from vllm.v1.attention.backends.registry import _ATTN_OVERRIDES, AttentionBackendEnum

    monkeypatch.setenv(plugin.STEP_ENV, value)
    saved = _ATTN_OVERRIDES.pop(AttentionBackendEnum.FLASHINFER, None)
    try:
        plugin.register()
        assert _ATTN_OVERRIDES.get(AttentionBackendEnum.FLASHINFER) == registered
        assert AttentionBackendEnum.FLASHINFER.get_class().get_name() == "FLASHINFER"
    finally:
        _ATTN_OVERRIDES.pop(AttentionBackendEnum.FLASHINFER, None)
        if saved:
            _ATTN_OVERRIDES[AttentionBackendEnum.FLASHINFER] = saved


def test_plugin_refuses_an_unknown_step(monkeypatch):
    monkeypatch.setenv(plugin.STEP_ENV, "seven")
    with pytest.raises(UnknownStep):
        plugin.register()


def test_plugin_is_installed_as_a_vllm_general_plugin():
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert eps.get("dflash_fi") == "dflash_fi.plugin:register"
