"""`dflash-fi selector-matrix`: what vLLM's attention selector does, per step, GPU and role.

vLLM picks an attention backend per layer: `get_attn_backend` -> `CudaPlatform.get_attn_backend_cls`,
which validates the requested backend (`AttentionBackend.validate_configuration`) or walks the platform's
priority list for the GPU's compute capability and takes the first backend with no reason to refuse.
The target's layers ask as causal layers; DFlash's draft layers ask with `use_non_causal=True`
(`DFlashProposer._create_draft_vllm_config`). Every answer here comes from vLLM 0.22.1's own
`CudaPlatform` under `pretend_gpu`.
"""

from __future__ import annotations

import json
from types import ModuleType

import torch

from dflash_fi.lab.pretend_gpu import pretend_gpu
from dflash_fi.lab.routes import Raised
from dflash_fi.models import DEFAULT_TARGET
from dflash_fi.plugin import using_step
from dflash_fi.vocabulary import CAPABILITIES, KV_CACHE_DTYPES, sm

ROLES = (("target", False), ("draft", True))  # (role, use_non_causal)


def head_size() -> int:
    """The embedded pair's head_dim (the FlashInfer kernels the GPU bundle carries are built for it)."""
    return json.loads((DEFAULT_TARGET / "config.json").read_text())["head_dim"]


def _selector_config(kv_cache_dtype: str, non_causal: bool):
    from vllm.v1.attention.selector import AttentionSelectorConfig

    return AttentionSelectorConfig(head_size=head_size(), dtype=torch.bfloat16, kv_cache_dtype=kv_cache_dtype,
                                   block_size=None, use_non_causal=non_causal)


def _backend_name(path: str) -> str:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    for backend in AttentionBackendEnum:
        try:
            if backend.get_path() == path:
                return backend.name
        except ValueError:
            continue
    return path


def _select(platform, config) -> tuple[str | None, ValueError | None]:
    """What vLLM picks with no backend asked for, or the ValueError it raises (no backend accepts)."""
    try:
        return _backend_name(platform.get_attn_backend_cls(None, config)), None
    except ValueError as exc:
        return None, exc


def _reasons(platform, backend, config) -> list[str]:
    """Why `backend` refuses `config`, as vLLM's selector asks it (`get_attn_backend_cls`): its
    `validate_configuration` reasons; [] accepts."""
    try:
        backend_class = backend.get_class()
    except ImportError:
        return ["ImportError"]  # as vLLM's selector says it
    return backend_class.validate_configuration(device_capability=platform.get_device_capability(),
                                                **config._asdict())


def selector_matrix(steps=None, capabilities=CAPABILITIES, kv_cache_dtypes=KV_CACHE_DTYPES,
                    backend: ModuleType | None = None) -> list[dict]:
    """Per step x GPU x KV dtype x role: the backend picked with none requested (`auto_error`: the ValueError vLLM
    raised where none accepts), and FLASHINFER's reasons to refuse if it is requested ([]: accepted). backend: a
    FlashInfer backend module standing for the steps' own (a reader's exercise)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    from dflash_fi.steps import STEPS

    rows = []
    for step in STEPS if steps is None else steps:
        with using_step(step, backend):
            for capability in capabilities:
                with pretend_gpu(capability) as platform:
                    for kv in kv_cache_dtypes:
                        for role, non_causal in ROLES:
                            config = _selector_config(kv, non_causal)
                            auto, auto_error = _select(platform, config)
                            rows.append({
                                "step": step, "capability": sm(capability), "kv_cache_dtype": kv, "role": role,
                                "auto_backend": auto, "auto_error": auto_error,
                                "flashinfer_reasons": _reasons(platform, AttentionBackendEnum.FLASHINFER, config),
                            })
    return rows


def backend_verdicts(step: int, capability: tuple[int, int], kv_cache_dtype: str, role: str,
                     backend: ModuleType | None = None) -> list[dict]:
    """The platform's priority list for this GPU, and each backend's verdict: accepted, or its reasons. backend: as
    for `selector_matrix`."""
    from vllm.platforms.interface import DeviceCapability

    non_causal = dict(ROLES)[role]
    with using_step(step, backend), pretend_gpu(capability) as platform:
        valid, invalid = platform.get_valid_backends(DeviceCapability(*capability),
                                                     _selector_config(kv_cache_dtype, non_causal))
    rows = [{"priority": p, "backend": b.name, "reasons": []} for b, p in valid]
    rows += [{"priority": p, "backend": b.name, "reasons": reasons} for b, (p, reasons) in invalid.items()]
    return sorted(rows, key=lambda r: r["priority"])


def render_matrix(rows: list[dict]) -> str:
    lines = ["| step | SM | KV cache | role | auto-selected | FLASHINFER requested |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        auto = r["auto_backend"] or "ERROR: no valid backend"
        fi = f"ERROR: {r['flashinfer_reasons']}" if r["flashinfer_reasons"] else "accepted"
        lines.append(f"| {r['step']} | {r['capability']} | {r['kv_cache_dtype']} | {r['role']} | {auto} | {fi} |")
    return "\n".join(lines)


def non_causal_support(step: int) -> dict[str, bool | Raised]:
    """Per attention backend that is not MLA, at `step`: its class's `supports_non_causal()`, or what loading the
    class raised on this machine."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    support = {}
    with using_step(step), pretend_gpu((9, 0)):
        for backend in AttentionBackendEnum:
            if "MLA" in backend.name or backend is AttentionBackendEnum.CUSTOM:  # vLLM's own naming of MLA backends
                continue
            try:
                support[backend.name] = backend.get_class().supports_non_causal()
            except (ImportError, ValueError, AttributeError) as exc:
                support[backend.name] = Raised(exc)
    return support


