"""Generation inside one engine process, and what each generate records.

For every generate: the tokens, their sha256, time and tokens/s, TPOT from vLLM's per-request timestamps,
vLLM's own spec-decode counters over the generate (tau, per-position acceptance), the host time of the
attention metadata builds per decoding step, and, when the spec asks for the target's logprobs, the near-ties:
per request, the output positions where the target's two best candidates were less than NEAR_TIE_CAP apart
(position, gap in nats). Where two engines' outputs part, the near-tie rule looks up the gap there
(`dflash_fi.evidence.near_ties`).
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time

from dflash_fi.engine.instruments import build_times

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


def acceptance(before: dict, after: dict) -> dict:
    """tau and per-position acceptance over what happened between two counter readings."""
    drafts = after["num_drafts"] - before["num_drafts"]
    accepted = after["num_accepted_tokens"] - before["num_accepted_tokens"]
    per_pos = [a - b for a, b in zip(after["per_pos"], before["per_pos"] or [0] * len(after["per_pos"]))]
    return {
        "num_drafts": drafts,
        "num_draft_tokens": after["num_draft_tokens"] - before["num_draft_tokens"],
        "num_accepted_tokens": accepted,
        "tau": 1 + accepted / drafts if drafts else None,
        "per_position_acceptance": [a / drafts for a in per_pos] if drafts else None,
    }


def tpot_ms(outputs) -> float | None:
    """Mean time per output token after the first, from vLLM's per-request timestamps."""
    values = []
    for o in outputs:
        m, n = getattr(o, "metrics", None), len(o.outputs[0].token_ids)
        first, last = getattr(m, "first_token_ts", 0) or 0, getattr(m, "last_token_ts", 0) or 0
        if n > 1 and last > first > 0:
            values.append((last - first) / (n - 1) * 1000)
    return round(sum(values) / len(values), 4) if values else None


def near_ties(output, cap: float = NEAR_TIE_CAP) -> list[list]:
    """[position, gap] for each output position where the target's top two logprobs are within `cap`."""
    ties = []
    for position, candidates in enumerate(output.outputs[0].logprobs or []):
        best = sorted((c.logprob for c in candidates.values()), reverse=True)[:2]
        if len(best) == 2 and best[0] - best[1] < cap:
            ties.append([position, round(best[0] - best[1], 4)])
    return ties


def generate(llm, requests: list[tuple], speculative: bool, logprobs: int | None = None,
             detokenize: bool = True) -> dict:
    """One `llm.generate` over (prompt, max_tokens) requests, greedy; its record."""
    from vllm import SamplingParams

    params = [SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=detokenize,
                             logprobs=logprobs) for _, max_tokens in requests]
    before = counters(llm) if speculative else None
    llm.collective_rpc(build_times)  # reset
    t0 = time.perf_counter()
    outputs = llm.generate([prompt for prompt, _ in requests], params, use_tqdm=False)
    seconds = time.perf_counter() - t0
    builds = llm.collective_rpc(build_times)[0]
    tokens = [list(o.outputs[0].token_ids) for o in outputs]
    run = {
        "num_requests": len(requests),
        "generate_s": round(seconds, 4),
        "output_tokens_per_s": round(sum(map(len, tokens)) / seconds, 1),
        "tpot_ms": tpot_ms(outputs),
        "tokens": tokens,
        "tokens_sha256": hashlib.sha256(json.dumps(tokens).encode()).hexdigest(),
    }
    if logprobs:
        run["near_ties"], run["near_tie_cap"] = [near_ties(o) for o in outputs], NEAR_TIE_CAP
    if speculative:
        run.update(acceptance(before, counters(llm)))
    steps = run["num_drafts"] / len(requests) if speculative else max(n for _, n in requests)
    run["metadata_build_ms_per_step"] = {w: round(e[1] * 1000 / max(steps, 1), 4) for w, e in builds.items()}
    run["metadata_builds_per_step"] = {w: round(e[0] / max(steps, 1), 2) for w, e in builds.items()}
    run["largest_build_tokens"] = {w: e[2] for w, e in builds.items()}
    run["builds_larger_than_largest_graph"] = {w: e[3] for w, e in builds.items()}
    return run


def benchmark_round(llm, prompts: list, spec: dict, warm_up: bool) -> list[dict]:
    """One round of the benchmark, per batch size b: the first b prompts together, `repeats` times (after a
    warm-up generate when `warm_up`); batch 1 decodes `spec["extra"]["batch1_prompts"]` prompts one at a time
    instead, and reports the median. Each row keeps every generate's tokens/s."""
    rows, new_tokens = [], spec["max_new_tokens"]
    detokenize = spec["load_format"] != "dummy"

    def timed(requests):
        return generate(llm, requests, spec["speculative"], detokenize=detokenize)

    for batch in spec["batch_sizes"]:
        groups = ([[(p, new_tokens)] for p in prompts[: spec["extra"].get("batch1_prompts", 1)]] if batch == 1
                  else [[(p, new_tokens) for p in prompts[:batch]]])
        if warm_up:
            timed(groups[0])  # graphs, allocator, caches
        runs = [timed(group) for _ in range(spec["repeats"]) for group in groups]
        median = statistics.median(r["output_tokens_per_s"] for r in runs)
        typical = min(runs, key=lambda r: abs(r["output_tokens_per_s"] - median))
        rows.append({
            "batch": batch, **{k: v for k, v in typical.items() if k not in ("tokens",)},
            "output_tokens_per_s": median,
            "generates_tokens_per_s": [r["output_tokens_per_s"] for r in runs],
            "generates_step_ms": [round(r["generate_s"] * 1000 / _steps(r, spec, len(group)), 4)
                                  for r, group in zip(runs, groups * spec["repeats"])],
            "tokens_sha256_per_generate": [r["tokens_sha256"] for r in runs],
        })
    return rows


def _steps(run: dict, spec: dict, num_requests: int) -> float:
    """Decoding steps of one generate: target forwards per request."""
    if spec["speculative"]:
        return max(run["num_drafts"] / num_requests, 1)
    return spec["max_new_tokens"]
