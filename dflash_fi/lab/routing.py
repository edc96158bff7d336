"""`dflash-fi routing`: drive the real `FlashInferMetadataBuilder.build()` of a step on any machine.

For a DFlash draft batch and for target batches (`dflash_fi.lab.batches`): the decode/prefill split, the wrapper
(shared causal, separate non-causal, CUDA-graph) or TRTLLM path, its kernel, the `causal` handed to `plan()`,
`metadata.causal`, and whether DFlash's own check (`DFlashProposer.build_per_group_and_layer_attn_metadata`, run
here) passes. vLLM 0.22.1's own code, on the embedded pair, under `pretend_gpu` (`trtllm=True`: TRTLLM available as
on Blackwell); only FlashInfer's wrappers and vLLM's Triton kernels are doubles (step 8's runs in Triton's
interpreter). What it finds is a `Route` (`dflash_fi.lab.routes`): enums, vLLM's exceptions, logged warnings.
"""
from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from types import ModuleType
from unittest import mock

import torch

from dflash_fi.lab.batches import STANDARD_BATCHES, Batch, common_metadata
from dflash_fi.lab.routes import Decode, Prefill, Raised, Route, RoutingReport, WarningCollector, route_cell, route_line
from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_TARGET
from dflash_fi.vocabulary import BLACKWELL, HOPPER, KV_PAGE_SIZE, NUM_SPECULATIVE_TOKENS, sm