def feature_table(step: int) -> str:
    """The 'Non-Causal' column of vLLM's attention-backend feature table, from the live classes."""
    lines = ["| Backend | Non-Causal |", "|---|---|"]
    for name, supported in non_causal_support(step).items():
        mark = f"n/a ({supported.cls.__name__} on this machine)" if isinstance(supported, Raised) else (
            "✅" if supported else "❌")
        lines.append(f"| `{name}` | {mark} |")
    return "\n".join(lines)


def priority_lists(capabilities=CAPABILITIES, kv_cache_dtypes=KV_CACHE_DTYPES) -> dict[str, list[str]]:
    """vLLM's own priority list per GPU (`vllm.platforms.cuda._get_backend_priorities`, the function its platform
    walks), for attention that is not MLA, as vLLM 0.22.1 orders it. Raises if the list differs between KV dtypes."""
    from vllm.platforms.interface import DeviceCapability

    lists = {}
    for capability in capabilities:
        with pretend_gpu(capability):
            from vllm.platforms import cuda  # importable once pretend_gpu has set up a machine without a driver

            found = {kv: [b.name for b in cuda._get_backend_priorities(False, DeviceCapability(*capability), None, kv)]
                     for kv in kv_cache_dtypes}
        if len({tuple(v) for v in found.values()}) != 1:
            raise AssertionError(f"SM {sm(capability)}: the priority list depends on the KV dtype: {found}")
        lists[sm(capability)] = next(iter(found.values()))
    return lists


def priority_inputs() -> list[str]:
    """What vLLM's priority list depends on: the parameters of `vllm.platforms.cuda._get_backend_priorities`."""
    import inspect

    from dflash_fi.lab.pretend_gpu import cuda_platform_class

    cuda_platform_class()  # vllm.platforms.cuda imports on a machine without a driver too
    from vllm.platforms import cuda

    return list(inspect.signature(cuda._get_backend_priorities).parameters)


def priority_table(capabilities=CAPABILITIES, step: int = 0) -> str:
    """Markdown: each GPU's priority list, then what vLLM picks from it for the target's layers and for the draft's
    (use_non_causal=True) at `step`, per KV dtype, when no backend is asked for."""
    from dflash_fi.vocabulary import GPU_NAMES, KV_CACHE_DTYPE_NAMES

    lists = priority_lists(capabilities)
    picks = {(r["capability"], r["kv_cache_dtype"], r["role"]): r["auto_backend"] or "**none**"
             for r in selector_matrix(steps=(step,), capabilities=capabilities)}
    columns = [sm(c) for c in capabilities]
    lines = ["| | " + " | ".join(f"SM {c} ({GPU_NAMES[cap]})" for c, cap in zip(columns, capabilities)) + " |",
             "|---|" + "---|" * len(columns)]
    for i in range(max(map(len, lists.values()))):
        lines.append(f"| priority {i} | " + " | ".join(
            f"`{lists[c][i]}`" if i < len(lists[c]) else "" for c in columns) + " |")
    for role, _ in ROLES:
        for kv in KV_CACHE_DTYPES:
            lines.append(f"| {role} picks ({KV_CACHE_DTYPE_NAMES[kv]} KV) | " + " | ".join(
                picks[c, kv, role] for c in columns) + " |")
    return "\n".join(lines)
