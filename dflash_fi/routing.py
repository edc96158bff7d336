"""`dflash-fi routing`: drive the real `FlashInferMetadataBuilder.build()` of a step on any machine.

For a DFlash draft batch (requests of 1 + 15 query tokens, `causal=False`, as `DFlashProposer` builds it)
and for target batches (decodes, prefills, spec-verify, mixes; `causal=True`) this reports what the
builder decided: decode/prefill split, which wrapper or TRTLLM path, the `causal` handed to `plan()`,
`metadata.causal`, and whether DFlash's own check passes (`DFlashProposer.build_per_group_and_layer_attn_metadata`
requires `causal is False` on every draft layer; its real code runs here).

Everything is vLLM 0.22.1's own code and configuration classes, on the embedded model pair, under
`pretend_gpu` (compute capability; `trtllm=True` = TRTLLM available as on Blackwell). Only FlashInfer's
wrapper objects and one Triton kernel are doubles (`dflash_fi.gpu_doubles`).
"""

from __future__ import annotations

import logging
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch

from dflash_fi.evaluate import DEFAULT_DRAFTER, DEFAULT_TARGET

BLOCK_SIZE = 16
NUM_SPECULATIVE_TOKENS = 15


@dataclass(frozen=True)
class Batch:
    name: str
    query_lens: tuple[int, ...]
    context_lens: tuple[int, ...]  # tokens already in the KV cache before this batch's queries
    causal: bool

    @property
    def role(self) -> str:
        return "target" if self.causal else "draft"


STANDARD_BATCHES = (
    Batch("DFlash draft: 4 requests x (1 + 15)", (16, 16, 16, 16), (37, 90, 150, 301), False),
    Batch("DFlash draft: 1 request x (1 + 15)", (16,), (120,), False),
    Batch("target decode: 4 x 1", (1, 1, 1, 1), (52, 91, 160, 311), True),
    Batch("target prefill: 2 prompts", (97, 64), (0, 0), True),
    Batch("target spec verify: 4 x (1 + 15)", (16, 16, 16, 16), (37, 90, 150, 301), True),
    Batch("target mixed: 2 decodes + 1 prefill", (1, 1, 50), (40, 60, 0), True),
)


