"""Import hook: `import dflash_fi.patched.stepN` builds vLLM 0.22.1's flashinfer.py with step N's hunks;
`import dflash_fi.patched.vllm_0_24_0` imports vLLM 0.24.0's own flashinfer.py (PR #43081 merged, read from its wheel,
unchanged) against the installed vLLM 0.22.1, for the CPU lab to drive beside step 4.

A real module in `sys.modules`, under a real name, with its source in `linecache`: vLLM resolves its
classes by qualified name in every process, tracebacks show the patched lines, and
`inspect.getsource(module.FlashInferMetadataBuilder.build)` shows the code vLLM actually runs.

May import: dflash_fi.steps, dflash_fi.upstream.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import linecache
import re
import sys

MAY_IMPORT = ("dflash_fi.steps", "dflash_fi.upstream")
_NAME = re.compile(rf"^{re.escape(__name__)}\.step([1-9][0-9]*)$")
MERGED_MODULE = f"{__name__}.vllm_0_24_0"


class _PatchedFlashInferLoader(importlib.abc.Loader):
    def __init__(self, step: int):
        self.step = step

    def get_source(self, fullname: str) -> str:
        from dflash_fi.steps import patched_source

        return patched_source(self.step)

    def exec_module(self, module) -> None:
        source = self.get_source(module.__name__)
        # Not a path on disk: linecache asks this loader's get_source() for traceback lines.
        filename = f"vllm-0.22.1/v1/attention/backends/flashinfer.py+dflash-fi-step{self.step}"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        module.__file__ = filename
        module.DFLASH_FI_STEP = self.step  # what an engine's record says its backend was built at
        exec(compile(source, filename, "exec"), module.__dict__)


class _MergedFlashInferLoader(_PatchedFlashInferLoader):
    """vLLM 0.24.0's flashinfer.py as shipped: no hunk, no step."""

    def get_source(self, fullname: str) -> str:
        from dflash_fi.upstream import FLASHINFER, MERGED, source

        return source(MERGED, FLASHINFER)

    def exec_module(self, module) -> None:
        source = self.get_source(module.__name__)
        filename = "vllm-0.24.0/v1/attention/backends/flashinfer.py"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        module.__file__ = filename
        exec(compile(source, filename, "exec"), module.__dict__)


class _PatchedFlashInferFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == MERGED_MODULE:
            return importlib.machinery.ModuleSpec(fullname, _MergedFlashInferLoader(None), origin="vllm-0.24.0 wheel")
        match = _NAME.match(fullname)
        if match is None:
            return None
        from dflash_fi.steps import check_step

        step = check_step(match.group(1))
        return importlib.machinery.ModuleSpec(fullname, _PatchedFlashInferLoader(step), origin="dflash-fi")


if not any(isinstance(f, _PatchedFlashInferFinder) for f in sys.meta_path):
    sys.meta_path.append(_PatchedFlashInferFinder())