class RoutingLab:
    """A step's target and draft FlashInfer builders, as vLLM would make them for the embedded pair."""

    def __init__(self, step: int, capability=HOPPER, trtllm: bool = False, kv_cache_dtype: str = "auto",
                 dcp: bool = False, cuda_graphs: bool = False, target_dir: Path = DEFAULT_TARGET,
                 drafter_dir: Path = DEFAULT_DRAFTER, on_gpu: bool = False, max_model_len: int = 1024,
                 draft_backend: str = "FLASHINFER", backend: ModuleType | None = None):
        """on_gpu: the builders as on a real GPU (this machine's), FlashInfer's real wrappers, no doubles. max_model_len
        sizes the page tables (the model's position limit raised to it: no model runs); draft_backend: the draft's.
        backend: a FlashInfer backend module standing for the step's (a reader's exercise); default the step's own."""
        from dflash_fi.steps import check_step

        self.step, self.capability, self.trtllm, self.dcp = check_step(step), tuple(capability), trtllm, dcp
        self.kv_cache_dtype, self.cuda_graphs, self.on_gpu = kv_cache_dtype, cuda_graphs, on_gpu
        self.max_model_len, self.draft_backend, self.backend, self._stack = max_model_len, draft_backend, backend, None
        self.target_dir, self.drafter_dir = Path(target_dir), Path(drafter_dir)

    def __enter__(self) -> "RoutingLab":
        self._stack = ExitStack()
        try:
            self._enter(self._stack)
        except BaseException:
            self._stack.close()  # leave no pretended GPU or FLASHINFER override behind
            raise
        return self

    def _enter(self, stack: ExitStack) -> None:
        from vllm import logger as vllm_logger
        from vllm.config import (AttentionConfig, CacheConfig, CompilationConfig, DeviceConfig, ModelConfig,
                                 ParallelConfig, SchedulerConfig, SpeculativeConfig, VllmConfig,
                                 set_current_vllm_config)
        from vllm.model_executor.layers.attention import Attention
        from vllm.utils.torch_utils import set_default_torch_dtype
        from vllm.v1.spec_decode.dflash import DFlashProposer

        from dflash_fi.lab.gpu_doubles import DcpGroupDouble, flashinfer_gpu_doubles
        from dflash_fi.lab.pretend_gpu import pretend_gpu
        # Model configs are read before pretending: inspecting model classes imports CUDA-only kernels.
        model_config = ModelConfig(
            model=str(self.target_dir), tokenizer=str(self.target_dir), dtype="bfloat16",
            max_model_len=self.max_model_len, enforce_eager=not self.cuda_graphs,
            hf_overrides={"max_position_embeddings": self.max_model_len} if self.max_model_len > 1024 else {})
        parallel_config = ParallelConfig()
        spec_config = SpeculativeConfig(
            method="dflash", model=str(self.drafter_dir), num_speculative_tokens=NUM_SPECULATIVE_TOKENS,
            attention_backend=self.draft_backend, target_model_config=model_config,
            target_parallel_config=parallel_config)
        if not self.on_gpu:
            stack.enter_context(pretend_gpu(self.capability, trtllm=self.trtllm))
        self.module = self._backend(stack)
        if not self.on_gpu:  # pretended GPUs have doubles of FlashInfer's wrappers and vLLM's Triton kernels
            stack.enter_context(flashinfer_gpu_doubles(self.module))
        if self.dcp:
            stack.enter_context(mock.patch.object(self.module, "get_dcp_group", lambda: DcpGroupDouble(2, 0)))
        vllm_logger._print_warning_once.cache_clear()  # as in a fresh vLLM process
        self.warnings = WarningCollector(self._hunk_of)
        self.module.logger.addHandler(self.warnings)
        stack.callback(self.module.logger.removeHandler, self.warnings)

        self.vllm_config = VllmConfig(
            model_config=model_config, parallel_config=parallel_config, speculative_config=spec_config,
            cache_config=CacheConfig(block_size=KV_PAGE_SIZE, cache_dtype=self.kv_cache_dtype),
            attention_config=AttentionConfig(backend="FLASHINFER"), device_config=DeviceConfig(device="cuda"),
            scheduler_config=SchedulerConfig(max_model_len=self.max_model_len, is_encoder_decoder=False),
            compilation_config=CompilationConfig(
                cudagraph_mode="FULL_AND_PIECEWISE" if self.cuda_graphs else "NONE"),
        )
        # DFlash's own derivation of the draft config (use_non_causal=True, speculative attention_backend).
        proposer = object.__new__(DFlashProposer)
        proposer.vllm_config, proposer.speculative_config = self.vllm_config, spec_config
        self.draft_config = proposer._create_draft_vllm_config()
        self._proposer = proposer

        hf = model_config.hf_config
        num_target, num_draft = hf.num_hidden_layers, spec_config.draft_model_config.hf_config.num_hidden_layers

        def make_layers(names, **kwargs):
            return [Attention(hf.num_attention_heads, hf.head_dim, hf.head_dim ** -0.5,
                              num_kv_heads=hf.num_key_value_heads, cache_config=config.cache_config,
                              prefix=name, **kwargs) for name in names]
        self.builders, self.selection, self.layers = {}, {}, {}
        for role, config, names in (
            ("target", self.vllm_config, [f"model.layers.{i}.self_attn.attn" for i in range(num_target)]),
            ("draft", self.draft_config,
             [f"model.layers.{num_target + i}.self_attn.attn" for i in range(num_draft)]),
        ):
            with set_current_vllm_config(config), set_default_torch_dtype(torch.bfloat16):
                try:  # vLLM's selector, as at engine start
                    layers = make_layers(names)
                    self.selection[role] = None
                except ValueError as exc:
                    # Stock rejects FlashInfer for the draft; build the layers on it anyway, to show
                    # what its builder would do with a non-causal batch.
                    self.selection[role] = Raised(exc)
                    layers = make_layers(names, attn_backend=self.module.FlashInferBackend)
                spec = layers[0].get_kv_cache_spec(config)
                builder_cls = layers[0].attn_backend.get_builder_cls()
                builder = builder_cls(spec, names, config, torch.device("cuda" if self.on_gpu else "cpu"))
            if not self.on_gpu and hasattr(builder, "set_workspace_buffer"):  # FlashInfer's; its wrappers are doubles
                builder.set_workspace_buffer(torch.empty(0, dtype=torch.uint8))
            self.builders[role] = (builder, names, config)
            self.layers[role] = layers  # vLLM's Attention layers, their impl's forward() included
        self.kv_cache_spec = spec

    def _backend(self, stack: ExitStack):
        """The FlashInfer module the lab drives (the step's, or one given in its place), made FLASHINFER for vLLM's
        selector while the lab is open."""
        from dflash_fi.plugin import using_step
        from dflash_fi.steps import backend_module

        stack.enter_context(using_step(self.step, self.backend))
        return self.backend or backend_module(self.step)

    @property
    def rejection(self) -> dict:
        """Per role, the ValueError vLLM's selector raised for FLASHINFER, or None."""
        return {role: raised and raised.error for role, raised in self.selection.items()}

    def run_dflash_check(self, md, cad) -> AssertionError | None:
        """DFlash's own check of a draft build's metadata, run here: None when it passes, else its AssertionError."""
        from vllm.v1.spec_decode.dflash import DFlashProposer
        from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

        with mock.patch.object(SpecDecodeBaseProposer, "build_per_group_and_layer_attn_metadata",
                               return_value=([md], {name: md for name in self.builders["draft"][1]})):
            try:
                DFlashProposer.build_per_group_and_layer_attn_metadata(self._proposer, cad)
            except AssertionError as exc:
                return exc
        return None

    def __exit__(self, *exc):
        self._stack.close()

    def _hunk_of(self, path: str, line: int):
        """The step hunk behind line `line` of `path`, if `path` is this lab's backend module (None: vLLM's own)."""
        from dflash_fi.lab.hunks import line_hunks

        return line_hunks(self.step)[line - 1] if self.step and path == self.module.__file__ else None

    def _paths(self, builder, md) -> dict:
        prefill, decode = md.prefill, md.decode
        found = {"decode": None if decode is None else
                 Decode.TRTLLM if isinstance(decode, self.module.TRTLLMDecode) else Decode.FLASHINFER}
        if prefill is None:
            return found
        if isinstance(prefill, self.module.TRTLLMPrefill):
            return {**found, "prefill": Prefill.TRTLLM}
        if isinstance(prefill, getattr(self.module, "XQADraft", ())):  # step 9 on: no wrapper, no plan
            return {**found, "prefill": Prefill.XQA, "prefill_kernel": "xqa"}
        wrapper = prefill.wrapper
        if getattr(wrapper, "use_cuda_graph", False):
            path = Prefill.CUDA_GRAPH
        elif wrapper is getattr(builder, "_noncausal_prefill_wrapper", None):
            path = Prefill.NON_CAUSAL
        else:
            path = Prefill.SHARED_CAUSAL
        return {**found, "prefill": path, "plan_causal": wrapper.plans[-1]["causal"], "prefill_kernel": wrapper.backend,
                "graph_batch_size": wrapper.fixed_batch_size if path is Prefill.CUDA_GRAPH else None}

    def route(self, batch: Batch) -> Route:
        from vllm.config import set_current_vllm_config

        builder, names, config = self.builders[batch.role]
        given = {"batch": batch, "selection_refused": self.selection[batch.role],
                 "reorder_batch_threshold": builder.reorder_batch_threshold}
        cad = common_metadata(batch)
        try:
            with set_current_vllm_config(config):
                md = builder.build(0, cad)
        except NotImplementedError as exc:
            return Route(**given, refused=Raised(exc))
        found = {
            "num_decodes": md.num_decodes, "num_prefills": md.num_prefills,
            "num_decode_tokens": md.num_decode_tokens, "num_prefill_tokens": md.num_prefill_tokens,
            "cascade": md.use_cascade, "metadata_causal": getattr(md, "causal", None), **self._paths(builder, md),
        }
        if batch.role == "draft":
            found["host_seq_lens_copied"] = cad._seq_lens_cpu is not None
            if failed := self.run_dflash_check(md, cad):
                found["dflash_check"] = Raised(failed)
        return Route(**given, **found)

    def route_all(self, batches=STANDARD_BATCHES) -> list[Route]:
        return [self.route(b) for b in batches]


