"""What a draft's metadata builds made, as the kernel benchmark names the kernel that runs it: the route a draft took
(XQA, the kept-plan fa2 wrapper, FlashAttention), read from the engine's records (`DraftRoute`), never guessed."""

from __future__ import annotations

from dflash_fi.records.outputs import BatchRun

# (the metadata's class, a FlashInfer wrapper's kernel backend) -> the kernel-bench row that times that kernel.
ROUTE_KERNELS = {("XQADraft", None): "flashinfer-xqa", ("FIPrefill", "fa2"): "dflash-fi-final",
                 ("FIPrefill", "fa3"): "flashinfer-fa3", ("FlashAttentionMetadata", None): "vllm-flash-attn"}


def _builds(runs: list[BatchRun]) -> dict[tuple, int]:
    """(kernel-bench name or None, the requests drafted for) -> builds, over the turns' draft builds."""
    counts: dict = {}
    for b in runs:
        for g in b.generates:
            for r in g.draft_attention.routes if g.draft_attention else ():
                key = (ROUTE_KERNELS.get((r.metadata, r.wrapper_backend)), r.num_reqs)
                counts[key] = counts.get(key, 0) + r.builds
    return counts


def kernel_of(b: BatchRun, final: bool = True) -> str | None:
    """The kernel-bench name of what most of the turn's draft builds made (None: not recorded, or a route this table
    does not know); `final` False: an earlier step's draft, whose fa2 wrapper is FlashInfer's own, no plan kept."""
    totals: dict = {}
    for (kernel, _), n in _builds([b]).items():
        totals[kernel] = totals.get(kernel, 0) + n
    kernel = max(totals, key=totals.get) if totals else None
    return "flashinfer-fa2" if kernel == "dflash-fi-final" and not final else kernel


def builds_by_requests(runs: list[BatchRun]) -> list[dict]:
    """[{"kernel", "num_reqs", "builds"}] over the turns' draft builds: which kernel the builds made at each request
    count (a batch drains as its requests finish, so a turn's builds span several)."""
    counts = sorted(_builds(runs).items(), key=lambda item: str(item[0]))
    return [{"kernel": k, "num_reqs": n, "builds": c} for (k, n), c in counts]


def most_common(kernels: list[str | None]) -> str | None:
    """The kernel most of the rounds ran (None where none was recorded)."""
    known = [k for k in kernels if k]
    return max(set(known), key=known.count) if known else None
