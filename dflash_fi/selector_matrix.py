"""`dflash-fi selector-matrix`: what vLLM's attention selector does, per step, GPU and role.

For each step x compute capability x KV cache dtype x role (target: causal; DFlash draft: non-causal,
`use_non_causal=True` as `DFlashProposer._create_draft_vllm_config` sets it): the backend vLLM picks when
none is requested, and whether FLASHINFER is accepted when requested (or the selector's error text).
All answers come from vLLM 0.22.1's `CudaPlatform.get_attn_backend_cls` under `pretend_gpu`.
"""

from __future__ import annotations

import torch

from dflash_fi.pretend_gpu import CAPABILITIES, pretend_gpu
from dflash_fi.routing import flashinfer_is_step

KV_CACHE_DTYPES = ("auto", "fp8_e4m3")
ROLES = (("target", False), ("draft", True))  # (role, use_non_causal)
HEAD_SIZE = 128  # the embedded pair's head_dim; the FlashInfer kernels the bundle carries


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


def selector_matrix(steps=range(5), capabilities=CAPABILITIES) -> list[dict]:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.selector import AttentionSelectorConfig

    rows = []
    for step in steps:
        with flashinfer_is_step(step):
            for capability in capabilities:
                with pretend_gpu(capability) as platform:
                    for kv in KV_CACHE_DTYPES:
                        for role, non_causal in ROLES:
                            config = AttentionSelectorConfig(
                                head_size=HEAD_SIZE, dtype=torch.bfloat16, kv_cache_dtype=kv,
                                block_size=None, use_non_causal=non_causal)
                            auto, auto_error = _select(platform, None, config)
                            flashinfer, fi_error = _select(platform, AttentionBackendEnum.FLASHINFER, config)
                            rows.append({
                                "step": step, "capability": f"{capability[0]}.{capability[1]}",
                                "kv_cache_dtype": kv, "role": role,
                                "auto_backend": auto, "auto_error": auto_error,
                                "flashinfer": "accepted" if flashinfer else fi_error,
                            })
    return rows


def _short_reason(error: str) -> str:
    if "Reason: " in error:
        return error.split("Reason: ", 1)[1]
    return "no valid backend" if "No valid attention backend" in error else error[:80]


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
    with flashinfer_is_step(step), pretend_gpu((9, 0)):
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