def common_metadata(batch: Batch, block_size: int = BLOCK_SIZE):
    """The CommonAttentionMetadata vLLM's runner (target) or DFlashProposer (draft) builds for a batch."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    q = torch.tensor(batch.query_lens, dtype=torch.int32)
    seq = q + torch.tensor(batch.context_lens, dtype=torch.int32)
    qsl = torch.zeros(len(q) + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(q, 0)
    blocks = (seq + block_size - 1) // block_size
    block_table = torch.zeros(len(q), int(blocks.max()), dtype=torch.int32)
    next_block = 1
    for r, n in enumerate(blocks.tolist()):
        block_table[r, :n] = torch.arange(next_block, next_block + n)
        next_block += n
    slots = []
    for r in range(len(q)):
        for pos in range(int(seq[r] - q[r]), int(seq[r])):
            slots.append(int(block_table[r, pos // block_size]) * block_size + pos % block_size)
    return CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl.clone(), seq_lens=seq, _seq_lens_cpu=seq.clone(),
        num_reqs=len(q), num_actual_tokens=int(q.sum()), max_query_len=int(q.max()),
        max_seq_len=int(seq.max()), block_table_tensor=block_table,
        slot_mapping=torch.tensor(slots, dtype=torch.int64), causal=batch.causal,
    )


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


class RoutingLab:
    """A step's target and draft FlashInfer builders, as vLLM would make them for the embedded pair."""

    def __init__(self, step: int, capability=(9, 0), trtllm: bool = False, kv_cache_dtype: str = "auto",
                 dcp: bool = False, target_dir: Path = DEFAULT_TARGET, drafter_dir: Path = DEFAULT_DRAFTER):
        from dflash_fi.steps import check_step

        self.step, self.capability, self.trtllm = check_step(step), tuple(capability), trtllm
        self.kv_cache_dtype, self.dcp = kv_cache_dtype, dcp
        self.target_dir, self.drafter_dir = Path(target_dir), Path(drafter_dir)
        self._stack: ExitStack | None = None

    def __enter__(self) -> "RoutingLab":
        from vllm import logger as vllm_logger
        from vllm.config import (AttentionConfig, CacheConfig, DeviceConfig, ModelConfig, ParallelConfig,
                                 SchedulerConfig, SpeculativeConfig, VllmConfig, set_current_vllm_config)
        from vllm.model_executor.layers.attention import Attention
        from vllm.utils.torch_utils import set_default_torch_dtype
        from vllm.v1.spec_decode.dflash import DFlashProposer

        from dflash_fi.gpu_doubles import DcpGroupDouble, flashinfer_gpu_doubles
        from dflash_fi.pretend_gpu import pretend_gpu
        from dflash_fi.steps import backend_module

        self._stack = stack = ExitStack()
        # Model configs are read before pretending: inspecting model classes imports CUDA-only kernels.
        model_config = ModelConfig(model=str(self.target_dir), tokenizer=str(self.target_dir),
                                   dtype="bfloat16", max_model_len=1024, enforce_eager=True)
        parallel_config = ParallelConfig()
        spec_config = SpeculativeConfig(
            method="dflash", model=str(self.drafter_dir), num_speculative_tokens=NUM_SPECULATIVE_TOKENS,
            attention_backend="FLASHINFER", target_model_config=model_config,
            target_parallel_config=parallel_config)
        stack.enter_context(pretend_gpu(self.capability, trtllm=self.trtllm))
        stack.enter_context(flashinfer_is_step(self.step))
        self.module = backend_module(self.step)
        stack.enter_context(flashinfer_gpu_doubles(self.module))
        if self.dcp:
            stack.enter_context(mock.patch.object(self.module, "get_dcp_group", lambda: DcpGroupDouble(2, 0)))
        vllm_logger._print_warning_once.cache_clear()  # as in a fresh vLLM process
        self.warnings = _Collect()
        self.module.logger.addHandler(self.warnings)
        stack.callback(self.module.logger.removeHandler, self.warnings)

        self.vllm_config = VllmConfig(
            model_config=model_config, parallel_config=parallel_config, speculative_config=spec_config,
            cache_config=CacheConfig(block_size=BLOCK_SIZE, cache_dtype=self.kv_cache_dtype),
            attention_config=AttentionConfig(backend="FLASHINFER"), device_config=DeviceConfig(device="cuda"),
            scheduler_config=SchedulerConfig(max_model_len=1024, is_encoder_decoder=False),
        )
        # DFlash's own derivation of the draft config (use_non_causal=True, speculative attention_backend).
        proposer = object.__new__(DFlashProposer)
        proposer.vllm_config, proposer.speculative_config = self.vllm_config, spec_config
        self.draft_config = proposer._create_draft_vllm_config()
        self._proposer = proposer

        num_target = model_config.hf_config.num_hidden_layers
        num_draft = spec_config.draft_model_config.hf_config.num_hidden_layers
        hf = model_config.hf_config

        def make_layers(names, **kwargs):
            return [Attention(hf.num_attention_heads, hf.head_dim, hf.head_dim ** -0.5,
                              num_kv_heads=hf.num_key_value_heads, cache_config=config.cache_config,
                              prefix=name, **kwargs) for name in names]
        self.builders, self.selection = {}, {}
        for role, config, names in (
            ("target", self.vllm_config, [f"model.layers.{i}.self_attn.attn" for i in range(num_target)]),
            ("draft", self.draft_config,
             [f"model.layers.{num_target + i}.self_attn.attn" for i in range(num_draft)]),
        ):
            with set_current_vllm_config(config), set_default_torch_dtype(torch.bfloat16):
                try:  # vLLM's selector, as at engine start
                    layers = make_layers(names)
                    self.selection[role] = "FLASHINFER accepted"
                except ValueError as exc:
                    # Stock rejects FlashInfer for the draft; build the layers on it anyway, to show
                    # what its builder would do with a non-causal batch.
                    self.selection[role] = f"rejected: {exc}"
                    layers = make_layers(names, attn_backend=self.module.FlashInferBackend)
                spec = layers[0].get_kv_cache_spec(config)
                builder_cls = layers[0].attn_backend.get_builder_cls()
                builder = builder_cls(spec, names, config, torch.device("cpu"))
            builder.set_workspace_buffer(torch.empty(0, dtype=torch.uint8))  # wrappers are doubles
            self.builders[role] = (builder, names, config)
        return self

    def __exit__(self, *exc):
        self._stack.close()

    def route(self, batch: Batch) -> dict:
        from vllm.config import set_current_vllm_config
        from vllm.v1.spec_decode.dflash import DFlashProposer
        from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

        builder, names, config = self.builders[batch.role]
        row = {"batch": batch.name, "role": batch.role, "causal_in": batch.causal,
               "selection": self.selection[batch.role],
               "reorder_batch_threshold": builder.reorder_batch_threshold}
        cad = common_metadata(batch)
        try:
            with set_current_vllm_config(config):
                md = builder.build(0, cad)
        except NotImplementedError as exc:
            row["error"] = f"NotImplementedError: {exc}"
            return row
        prefill = md.prefill
        if prefill is None:
            prefill_path, plan_causal = None, None
        elif type(prefill).__name__ == "TRTLLMPrefill":
            prefill_path, plan_causal = "TRTLLM prefill", None
        else:
            wrapper = prefill.wrapper
            separate = wrapper is getattr(builder, "_noncausal_prefill_wrapper", None)
            prefill_path = "FlashInfer prefill (separate non-causal wrapper)" if separate else \
                "FlashInfer prefill (shared causal wrapper)"
            plan_causal = wrapper.plans[-1]["causal"]
        decode = md.decode
        decode_path = None if decode is None else (
            "TRTLLM decode" if type(decode).__name__ == "TRTLLMDecode" else "FlashInfer decode wrapper")
        row.update({
            "num_decodes": md.num_decodes, "num_prefills": md.num_prefills,
            "num_decode_tokens": md.num_decode_tokens, "num_prefill_tokens": md.num_prefill_tokens,
            "prefill": prefill_path, "decode": decode_path, "plan_causal": plan_causal,
            "cascade": md.use_cascade,
            "metadata_causal": getattr(md, "causal", "absent"),
        })
        if batch.role == "draft":
            per_layer = {name: md for name in names}
            with mock.patch.object(SpecDecodeBaseProposer, "build_per_group_and_layer_attn_metadata",
                                   return_value=([md], per_layer)):
                try:
                    DFlashProposer.build_per_group_and_layer_attn_metadata(self._proposer, cad)
                    row["dflash_check"] = "pass"
                except AssertionError as exc:
                    row["dflash_check"] = f"fail: {str(exc).split(',')[0]}"
        return row

    def route_all(self, batches=STANDARD_BATCHES) -> list[dict]:
        return [self.route(b) for b in batches]


