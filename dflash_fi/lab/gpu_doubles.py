"""Test doubles for the only parts of FlashInfer's metadata building that need a GPU.

`FlashInferMetadataBuilder.build()` decides the routing of a batch in plain Python, then hands the
decision to FlashInfer wrapper objects (`plan()` JIT-loads CUDA kernels) and to Triton kernels. These
doubles stand in for the wrappers and vLLM's own page-index kernel, record every call, and mirror the one
piece of wrapper state vLLM reads back, `_causal`, set by `plan(causal=...)`, and the check FlashInfer's `run()` makes
before any kernel: q's rows against the `qo_indptr[-1]` that `plan()` kept. Step 9's draft on XQA runs FlashInfer's
own `xqa_batch_decode_with_kv_cache`; only its kernel call `xqa` is a double (`XQADouble`, which checks the arguments
as XQA takes them and attends by the mask it is given), with vLLM's zeroed workspace on the CPU. Step 8's page-table
kernel is no double: `TritonInterpreted` runs its own source under Triton's CPU interpreter, and so does the compiled
kernel its first launch returns, launched as step 8 launches it (`CompiledKernelDouble`). On a GPU the same
`build()` runs with the real objects (see the walkthrough's runs), so the doubles never decide anything
themselves.
"""

from __future__ import annotations

import inspect
from contextlib import ExitStack, contextmanager
from types import FunctionType, ModuleType
from unittest import mock

import torch

from dflash_fi.lab.xqa_double import XQADouble, sm_count_double, trtllm_gen_workspace_double  # noqa: F401


class PrefillWrapperDouble:
    """Double of flashinfer.BatchPrefillWithPagedKVCacheWrapper (its CUDA-graph mode too: fixed batch size), and of
    the ragged-KV wrapper DCP plans its new tokens on (plan() only). Outside
    CUDA-graph mode, `plan()` keeps the page table as FlashInfer's does (host arrays copied, device arrays as given)
    and `run()` attends over whatever page table the wrapper's buffers hold when it runs, as FA2's kernel does."""

    def __init__(self, workspace_buffer=None, kv_layout="NHD", use_cuda_graph=False, qo_indptr_buf=None,
                 backend="auto", **kwargs):
        self.kv_layout, self.backend, self.use_cuda_graph = kv_layout, backend, use_cuda_graph
        self.fixed_batch_size = len(qo_indptr_buf) - 1 if use_cuda_graph else None
        self.plans: list[dict] = []
        self._causal = None
        self._kv_lens_buffer = torch.zeros(32768, dtype=torch.int32)  # as FlashInfer allocates it

    def plan(self, qo_indptr=None, *args, causal: bool = False, **kwargs):
        if self.use_cuda_graph and len(qo_indptr) - 1 != self.fixed_batch_size:  # as FlashInfer refuses it
            raise ValueError(f"batch size {len(qo_indptr) - 1} planned on a CUDA-graph wrapper of "
                             f"batch size {self.fixed_batch_size}")
        self._causal = causal
        self._window_left = kwargs.get("window_left", -1)
        self._logits_soft_cap = kwargs.get("logits_soft_cap") or 0.0
        self._sm_scale = kwargs.get("sm_scale")
        self.plans.append({"causal": causal, **{k: v for k, v in kwargs.items() if not torch.is_tensor(v)}})
        self._qo_indptr_last = int(qo_indptr[-1])  # as FlashInfer keeps it, for run()'s check
        if not self.use_cuda_graph and "paged_kv_indptr" in kwargs:
            self._qo_indptr_buf = qo_indptr.clone()
            self._paged_kv_indptr_buf = kwargs["paged_kv_indptr"].clone()
            self._paged_kv_indices_buf = kwargs["paged_kv_indices"]
            self._paged_kv_last_page_len_buf = kwargs["paged_kv_last_page_len"].clone()

    def run(self, q, paged_kv_cache, **kwargs):
        from dflash_fi.reference.paged_attention import paged_attention_reference

        if q.size(0) != self._qo_indptr_last:  # FlashInfer's own check, before any kernel
            raise ValueError(f"q.shape[0] ({q.size(0)}) does not match qo_indptr[-1] ({self._qo_indptr_last}).")

        indptr, last = self._paged_kv_indptr_buf.tolist(), self._paged_kv_last_page_len_buf.tolist()
        pages = [self._paged_kv_indices_buf[indptr[r]:indptr[r + 1]] for r in range(len(last))]
        page_size = paged_kv_cache.shape[2]
        lengths = torch.tensor([(len(p) - 1) * page_size + last[r] if len(p) else 0 for r, p in enumerate(pages)])
        table = torch.zeros(len(pages), max(len(p) for p in pages), dtype=torch.int32)
        for r, p in enumerate(pages):
            table[r, : len(p)] = p
        result = paged_attention_reference(q, paged_kv_cache.float(), table, lengths, self._qo_indptr_buf,
                                           causal=self._causal, sm_scale=self._sm_scale)
        out = kwargs.get("out")
        return result if out is None else out.copy_(result)  # as FlashInfer's run(out=...) writes it


