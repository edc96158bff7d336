"""The engines behind notebook 08, as a reader meets them: the engine benchmark's engines as its summary recorded them
(their specs and what each resolved, the draft's backend and vLLM's CUDA-graph mode, for `show_engine_calls`), and,
before a pass recorded them, the same engines described in words from their run ids (records only: no proof here);
whether each shape's route is the one its rule gives."""

from __future__ import annotations

from dflash_fi.figures.costs import PAIR_NAMES
from dflash_fi.records.runs import Pair, RunId, label

# What each engine is for in the benchmark (rendering only).
_ROLE = {"a": "the FLASH_ATTN draft: what vLLM's selector picks on Hopper",
         "aa": "its twin: the A/A pair, what noise alone gives", "final": "the final FlashInfer draft (step 9)",
         "none": "RTX 4090 path: no speculation (vLLM's own FlashInfer)",
         "pr": "RTX 4090 path: the PR's draft (step 4)", "path": "RTX 4090 path: the final draft"}


def planned_engines(final_step: int) -> list[tuple[RunId, str]]:
    """The benchmark's engines, (run, role): per pair the FLASH_ATTN draft, its twin and the final FlashInfer draft,
    all with vLLM's CUDA graphs; on the embedded pair also the RTX 4090 path (FlashAttention 2 forced, an FP8 cache,
    the draft's backend left to the selector)."""
    rows = []
    for pair in (Pair.EMBEDDED, Pair.QWEN3_4B_SHAPE):
        rows += [(RunId(draft_backend="FLASH_ATTN", cuda_graphs=True, pair=pair), "a"),
                 (RunId(draft_backend="FLASH_ATTN", cuda_graphs=True, pair=pair, replica=1), "aa"),
                 (RunId(step=final_step, cuda_graphs=True, pair=pair), "final")]
    path = dict(draft_backend=None, kv_cache_dtype="fp8", flash_attn_version=2, cuda_graphs=True)
    rows += [(RunId(speculative=False, **path), "none"), (RunId(step=4, **path), "pr"),
             (RunId(step=final_step, **path), "path")]
    return rows


def planned_table(final_step: int) -> str:
    """Markdown: the engines the benchmark starts, what each sets and what it is for."""
    lines = ["| engine | pair | draft backend asked for | KV cache | FlashAttention version | what it is for |",
             "|---|---|---|---|---|---|"]
    for run, role in planned_engines(final_step):
        asked = "-" if not run.speculative else run.draft_backend or "left to the selector"
        lines.append(f"| {label(run)} | {PAIR_NAMES.get(run.pair.value, run.pair.value)} | {asked} | {run.kv_cache_dtype} | "
                     f"{run.flash_attn_version or 'vLLM picks'} | {_ROLE[role]} |")
    return "\n".join(lines)


def recorded_engines(summary=None) -> list:
    """The engine benchmark's EngineRecords as its section's rows hold them (`dflash-fi bench e2e --record` keeps
    every engine there, beside the section), in the planned order (each pair's FLASH_ATTN draft, its twin, the final
    draft); `NoRecord` where there are none, or where it ran other code than the code at hand."""
    from dflash_fi.errors import NoRecord
    from dflash_fi.freshness import stale
    from dflash_fi.records.engine import EngineRecord
    from dflash_fi.records.summary import Section, read

    summary = summary or read()
    engines = summary.rows(Section.BENCH_E2E).get("engines")
    if not engines:
        raise NoRecord("the engine benchmark recorded no engines")
    if stale(summary, [Section.BENCH_E2E]):
        raise NoRecord("the engine benchmark ran other code")
    order = {run: i for i, (run, _) in enumerate(planned_engines(_final_step()))}
    return sorted((EngineRecord.from_json(e) for e in engines), key=lambda r: order.get(r.run, len(order)))


def _final_step() -> int:
    from dflash_fi.steps import FINAL_STEP

    return FINAL_STEP


def resolved_columns(records: list) -> dict[str, dict[str, str]]:
    """Per engine (its label): the draft's backend as vLLM resolved it and vLLM's CUDA-graph mode and FlashAttention
    version, where the records hold them: columns for `show_engine_calls`."""
    from dflash_fi.records.engine import short_backend

    def draft(r) -> str:
        return ", ".join(sorted({short_backend(b) for b in r.draft_backends})) or (
            "-" if not r.run.speculative else "not recorded")
    return {label(r.run): {"draft backend, resolved": draft(r), "CUDA-graph mode": r.cudagraph_mode or "not recorded",
                           "FlashAttention version": str(r.flash_attn_version or "not recorded")} for r in records}