@contextmanager
def flashinfer_is_step(step: int):
    """AttentionBackendEnum.FLASHINFER resolves to step `step` inside the block (as the plugin does)."""
    from vllm.v1.attention import selector
    from vllm.v1.attention.backends.registry import _ATTN_OVERRIDES, AttentionBackendEnum, register_backend

    from dflash_fi.steps import backend_class_path

    saved = _ATTN_OVERRIDES.get(AttentionBackendEnum.FLASHINFER)
    if step:
        register_backend(AttentionBackendEnum.FLASHINFER, backend_class_path(step))
    else:
        AttentionBackendEnum.FLASHINFER.clear_override()
    selector._cached_get_attn_backend.cache_clear()
    try:
        yield
    finally:
        if saved is None:
            AttentionBackendEnum.FLASHINFER.clear_override()
        else:
            register_backend(AttentionBackendEnum.FLASHINFER, saved)
        selector._cached_get_attn_backend.cache_clear()


def routing_report(step: int | str, trtllm: bool = False, capability=None, kv_cache_dtype="auto") -> dict:
    from dflash_fi.steps import check_step

    step = check_step(step)
    capability = capability or ((10, 0) if trtllm else (9, 0))
    with RoutingLab(step, capability, trtllm=trtllm, kv_cache_dtype=kv_cache_dtype) as lab:
        rows = lab.route_all()
        warnings = [m for m in lab.warnings.messages if "non-causal" in m or "DFlash" in m]
    return {"step": step, "capability": ".".join(map(str, capability)), "trtllm_available": trtllm,
            "kv_cache_dtype": kv_cache_dtype, "batches": rows, "dflash_warnings": warnings}


def format_routing(report: dict) -> str:
    lines = [f"step {report['step']}, SM {report['capability']}, TRTLLM "
             f"{'available (forced)' if report['trtllm_available'] else 'not available'}"]
    for b in report["batches"]:
        if "error" in b:
            lines.append(f"  {b['batch']:<40} {b['error']}")
            continue
        paths = " + ".join(p for p in (b["decode"], b["prefill"]) if p)
        plan = "" if b["plan_causal"] is None else f", plan(causal={b['plan_causal']})"
        check = f", DFlash check {b['dflash_check']}" if "dflash_check" in b else ""
        lines.append(f"  {b['batch']:<40} {b['num_decodes']}D/{b['num_prefills']}P via {paths}{plan}, "
                     f"metadata.causal={b['metadata_causal']}{check}")
    for w in report["dflash_warnings"]:
        lines.append(f"  warning (logged once): {w}")
    return "\n".join(lines)
