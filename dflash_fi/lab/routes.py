"""What the CPU lab finds a batch becomes, as types: the path of its decode and prefill requests, vLLM's refusals as
the exceptions vLLM raised, the warnings a step logs as the hunk that logs them. Text only at the edge: `label`,
`route_line` and `route_cell` render a route for a reader; code compares the types.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from enum import Enum, auto

from dflash_fi.lab.batches import Batch
from dflash_fi.steps.patching import Hunk
from dflash_fi.vocabulary import sm


class Decode(Enum):
    """Where `build()` sends a batch's decode requests (`metadata.decode`)."""

    FLASHINFER = auto()  # FlashInfer's decode wrapper (FIDecode)
    TRTLLM = auto()  # TRTLLM-gen decode (TRTLLMDecode), Blackwell only


class Prefill(Enum):
    """Which prefill object `build()` plans a batch's prefill requests on (`metadata.prefill`)."""

    SHARED_CAUSAL = auto()  # the builder's one causal wrapper, shared by every causal layer group
    NON_CAUSAL = auto()  # step 3's separate wrapper, planned causal=False
    CUDA_GRAPH = auto()  # step 6's wrapper of one captured batch size
    TRTLLM = auto()  # TRTLLM-gen prefill (TRTLLMPrefill), causal only
    XQA = auto()  # step 9's DFlash draft block on FlashInfer's XQA kernel (XQADraft): no wrapper, no plan


@dataclass(frozen=True)
class Raised:
    """An exception vLLM's code raised, as raised: `cls` for code to test (`issubclass`), `error` for a reader. Two
    are equal when vLLM raised the same class with the same arguments."""

    error: BaseException = field(compare=False)
    cls: type[BaseException] = field(init=False)
    args: tuple = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "cls", type(self.error))
        object.__setattr__(self, "args", self.error.args)


@dataclass(frozen=True)
class LoggedWarning:
    """A warning vLLM's logging emitted, by where it was logged: `hunk`, the step hunk whose line logged it (None: a
    line of vLLM's own), and the function and file line. `message` is for a reader."""

    hunk: Hunk | None
    function: str
    path: str
    line: int
    message: str = field(compare=False)


class WarningCollector(logging.Handler):
    """Keeps the warning records a logger emits (vLLM's, in the lab); `hunk_of(path, line)` names the hunk behind a
    line of a patched module."""

    def __init__(self, hunk_of=lambda path, line: None):
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self._hunk_of = hunk_of

    def emit(self, record):
        self.records.append(record)

    @property
    def warnings(self) -> list[LoggedWarning]:
        return [LoggedWarning(self._hunk_of(r.pathname, r.lineno), r.funcName, r.pathname, r.lineno, r.getMessage())
                for r in self.records]


@dataclass(frozen=True)
class Route:
    """One batch through a step's real `FlashInferMetadataBuilder.build()`. `selection_refused`: vLLM's selector
    refused FLASHINFER for the batch's role (the lab built the layers on it anyway). `refused`: what `build()` raised
    (then nothing else is set). `metadata_causal` is None where the metadata has no `causal` field (before step 2);
    `dflash_check` is DFlash's own check of a draft batch's metadata: None passed, else the AssertionError raised."""

    batch: Batch
    selection_refused: Raised | None
    reorder_batch_threshold: int | None
    refused: Raised | None = None
    num_decodes: int = 0
    num_prefills: int = 0
    num_decode_tokens: int = 0
    num_prefill_tokens: int = 0
    decode: Decode | None = None
    prefill: Prefill | None = None
    graph_batch_size: int | None = None  # the CUDA-graph wrapper's fixed batch size
    prefill_kernel: str | None = None  # FlashInfer's `backend` of the prefill wrapper ("auto", "fa2")
    plan_causal: bool | None = None  # the `causal` handed to the prefill wrapper's last plan()
    cascade: bool = False
    metadata_causal: bool | None = None
    host_seq_lens_copied: bool | None = None  # draft batches: exact host lengths (copied) or an upper bound
    dflash_check: Raised | None = None

    @property
    def role(self) -> str:
        return self.batch.role

    @property
    def dflash_check_passed(self) -> bool | None:
        """True or False for a built draft batch; None for a target batch or a refused one."""
        if self.role != "draft" or self.refused is not None:
            return None
        return self.dflash_check is None


