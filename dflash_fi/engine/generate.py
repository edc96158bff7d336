"""Generation inside one engine process, and what each generate records (`GenerateResult`).

For every generate: the tokens, their sha256, time and tokens/s, TPOT from vLLM's per-request timestamps,
vLLM's own spec-decode counters over the generate (tau, per-position acceptance), the host time of the
attention metadata builds per builder, the intervals between the engine's steps, and, when the spec asks for
the target's logprobs, the near-ties: per request, the output positions where the target's two best candidates
were less than NEAR_TIE_CAP apart (position, gap in nats). Where two engines' outputs part, the near-tie rule
looks up the gap there (`dflash_fi.evidence.near_ties`).
"""

from __future__ import annotations

import hashlib
import json
import time

from dflash_fi.engine.instruments import build_times, plan_watch, step_times
from dflash_fi.engine.records import (Acceptance, BatchRun, BuildKey, BuildTiming, GenerateResult, PlanWatch, StepTimes,
                                      decoding_steps)
from dflash_fi.engine.spec import RunSpec

# Gaps (nats between the target's best and second-best candidate) recorded per output position; the rest are
# confident choices. Far above any near-tie margin the evidence uses, far below a confident token's gap.
NEAR_TIE_CAP = 1.0


def counters(llm) -> dict:
    """vLLM's cumulative spec-decode counters."""
    values = {}
    for metric in llm.get_metrics():
        if metric.name.startswith("vllm:spec_decode"):
            values[metric.name] = getattr(metric, "values", None) or getattr(metric, "value", None)
    return {
        "num_drafts": values.get("vllm:spec_decode_num_drafts") or 0,
        "num_draft_tokens": values.get("vllm:spec_decode_num_draft_tokens") or 0,
        "num_accepted_tokens": values.get("vllm:spec_decode_num_accepted_tokens") or 0,
        "per_pos": list(values.get("vllm:spec_decode_num_accepted_tokens_per_pos") or []),
    }


def acceptance(before: dict, after: dict) -> Acceptance:
    """What happened between two counter readings: drafts, accepted tokens, acceptance per draft position."""
    drafts = after["num_drafts"] - before["num_drafts"]
    per_pos = [a - b for a, b in zip(after["per_pos"], before["per_pos"] or [0] * len(after["per_pos"]))]
    return Acceptance(num_drafts=drafts, num_draft_tokens=after["num_draft_tokens"] - before["num_draft_tokens"],
                      num_accepted_tokens=after["num_accepted_tokens"] - before["num_accepted_tokens"],
                      per_position=tuple(a / drafts for a in per_pos) if drafts else ())


def tpot_ms(outputs) -> float | None:
    """Mean time per output token after the first, from vLLM's per-request timestamps."""
    values = []
    for o in outputs:
        m, n = getattr(o, "metrics", None), len(o.outputs[0].token_ids)
        first, last = getattr(m, "first_token_ts", 0) or 0, getattr(m, "last_token_ts", 0) or 0
        if n > 1 and last > first > 0:
            values.append((last - first) / (n - 1) * 1000)
    return round(sum(values) / len(values), 4) if values else None


def near_ties(output, cap: float = NEAR_TIE_CAP) -> tuple[tuple[int, float], ...]:
    """(position, gap) for each output position where the target's top two logprobs are within `cap`."""
    ties = []
    for position, candidates in enumerate(output.outputs[0].logprobs or []):
        best = sorted((c.logprob for c in candidates.values()), reverse=True)[:2]
        if len(best) == 2 and best[0] - best[1] < cap:
            ties.append((position, round(best[0] - best[1], 4)))
    return tuple(ties)


def builds_of(snapshot: list[dict]) -> tuple[BuildTiming, ...]:
    return tuple(BuildTiming(BuildKey(**b["key"]), b["builds"], round(b["seconds"], 6), b["largest_tokens"],
                             b["above_largest_graph"]) for b in snapshot)


