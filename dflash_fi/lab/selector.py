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


def _select(platform, backend, config) -> tuple[str | None, str | None]:
    try:
        return _backend_name(platform.get_attn_backend_cls(backend, config)), None
    except ValueError as exc:
        return None, str(exc)


def selector_matrix(steps=None, capabilities=CAPABILITIES, kv_cache_dtypes=KV_CACHE_DTYPES,
                    backend: ModuleType | None = None) -> list[dict]:
    """Per step x GPU x KV dtype x role: the backend picked with none requested, and FLASHINFER's verdict.
    backend: a FlashInfer backend module standing for the steps' own (a reader's exercise)."""
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
                            auto, auto_error = _select(platform, None, config)
                            flashinfer, fi_error = _select(platform, AttentionBackendEnum.FLASHINFER, config)
                            rows.append({
                                "step": step, "capability": sm(capability), "kv_cache_dtype": kv, "role": role,
                                "auto_backend": auto, "auto_error": auto_error,
                                "flashinfer": "accepted" if flashinfer else fi_error,
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


def _short_reason(error: str) -> str:
    if "Reason: " in error:
        return error.split("Reason: ", 1)[1]
    import textwrap

    return "no valid backend" if "No valid attention backend" in error else textwrap.shorten(error, 80, placeholder=" ...")


def render_matrix(rows: list[dict]) -> str:
    lines = ["| step | SM | KV cache | role | auto-selected | FLASHINFER requested |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        auto = r["auto_backend"] or f"ERROR: {_short_reason(r['auto_error'])}"
        fi = r["flashinfer"] if r["flashinfer"] == "accepted" else f"ERROR: {_short_reason(r['flashinfer'])}"
        lines.append(f"| {r['step']} | {r['capability']} | {r['kv_cache_dtype']} | {r['role']} | {auto} | {fi} |")
    return "\n".join(lines)


def feature_table(step: int) -> str:
    """The 'Non-Causal' column of vLLM's attention-backend feature table, from the live classes."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    lines = ["| Backend | Non-Causal |", "|---|---|"]
    with using_step(step), pretend_gpu((9, 0)):
        for backend in AttentionBackendEnum:
            if "MLA" in backend.name or backend.name in ("CUSTOM",):
                continue
            try:
                cls = backend.get_class()
                mark = "✅" if cls.supports_non_causal() else "❌"
            except (ImportError, ValueError, AttributeError) as exc:
                mark = f"n/a ({type(exc).__name__} on this machine)"
            lines.append(f"| `{backend.name}` | {mark} |")
    return "\n".join(lines)


def verdict_table(steps=(0, 1), capabilities=CAPABILITIES, kv_cache_dtypes=KV_CACHE_DTYPES, role: str = "draft") -> str:
    """Markdown: each backend of the priority list, its verdict per GPU x KV dtype, for each step."""
    from dflash_fi.vocabulary import KV_CACHE_DTYPE_NAMES

    columns = [(c, kv) for c in capabilities for kv in kv_cache_dtypes]
    lines = ["| step | backend | " + " | ".join(f"SM {sm(c)}, {KV_CACHE_DTYPE_NAMES[kv]} KV" for c, kv in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    for step in steps:
        verdicts = {col: {v["backend"]: v for v in backend_verdicts(step, col[0], col[1], role)} for col in columns}
        backends = list(dict.fromkeys(b for col in columns for b in verdicts[col]))
        for backend in backends:
            cells = []
            for col in columns:
                v = verdicts[col].get(backend)
                cells.append("-" if v is None else "**ok**" if not v["reasons"] else "; ".join(v["reasons"]))
            lines.append(f"| {step} | {backend} | " + " | ".join(cells) + " |")
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