def engines_verdict(records: list, final_step: int) -> str:
    """Whether the engines resolved what each comparison needs: per pair, one CUDA-graph mode and the draft's backend
    the same in the FLASH_ATTN draft and its twin and another in the final draft; on the RTX 4090 path, FlashAttention
    2 in all three engines and both drafts on FlashInfer (read from what vLLM resolved, not from what was asked)."""
    roles, drafts = dict(planned_engines(final_step)), resolved_columns(records)
    parts, alike = [], True
    for pair in dict.fromkeys(r.run.pair for r in records if roles.get(r.run) in ("a", "aa", "final")):
        name = PAIR_NAMES.get(pair.value, pair.value)
        cost = {roles[r.run]: r for r in records if r.run.pair is pair and roles.get(r.run) in ("a", "aa", "final")}
        if set(cost) != {"a", "aa", "final"}:
            parts.append(f"{name}: not all three recorded")
            alike = False
            continue
        modes = sorted({str(r.cudagraph_mode) for r in cost.values()})
        backend = {role: drafts[label(r.run)]["draft backend, resolved"] for role, r in cost.items()}
        alike &= len(modes) == 1 and backend["a"] == backend["aa"] != backend["final"]
        parts.append(f"{name}: CUDA graphs {' / '.join(modes)}, the FLASH_ATTN draft and its twin on "
                     f"{backend['a']}, the final draft on {backend['final']}")
    path = {roles[r.run]: r for r in records if roles.get(r.run) in ("none", "pr", "path")}
    if path:
        fa2 = set(path) == {"none", "pr", "path"} and all(r.flash_attn_version == 2 for r in path.values())
        flashinfer = all(path.get(k) and {b.name for b in path[k].draft_backends} == {"FLASHINFER"} for k in ("pr", "path"))
        alike &= fa2 and flashinfer
        modes = path_modes(records, final_step)
        parts.append(f"the RTX 4090 path: FlashAttention {'2 in all three engines' if fa2 else 'NOT 2 in every engine'}"
                     f", {'both drafts on FlashInfer' if flashinfer else 'NOT both drafts on FlashInfer'}, CUDA graphs "
                     f"{modes['none']} without speculation, {modes['pr']} with step 4's draft, {modes['path']} with the "
                     "final draft")
    if not alike:
        return "; ".join(parts) + ": NOT what the comparisons need (they compare more than the draft)"
    return "; ".join(parts) + (". Each pair's three engines differ in the draft alone" + (
        "; the RTX 4090 path's run as its users would, whatever vLLM resolves there" if path else "") + ".")


def path_modes(records: list, final_step: int) -> dict[str, str]:
    """The RTX 4090 path's CUDA-graph modes as vLLM resolved them, by role: 'none', 'pr' (step 4), 'path' (final)."""
    roles = dict(planned_engines(final_step))
    found = {roles[r.run]: str(r.cudagraph_mode or "not recorded") for r in records if r.run in roles}
    return {role: found.get(role, "not recorded") for role in ("none", "pr", "path")}


def route_agrees(costs, shape, capability: tuple | None = None) -> bool | None:
    """Whether the routes recorded at `shape` are the ones step 9's rule (`dflash_fi.lab.draft_route`) gives, on the
    benchmark's GPU or at `capability`: each build's at its own request count where recorded, else the turn's main
    route at the batch; None where the drafter's heads were not recorded."""
    from dflash_fi.lab.draft_route import final_draft_route
    from dflash_fi.lab.routes import Prefill

    if shape.heads is None:
        return None
    capability = tuple(capability or map(int, costs.compute_capability.split(".")))

    def follows(kernel, num_reqs: int) -> bool:
        rule = final_draft_route(capability, "auto", *shape.heads, num_reqs)
        # the kept-plan fa2 path is the final step's FlashInfer wrapper: the benchmarks name it either way
        return kernel in ({"flashinfer-xqa"} if rule is Prefill.XQA else {"dflash-fi-final", "flashinfer-fa2"})

    # each build at the requests it drafted for (the batch drains as requests finish); else the turn's main route
    by_requests = [b for b in shape.builds if b.get("num_reqs") is not None]
    if by_requests:
        return all(follows(b["kernel"], b["num_reqs"]) for b in by_requests)
    return follows(shape.route, shape.batch)


def routes_checked(costs) -> tuple[bool, str] | None:
    """(every recorded route is its rule's, the shapes where one is not); None where `costs` or the drafter's heads
    are not recorded."""
    agrees = {s.name: route_agrees(costs, s) for s in costs.shapes} if costs else {}
    if not agrees or None in agrees.values():
        return None
    return all(agrees.values()), ", ".join(name for name, ok in agrees.items() if not ok)