@dataclass(frozen=True)
class RoutingReport:
    step: int
    capability: tuple[int, int]
    trtllm_available: bool
    kv_cache_dtype: str
    cuda_graphs: bool
    routes: tuple[Route, ...]
    warnings: tuple[LoggedWarning, ...]  # what the module logged; `step_warnings` are the steps' own

    @property
    def step_warnings(self) -> tuple[LoggedWarning, ...]:
        """The warnings logged by lines the steps' hunks added (stock vLLM's flashinfer.py logs none)."""
        return tuple(w for w in self.warnings if w.hunk is not None)

    def to_json(self) -> dict:
        """JSON-ready data (`dflash-fi routing --json`): paths by enum name, exceptions by class and message, warnings
        by the hunk that logs them."""
        return {"step": self.step, "capability": sm(self.capability), "trtllm_available": self.trtllm_available,
                "kv_cache_dtype": self.kv_cache_dtype, "cuda_graphs": self.cuda_graphs,
                "routes": [{f.name: _plain(getattr(r, f.name)) for f in fields(r)} for r in self.routes],
                "step_warnings": [{f.name: _plain(getattr(w, f.name)) for f in fields(w)} for w in self.step_warnings]}


LABELS = {
    Decode.FLASHINFER: "FlashInfer decode wrapper", Decode.TRTLLM: "TRTLLM decode",
    Prefill.SHARED_CAUSAL: "FlashInfer prefill (shared causal wrapper)",
    Prefill.NON_CAUSAL: "FlashInfer prefill (separate non-causal wrapper)",
    Prefill.CUDA_GRAPH: "FlashInfer prefill (CUDA-graph wrapper, batch size {size})", Prefill.TRTLLM: "TRTLLM prefill",
    Prefill.XQA: "FlashInfer XQA (no plan)",
}


def label(path: Decode | Prefill | None, route: Route | None = None) -> str:
    """A path as a reader reads it (a CUDA-graph wrapper with its batch size)."""
    if path is None:
        return "-"
    return LABELS[path].format(size=route.graph_batch_size if route else "?")


def paths(route: Route) -> str:
    return " + ".join(label(p, route) for p in (route.decode, route.prefill) if p is not None)


def refusal(raised: Raised) -> str:
    return f"{raised.cls.__name__}: {raised.error}"


def dflash_check(route: Route, detail: bool = False) -> str:
    """DFlash's own check of a draft batch's metadata, as a table shows it: "pass", "fail" (and why, with detail),
    "-" where it does not apply."""
    if route.dflash_check_passed is None:
        return "-"
    return "pass" if route.dflash_check_passed else f"fail: {route.dflash_check.error}" if detail else "fail"


def metadata_causal(route: Route) -> str:
    return "absent" if route.metadata_causal is None else str(route.metadata_causal)


def route_line(route: Route) -> str:
    """One route, on one line, in full."""
    if route.refused is not None:
        return f"{route.batch.name:<40} {refusal(route.refused)}"
    plan = "" if route.plan_causal is None else f", plan(causal={route.plan_causal}, {route.prefill_kernel})"
    check = f", DFlash check {dflash_check(route, detail=True)}" if route.dflash_check_passed is not None else ""
    return (f"{route.batch.name:<40} {route.num_decodes} decode + {route.num_prefills} prefill requests via "
            f"{paths(route)}{plan}, metadata.causal={metadata_causal(route)}{check}")


def route_cell(route: Route) -> str:
    """One route, short, for a table cell."""
    if route.refused is not None:
        return f"{route.refused.cls.__name__} (refused)"
    plan = "" if route.plan_causal is None else f", plan causal={route.plan_causal}"
    draft = (f"; metadata.causal={metadata_causal(route)}; DFlash check {dflash_check(route)}"
             if route.dflash_check_passed is not None else "")
    return f"{route.num_decodes} decode + {route.num_prefills} prefill: {paths(route)}{plan}{draft}"


def _plain(value):
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, Raised):
        return {"type": value.cls.__name__, "message": str(value.error)}
    return value.name if isinstance(value, Batch) else value.why if isinstance(value, Hunk) else value
