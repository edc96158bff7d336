"""Run vLLM's real selector and metadata-builder decisions on a machine without a GPU.

vLLM decides per GPU: the platform object answers `get_device_capability()`, and many modules hold a
reference to that one object (`from vllm.platforms import current_platform`). `pretend_gpu(cap)` turns
that object into vLLM's own `CudaPlatform` reporting compute capability `cap` for the duration of a
`with` block, so every vLLM function that asks gets the same answer. Nothing else of vLLM is replaced.

The compiled extension modules cannot load without a CUDA driver (they link libcuda). Only when no
driver is present, each is replaced by a named, empty double: `vllm._C` (importing
`vllm.platforms.cuda` registers its ops; no selection or `build()` decision calls one) and the
FlashAttention extensions `_vllm_fa2_C`/`_vllm_fa3_C` (vLLM asks whether they import to decide which FA
versions exist; their kernels are never called). Which FA version a GPU supports is still vLLM's own
capability check: FA3 on SM 9.0 only, FA2 elsewhere.
"""

from __future__ import annotations

import ctypes.util
import sys
from contextlib import contextmanager
from types import ModuleType

from dflash_fi.vocabulary import GPU_NAMES


_EXTENSIONS_NEEDING_LIBCUDA = (
    "vllm._C",
    "vllm._C_stable_libtorch",
    "vllm.vllm_flash_attn._vllm_fa2_C",
    "vllm.vllm_flash_attn._vllm_fa3_C",
)


def _cuda_driver_present() -> bool:
    return ctypes.util.find_library("cuda") is not None


def cuda_platform_class():
    """vLLM's CudaPlatform class, importable on a machine without a CUDA driver too."""
    if not _cuda_driver_present():
        for name in _EXTENSIONS_NEEDING_LIBCUDA:
            if name not in sys.modules:
                double = ModuleType(name)
                double.__doc__ = "CPU double: vLLM's CUDA ops library cannot load without libcuda."
                sys.modules[name] = double
    from vllm.platforms.cuda import CudaPlatform

    return CudaPlatform


def _clear_platform_caches() -> None:
    from vllm.platforms import cuda
    from vllm.utils import flashinfer as fi_utils
    from vllm.utils import platform_utils
    from vllm.v1.attention import selector

    cuda._get_backend_priorities.cache_clear()
    platform_utils.is_pin_memory_available.cache_clear()
    selector._cached_get_attn_backend.cache_clear()
    fi_utils.supports_trtllm_attention.cache_clear()


@contextmanager
def pretend_gpu(capability: tuple[int, int], trtllm: bool = False):
    """vLLM sees a CUDA GPU of this compute capability. `trtllm=True`: and TRTLLM attention is available.

    vLLM enables TRTLLM attention on SM 10.x only, and only when it can fetch the TRTLLM-gen cubins;
    `trtllm=True` answers that question with yes, so Blackwell routing is visible on any machine.
    """
    import vllm.platforms as platforms
    from vllm.platforms.interface import DeviceCapability
    from vllm.utils import flashinfer as fi_utils
    from vllm.v1.attention.backends import utils as backend_utils

    cuda_platform = cuda_platform_class()
    major, minor = capability
    pretended = type(
        f"PretendedSM{major}{minor}CudaPlatform",
        (cuda_platform,),
        {
            "get_device_capability": classmethod(lambda cls, device_id=0: DeviceCapability(major, minor)),
            "get_device_name": classmethod(
                lambda cls, device_id=0: f"{GPU_NAMES.get(capability, 'a GPU')} (pretended)"),
            # Pinned host memory needs the CUDA driver; builders then use ordinary CPU tensors.
            "is_pin_memory_available": classmethod(lambda cls: cuda_platform.is_pin_memory_available()
                                                   if _cuda_driver_present() else False),
        },
    )
    platform = platforms.current_platform
    saved_class = platform.__class__
    saved_trtllm = fi_utils.supports_trtllm_attention
    # vLLM's selector sets the KV layout a backend requires (HND on SM 10.x) for the whole process.
    saved_layout = backend_utils._KV_CACHE_LAYOUT_OVERRIDE
    platform.__class__ = pretended
    if trtllm:
        fi_utils.supports_trtllm_attention = _trtllm_available
    _clear_platform_caches()
    _refresh_import_time_platform_branches()
    try:
        yield platform
    finally:
        platform.__class__ = saved_class
        fi_utils.supports_trtllm_attention = saved_trtllm
        backend_utils.set_kv_cache_layout(saved_layout)
        _clear_platform_caches()
        _refresh_import_time_platform_branches()


def _refresh_import_time_platform_branches() -> None:
    """Re-run the module-level code of vLLM that branches on the platform when first imported.

    fa_utils picks its FlashAttention functions by platform: imported earlier without a (pretended) GPU, it
    lacks them, and every backend importing them would fail to import. flash_attn sets its builder's
    CUDA-graph support (ALWAYS with FA3, UNIFORM_BATCH with FA2) by the platform at import.
    """
    import importlib

    fa_utils = sys.modules.get("vllm.v1.attention.backends.fa_utils")
    if fa_utils is not None and not hasattr(fa_utils, "flash_attn_varlen_func"):
        importlib.reload(fa_utils)
    flash_attn = sys.modules.get("vllm.v1.attention.backends.flash_attn")
    if flash_attn is not None:
        importlib.reload(flash_attn)


def _trtllm_available() -> bool:
    return True


_trtllm_available.cache_clear = lambda: None  # shaped like the functools.cache it stands in for
