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
import importlib.util
import linecache
import re
import sys

MAY_IMPORT = ("dflash_fi.steps", "dflash_fi.upstream")
_NAME = re.compile(rf"^{re.escape(__name__)}\.step([1-9][0-9]*)$")
MERGED_MODULE = f"{__name__}.vllm_0_24_0"


def source_filename(tag: str) -> str:
    """The file name a patched module's tracebacks show. Not a path on disk: linecache asks the loader's
    get_source() for their lines."""
    return f"vllm-0.22.1/v1/attention/backends/flashinfer.py+dflash-fi-{tag}"


class _PatchedFlashInferLoader(importlib.abc.Loader):
    def __init__(self, step: int, source: str | None = None, tag: str | None = None):
        self.step, self.source, self.tag = step, source, tag or f"step{step}"

    def get_source(self, fullname: str) -> str:
        from dflash_fi.steps import patched_source

        return patched_source(self.step) if self.source is None else self.source

    def exec_module(self, module) -> None:
        source = self.get_source(module.__name__)
        filename = source_filename(self.tag)
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


def import_source(name: str, source: str, step: int):
    """`source`, a flashinfer.py standing for step `step` (a reader's exercise), imported as the real module
    `dflash_fi.patched.<name>`, replacing any earlier one; tracebacks name it `...flashinfer.py+dflash-fi-<name>`."""
    spec = importlib.machinery.ModuleSpec(f"{__name__}.{name}", _PatchedFlashInferLoader(step, source, name),
                                          origin="dflash-fi")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as the import system does: vLLM imports the backend's class by its name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[spec.name]
        raise
    return module


if not any(isinstance(f, _PatchedFlashInferFinder) for f in sys.meta_path):
    sys.meta_path.append(_PatchedFlashInferFinder())