def routing_report(step: int | str, trtllm: bool = False, capability=None, kv_cache_dtype: str = "auto",
                   cuda_graphs: bool = False) -> RoutingReport:
    from dflash_fi.steps import check_step

    step = check_step(step)
    capability = tuple(capability or (BLACKWELL if trtllm else HOPPER))
    with RoutingLab(step, capability, trtllm=trtllm, kv_cache_dtype=kv_cache_dtype, cuda_graphs=cuda_graphs) as lab:
        routes = tuple(lab.route_all())
        warnings = tuple(lab.warnings.warnings)
    return RoutingReport(step, capability, trtllm, kv_cache_dtype, cuda_graphs, routes, warnings)


def format_routing(report: RoutingReport) -> str:
    lines = [f"step {report.step}, SM {sm(report.capability)}, KV cache {report.kv_cache_dtype}, TRTLLM "
             f"{'available (forced)' if report.trtllm_available else 'not available'}"
             f"{', CUDA graphs' if report.cuda_graphs else ''}"]
    lines += [f"  {route_line(r)}" for r in report.routes]
    lines += [f"  warning (logged once): {w.message}" for w in report.step_warnings]
    return "\n".join(lines)


def routing_table(steps, capability=HOPPER, trtllm: bool = False, kv_cache_dtype: str = "auto",
                  cuda_graphs: bool = False) -> str:
    """Markdown: what each standard batch becomes at each step: how many of its requests go to decode and to
    prefill kernels, on which path, planned with which causality; for draft batches, `metadata.causal` and
    whether DFlash's own check passes."""
    reports = {s: routing_report(s, trtllm, capability, kv_cache_dtype, cuda_graphs) for s in steps}
    lines = ["| batch | " + " | ".join(f"step {s}" for s in steps) + " |", "|---|" + "---|" * len(steps)]
    for i, batch in enumerate(STANDARD_BATCHES):
        lines.append(f"| {batch.name} | " + " | ".join(route_cell(reports[s].routes[i]) for s in steps) + " |")
    return "\n".join(lines)