class DecodeWrapperDouble:
    """Double of flashinfer.BatchDecodeWithPagedKVCacheWrapper (planned through vLLM's fast_plan_decode)."""

    def __init__(self, workspace_buffer=None, kv_layout="NHD", **kwargs):
        self.plans: list[dict] = []


class CascadeWrapperDouble:
    """Double of flashinfer.MultiLevelCascadeAttentionWrapper."""

    def __init__(self, num_levels=2, workspace_buffer=None, kv_layout="NHD", **kwargs):
        self.plans: list[dict] = []

    def plan(self, *args, causal: bool = True, **kwargs):
        self.plans.append({"causal": causal})


def fast_plan_decode_double(wrapper, *args, **kwargs):
    """Double of vLLM's fast_plan_decode (it calls into the real decode wrapper's planner)."""
    wrapper.plans.append({k: v for k, v in kwargs.items() if not torch.is_tensor(v)})


class CopyPageIndicesKernelDouble:
    """Double of the Triton kernel `_copy_page_indices_kernel[grid](...)`, computed with torch on the CPU."""

    def __getitem__(self, grid):
        def launch(page_indices, block_table, block_table_stride, cu_num_blocks, BLOCK_SIZE):
            for req in range(grid[0]):
                start, end = int(cu_num_blocks[req]), int(cu_num_blocks[req + 1])
                page_indices[start:end] = block_table[req, : end - start]

        return launch


def triton_source(kernel):
    """One of vLLM's Triton kernels as a plain function over the real `triton.language`, for Triton's interpreter or
    compiler. Without a GPU, vLLM's `triton.jit` is a placeholder that returns the plain function, whose globals hold
    placeholders for `tl` and `triton` and whose `tl.constexpr` annotations are None: the function is rebuilt with
    the real modules and its annotated parameters constexpr (vLLM annotates only those)."""
    import triton
    import triton.language as tl

    fn = getattr(kernel, "fn", kernel)  # a JITFunction where vLLM has Triton, else the plain function
    source = FunctionType(fn.__code__, {**fn.__globals__, "tl": tl, "triton": triton}, fn.__name__)
    source.__annotations__ = {name: tl.constexpr for name in fn.__annotations__}
    return source


class _InterpretedLibraryCall:
    """A jitted function of Triton's own library (`tl.sum`, ...) called from an interpreted kernel. Triton's
    interpreter patches `triton.language` for such a call and never undoes it (it expects TRITON_INTERPRET=1 for the
    whole process); here the patch is undone after the call, and the function runs on a copy of its module's
    globals, which the interpreter adds names to, so that kernels compiled later in this process still compile."""

    def __init__(self, jitted):
        from triton.runtime.interpreter import InterpretedFunction

        fn = jitted.fn
        self._fn = FunctionType(fn.__code__, dict(fn.__globals__), fn.__name__, fn.__defaults__, fn.__closure__)
        self._fn.__kwdefaults__, self._fn.__annotations__ = fn.__kwdefaults__, fn.__annotations__
        self._interpreted = InterpretedFunction(self._fn)

    def __call__(self, *args, **kwargs):
        from triton.runtime.interpreter import _patch_lang

        scope = _patch_lang(self._fn)
        try:
            return self._interpreted.rewrite()(*args, **kwargs)
        finally:
            scope.restore()