def generate(llm, requests: list[tuple], speculative: bool, logprobs: int | None = None,
             detokenize: bool = True, watch_plans: bool = False) -> GenerateResult:
    """One `llm.generate` over (prompt, max_tokens) requests, greedy; its record (with `watch_plans`, what
    `instruments.plan_watch`, installed, counted)."""
    from vllm import SamplingParams

    params = [SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=detokenize,
                             logprobs=logprobs) for _, max_tokens in requests]
    before = counters(llm) if speculative else None
    llm.collective_rpc(build_times)  # reset
    llm.collective_rpc(step_times)
    if watch_plans:
        llm.collective_rpc(plan_watch)
    t0 = time.perf_counter()
    outputs = llm.generate([prompt for prompt, _ in requests], params, use_tqdm=False)
    seconds = time.perf_counter() - t0
    builds = builds_of(llm.collective_rpc(build_times)[0])
    intervals = llm.collective_rpc(step_times)[0]
    plans = tuple(PlanWatch(**w) for w in llm.collective_rpc(plan_watch)[0]) if watch_plans else None
    tokens = tuple(tuple(o.outputs[0].token_ids) for o in outputs)
    accepted = acceptance(before, counters(llm)) if speculative else None
    return GenerateResult(
        num_requests=len(requests), generate_s=round(seconds, 4),
        output_tokens_per_s=round(sum(map(len, tokens)) / seconds, 1),
        # the engine's own steps where they were counted (every model-runner call, prefills included)
        steps=len(intervals) + 1 if intervals else decoding_steps(accepted, len(requests), max(n for _, n in requests)),
        tokens_sha256=hashlib.sha256(json.dumps(tokens).encode()).hexdigest(), tokens=tokens,
        tpot_ms=tpot_ms(outputs), acceptance=accepted,
        near_ties=tuple(near_ties(o) for o in outputs) if logprobs else None,
        near_tie_cap=NEAR_TIE_CAP if logprobs else None, builds=builds, step_times=StepTimes.of(intervals),
        plans=plans)


# Tokens of the generate that a resumed engine runs, unmeasured, before its turn's measured ones.
SETTLE_TOKENS = 16


def benchmark_batch(llm, prompts: list, spec: RunSpec, batch: int, warm_up: bool, settle: bool = False,
                    round_index: int | None = None) -> BatchRun:
    """One turn of the benchmark at batch size b: the first b prompts together, `repeats` times. Batch 1 decodes one
    prompt alone: in a benchmark in rounds (`round_index`) one of the first `batch1_prompts`, the next every two rounds
    (so each is decoded in either turn order), else each of them in turn. Before them, unmeasured: with `warm_up` a
    whole generate (graphs, allocator, caches), else with `settle` a short one (an engine just continued from a stop:
    its threads and caches wake there, not in the measurement). Tokens are dropped (each generate keeps their hash)."""
    plan, new_tokens = spec.bench, spec.max_new_tokens
    if batch == 1:
        alone = (prompts[: plan.batch1_prompts] if round_index is None
                 else [prompts[(round_index - 1) // 2 % plan.batch1_prompts]])
        groups = [[(p, new_tokens)] for p in alone]
    else:
        groups = [[(p, new_tokens) for p in prompts[:batch]]]
    if warm_up or settle:
        first = groups[0] if warm_up else [(p, SETTLE_TOKENS) for p, _ in groups[0]]
        generate(llm, first, spec.run.speculative, detokenize=False)
    generates = [generate(llm, group, spec.run.speculative, detokenize=False).without_tokens()
                 for _ in range(plan.repeats) for group in groups]
    return BatchRun(batch, tuple(generates))


def benchmark_round(llm, prompts: list, spec: RunSpec, warm_up: bool) -> tuple[BatchRun, ...]:
    """Every batch size of the plan, one turn each (`benchmark_batch`)."""
    return tuple(benchmark_batch(llm, prompts, spec, batch, warm_up) for batch in spec.bench.batch_sizes)
