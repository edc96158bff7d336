"""The vLLM plugin: DFLASH_FI_STEP decides what FLASHINFER is, in every process vLLM starts."""

import pytest

from dflash_fi import plugin
from dflash_fi.errors import UnknownStep


@pytest.fixture
def no_override():
    from vllm.v1.attention.backends.registry import _ATTN_OVERRIDES, AttentionBackendEnum

    saved = _ATTN_OVERRIDES.pop(AttentionBackendEnum.FLASHINFER, None)
    yield _ATTN_OVERRIDES
    _ATTN_OVERRIDES.pop(AttentionBackendEnum.FLASHINFER, None)
    if saved:
        _ATTN_OVERRIDES[AttentionBackendEnum.FLASHINFER] = saved


@pytest.mark.parametrize("value, registered", [("", None), ("0", None), ("3", "dflash_fi.patched.step3.FlashInferBackend"),
                                               ("6", "dflash_fi.patched.step6.FlashInferBackend")])
def test_plugin_registers_the_selected_step(monkeypatch, no_override, value, registered):
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    monkeypatch.setenv(plugin.STEP_ENV, value)
    plugin.register()
    assert no_override.get(AttentionBackendEnum.FLASHINFER) == registered
    assert AttentionBackendEnum.FLASHINFER.get_class().get_name() == "FLASHINFER"


def test_plugin_refuses_an_unknown_step(monkeypatch, no_override):
    monkeypatch.setenv(plugin.STEP_ENV, "seven")
    with pytest.raises(UnknownStep):
        plugin.register()


def test_using_step_restores_what_was_there(no_override):
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    plugin.use_step(2)
    with plugin.using_step(5):
        assert AttentionBackendEnum.FLASHINFER.get_path() == "dflash_fi.patched.step5.FlashInferBackend"
        with plugin.using_step(0):
            assert AttentionBackendEnum.FLASHINFER.get_path() == "vllm.v1.attention.backends.flashinfer.FlashInferBackend"
    assert AttentionBackendEnum.FLASHINFER.get_path() == "dflash_fi.patched.step2.FlashInferBackend"


def test_plugin_is_installed_as_a_vllm_general_plugin():
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert eps.get("dflash_fi") == "dflash_fi.plugin:register"