class TritonInterpreted:
    """A Triton kernel of vLLM's, `kernel[grid](...)`, run from its own source (`triton_source`) by Triton's CPU
    interpreter; Triton's library functions that are themselves jitted (`tl.sum`, ...) are interpreted while it runs.
    A launch returns what a GPU's returns, the compiled kernel (`CompiledKernelDouble`), which launches again."""

    def __init__(self, kernel):
        import triton.language as tl
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        self.kernel = kernel.kernel if isinstance(kernel, TritonInterpreted) else kernel  # labs inside labs
        self.source = triton_source(self.kernel)
        self._kernel = InterpretedFunction(self.source)
        self._tl = tl
        self._library = {name: _InterpretedLibraryCall(value) for name, value in vars(tl).items()
                         if isinstance(value, JITFunction)}
        self.launches: list[tuple] = []  # (grid, args, kwargs), the compiled kernel's launches included

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self._run(grid, args, kwargs)
            bound = inspect.signature(self.source).bind(*args, **kwargs).arguments
            return CompiledKernelDouble(self, {name: bound[name] for name in self.source.__annotations__})

        return launch

    def _run(self, grid, args, kwargs) -> None:
        from triton.runtime import interpreter

        self.launches.append((grid, args, kwargs))
        with ExitStack() as stack:
            for name, interpreted in self._library.items():
                stack.enter_context(mock.patch.object(self._tl, name, interpreted))
            stack.enter_context(mock.patch.object(interpreter, "_patch_lang", _scalar_index(interpreter._patch_lang)))
            self._kernel[grid](*args, **kwargs)


class CompiledKernelDouble:
    """Double of the `triton.compiler.CompiledKernel` a launch returns on a GPU. `compiled[grid](*args)` is Triton's
    launcher: every parameter of the kernel, positional, in the signature's order, constexprs included (it runs
    with the values compiled in, whatever is passed for them); here the kernel runs so bound, interpreted."""

    def __init__(self, interpreted: TritonInterpreted, constexprs: dict):
        self._interpreted, self.constexprs = interpreted, constexprs

    def __getitem__(self, grid):
        def runner(*args, stream=None):
            names = list(inspect.signature(self._interpreted.source).parameters)
            if len(args) != len(names):  # the generated launcher takes exactly the kernel's parameters
                raise TypeError(f"the compiled kernel takes {len(names)} arguments ({len(args)} given)")
            bound = {name: self.constexprs.get(name, value) for name, value in zip(names, args)}
            given = tuple(bound[name] for name in names if name not in self.constexprs)
            self._interpreted._run(grid, given, {name: bound[name] for name in self.constexprs})

        return runner


def _scalar_index(patch_lang):
    """Triton's interpreter holds a scalar (a program id, a loaded length) as a one-element array and turns it into
    an int (a loop bound) with `int(array)`, which NumPy refuses for arrays of one dimension from 2.4 on (a
    deprecation before): the same int, taken from the array's one element."""
    def patched(fn):
        import triton.language as tl

        scope = patch_lang(fn)
        scope.set_attr(tl.tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
        return scope
    return patched


@contextmanager
def flashinfer_gpu_doubles(backend_module: ModuleType):
    """Swap the GPU-only names of one FlashInfer backend module (stock or patched) for the doubles."""
    replacements = {
        "BatchPrefillWithPagedKVCacheWrapper": PrefillWrapperDouble,
        "BatchPrefillWithRaggedKVCacheWrapper": PrefillWrapperDouble,  # DCP's new tokens (plan() only)
        "BatchDecodeWithPagedKVCacheWrapper": DecodeWrapperDouble,
        "MultiLevelCascadeAttentionWrapper": CascadeWrapperDouble,
        "fast_plan_decode": fast_plan_decode_double,
        "_copy_page_indices_kernel": CopyPageIndicesKernelDouble(),
    }
    if hasattr(backend_module, "_fill_paged_kv_kernel"):  # step 8 on
        replacements["_fill_paged_kv_kernel"] = TritonInterpreted(backend_module._fill_paged_kv_kernel)
    import flashinfer.decode

    with ExitStack() as stack:
        for name, double in replacements.items():
            stack.enter_context(mock.patch.object(backend_module, name, double))
        # Step 9's draft: FlashInfer's XQA wrapper runs for real, its kernel call is the double.
        stack.enter_context(mock.patch.object(backend_module, "_get_trtllm_gen_workspace_buffer",
                                              trtllm_gen_workspace_double))
        stack.enter_context(mock.patch.object(flashinfer.decode, "xqa", XQADouble()))
        stack.enter_context(mock.patch.object(flashinfer.decode, "get_device_sm_count", sm_count_double))
        yield


class DcpGroupDouble:
    """Double of a decode-context-parallel process group (needs several GPUs and NCCL)."""

    def __init__(self, world_size: int = 2, rank_in_group: int = 0):
        self.world_size, self.rank_in_group = world_size, rank_in_group
