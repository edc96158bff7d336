"""Notebook 06's tables and verdicts: FlashInfer's CUDA-graph claims and the mode vLLM resolves (steps 4-6, from
`dflash_fi.lab.today`), step 5's draft kernel (the kernel benchmark), step 6's engines (the walkthrough's records).

    modes_verdict(claims)      what steps 4-6 claim on SM 9.0 and 10.0, and the mode each engine resolves
    replay_table(bites, batches), replay_verdict(bites, changed)   the batches #48167's claim changes
    fa2_verdict(gpu, over)     why step 5 pins the draft to FlashInfer's fa2 kernel
    wrapper_verdict(claims, moved)   the mode step 6 wins back, and the one batch whose wrapper moves
    engines_table(records), engines_verdict(...)   the engines run, their modes and tau (`tau_verdict`,
                               `identical_outputs`)
    failing(checks)            the walkthrough checks that failed, one line each, for a check's detail
    closing_verdict(claims, moved)
"""

from __future__ import annotations

from dflash_fi.vocabulary import BLACKWELL, HOPPER


def modes_verdict(claims: dict) -> str:
    """From `graph_claims()`: SM 9.0's claims and modes, then SM 10.0's draft-config claims (where #48167 bites)."""
    from dflash_fi.lab.today import by_step

    claim, mode = (by_step(claims, HOPPER, f) for f in ("flashinfer_claim", "resolved_mode"))
    draft = by_step(claims, BLACKWELL, "flashinfer_claim_draft_config")
    same = claim[4] if claim[4] == claim[5] else f"{claim[4]} and {claim[5]}"
    return (f"on SM 9.0 steps 4 and 5 claim {same}; the engine resolves {mode[4]}: a FlashInfer draft costs every "
            "layer its FULL graphs (notebook 08's RTX 4090 path compares the PR's step-4 draft with the final one, "
            f"graphs included); step 6 resolves {mode[6]}. On SM 10.0 with TRTLLM, step 4 claims {draft[4]} even for "
            f"the draft's config, step 5 {draft[5]}: that is #48167, next.")


def replay_verdict(bites: dict, changed: list) -> str:
    """`bites` as `replay_table`'s, `changed` the batches whose row differs between steps 4 and 5."""
    from dflash_fi.lab.batches import STANDARD_BATCHES

    roles = {b.role for b in changed}
    kept = {b.role for b in STANDARD_BATCHES if b not in changed}
    whose = ", the target's," if kept == {"target"} else ""
    who = ("both DFlash draft batches" if roles == {"draft"} and len(changed) == 2
           else f"{'/'.join(sorted(roles))} batches")
    before, after = ("/".join(sorted({bites[s][b].graph for b in changed})) for s in (4, 5))
    return (f"{len(changed)} of {len(STANDARD_BATCHES)} batches change, {who}: asked per group, step 4 would put "
            f"FlashInfer's non-causal prefill in a {before} graph, replaying the plan of capture time for every later "
            f"block; #48167 makes it {after}. The other {len(STANDARD_BATCHES) - len(changed)}{whose} keep their "
            "paths, claims and graphs.")


def _batch_words(batch) -> str:
    """A lab batch in plain words: whose, which kind, how many requests."""
    from dflash_fi.lab.batches import DECODE, DRAFT, DRAFT_ONE, MIXED, PREFILL, VERIFY

    kind = {DRAFT: "draft batch", DRAFT_ONE: "draft batch", DECODE: "decode batch", PREFILL: "prefill batch",
            VERIFY: "verify batch", MIXED: "mixed batch"}[batch]
    n = len(batch.query_lens)
    return f"the {batch.role}'s {kind} of {n} request{'s' * (n > 1)}"


def _wrapper_words(route) -> str:
    from dflash_fi.lab.routes import Prefill, path_label

    if route.prefill is Prefill.CUDA_GRAPH:
        return f"the CUDA-graph prefill wrapper (batch size {route.graph_batch_size})"
    return path_label(route.prefill, route)


def wrapper_verdict(claims: dict, moved: list) -> str:
    """From `graph_claims()` and `wrappers_moved(5, 6)`: SM 9.0's modes at steps 5 and 6, and what moved."""
    from dflash_fi.lab.batches import STANDARD_BATCHES
    from dflash_fi.lab.today import by_step

    mode, with_fi = (by_step(claims, HOPPER, f) for f in ("resolved_mode", "resolved_mode_flashinfer_target"))
    moves = "; ".join(f"{_batch_words(r.batch)} moves to {_wrapper_words(r)}" for r in moved) or "no batch moves"
    return (f"step 5 resolves {mode[5]}, step 6 {mode[6]} (with a FlashInfer target too: {with_fi[6]}). Of the CPU "
            f"lab's {len(STANDARD_BATCHES)} batches {'only ' * (len(moved) == 1)}{moves}.")


def failing(checks: list) -> str:
    """The failed ones of `checks` (records.checks.Check), one line each; what to say when there are none at all."""
    if not checks:
        return "no walkthrough check of these engines recorded"
    return "\n".join(c.line() for c in checks if not c.passed)


def closing_verdict(claims: dict, moved: list) -> str:
    """From `graph_claims()` and `wrappers_moved(5, 6)`: each mode told by the claim that sets it, and #48167 told
    at the SMs where steps 4 and 5 claim differently (either config)."""
    from dflash_fi.lab.batches import STANDARD_BATCHES
    from dflash_fi.lab.today import by_step
    from dflash_fi.upstream import claim
    from dflash_fi.vocabulary import sm

    claim9, mode9 = (by_step(claims, HOPPER, f) for f in ("flashinfer_claim", "resolved_mode"))
    draft10 = by_step(claims, BLACKWELL, "flashinfer_claim_draft_config")
    fields = ("flashinfer_claim", "flashinfer_claim_draft_config")
    acts = [f"SM {sm(c)} {'with' if claims[4, c]['trtllm_available'] else 'without'} TRTLLM"
            for c in (HOPPER, BLACKWELL) if any(by_step(claims, c, f)[4] != by_step(claims, c, f)[5] for f in fields)]
    said = (f"claims {claim9[4]} at steps 4 and 5: with a FlashInfer draft the engine is {mode9[4]} already at step 4"
            if (claim9[4], mode9[4]) == (claim9[5], mode9[5]) else
            f"claims {claim9[4]}, then {claim9[5]}: the engine is {mode9[4]} at step 4, {mode9[5]} at step 5")
    fix, wrappers_claim = claim("noncausal_graph_claim"), claim("graph_prefill_wrappers")
    return (f"on SM 9.0 without TRTLLM FlashInfer {said}. {fix.prs[0]} (step 5) "
            f"changes a claim on {' and '.join(acts) or 'no SM here'} only (the draft's config, {draft10[4]} to "
            f"{draft10[5]}; {fix.when()}). Step 6's graph wrappers claim {claim9[6]} on SM 9.0: {mode9[6]} again, "
            f"{len(moved)} of {len(STANDARD_BATCHES)} batches' wrapper changed. Upstream "
            f"{wrappers_claim.agreement.value.removeprefix('upstream ')} ({wrappers_claim.theirs}). Next, 07: what a "
            "draft's metadata build costs the host.")


def identical_outputs(records: dict, run, baseline) -> tuple[int, int] | None:
    """(how many of `run`'s outputs on the uniform prompts equal `baseline`'s, of how many requests): counted from the
    tokens where `records` (RunId -> EngineRecord) hold them, a live run's; else the evidence summary's count, made
    when its pass still had them. None where neither has the pair."""
    import dflash_fi.records.summary as S
    from dflash_fi.records.runs import Workload

    ours, theirs = (records[r].generate() if r in records else None for r in (run, baseline))
    if ours and theirs and ours.tokens and theirs.tokens:
        return sum(a == b for a, b in zip(ours.tokens, theirs.tokens)), len(ours.tokens)
    row = next((r for r in S.read().walkthrough().sameness
                if (r.run, r.baseline, r.workload) == (run, baseline, Workload.UNIFORM.value)), None)
    return None if row is None else (row.identical, row.requests)


def fa2_verdict(gpu: str, over: dict) -> str:
    """Notebook 06's verdict on step 5's draft kernel, from `kernels_over_fa2`'s ratios (kernel, kv) -> shape -> time
    over fa2's, for FlashInfer's fa3 and vLLM's FlashAttention on a bf16 and an fp8 cache (NaN: no such kernel)."""
    fa3, fa = over["flashinfer-fa3", "bf16"], {kv: over["vllm-flash-attn", kv] for kv in ("bf16", "fp8-e4m3")}
    worst, wins = max(fa3, key=fa3.get), {kv: sum(r < 1 for r in ratios.values()) for kv, ratios in fa.items()}
    no_fp8 = all(r != r for r in over["flashinfer-fa3", "fp8-e4m3"].values())
    return (f"on {gpu}, bf16 cache: fa3 is slower than fa2 at {sum(r > 1 for r in fa3.values())} of {len(fa3)} shapes, "
            f"up to {fa3[worst]:.1f}x at {worst[0]}x{worst[1]}, never faster by more than {1 - min(fa3.values()):.0%}"
            f"{'; on fp8 fa3 has no kernel' * no_fp8}. So step 5 pins fa2. vLLM's FlashAttention beats fa2 at "
            f"{wins['bf16']} of {len(fa3)} shapes on bf16 and {wins['fp8-e4m3']} on fp8: whether a draft belongs on "
            "FlashInfer at all, notebook 08 weighs end to end.")


def tau_verdict(at4, at6, eager, ours, same: tuple[int, int] | None) -> str:
    """Notebook 06's tau clauses: its step-4 and step-6 engines (FlashInfer target, CUDA graphs, live or recorded),
    then notebook 04's eager step 4 (`eager`) against the same prompt set's step 4 of 06 (`ours`), with `same` =
    `identical_outputs` of `ours` against plain decoding on its target. '' for what was not recorded."""
    from dflash_fi.records.engine import short_backend

    out = ""
    if at4.tau and at6.tau and f"{at4.tau:.3f}" == f"{at6.tau:.3f}":
        out += f" Tau {at4.tau:.3f} at both steps (to three decimals)."
    elif at4.tau and at6.tau:
        out += (f" Tau {at4.tau:.3f} at step 4, {at6.tau:.3f} at step 6 ({at6.tau / at4.tau - 1:+.1%}): step 6 runs "
                "the target's verify batches on its graph wrappers, whose rounding may pick the other of two near-tied "
                "tokens (the checks below hold the texts equal up to near-ties), and tau moves with the texts.")
    if eager is not None and ours is not None and eager.tau and ours.tau and same:
        target = ", ".join(sorted({short_backend(b) for b in eager.target_backends}))
        out += (f" In the walkthrough's records (its own prompt set), notebook 04's eager step 4 ({target} target) "
                f"has tau {eager.tau:.3f} where this notebook's step 4 has {ours.tau:.3f}: at near-ties the target's "
                f"kernels pick the text, and so which drafts are accepted; only {same[0]}/{same[1]} of that step 4's "
                "outputs equal those of plain decoding, also on a FlashInfer target.")
    return out


def engines_verdict(records: dict, seen: dict, runs: list, eager) -> str:
    """The engines cell's verdict: `runs` = (plain decoding, step 4, step 6), all FlashInfer targets with CUDA graphs,
    from `records`; `seen` (RunId -> EngineRecord) adds notebook 04's eager step 4 (`eager`) on the same prompts."""
    plain, step4, step6 = runs
    at4, at6 = records[step4], records[step6]
    full = at6.cudagraph_mode == "FULL_AND_PIECEWISE" != at4.cudagraph_mode
    return (f"step 4's FlashInfer engine resolves {at4.cudagraph_mode}, step 6's {at6.cudagraph_mode}"
            + (": step 6's verify batches may sit in FULL graphs, through the graph prefill wrapper the lab above "
               "routes them to." if full else ": NOT the FULL graphs step 6 is for.")
            + tau_verdict(at4, at6, seen.get(eager), seen.get(step4), identical_outputs(seen, step4, plain)))


def engines_table(records: dict) -> str:
    """Notebook 06's engines (RunId -> EngineRecord): the backends vLLM resolved for target and draft layers, the
    CUDA-graph mode it resolved, and tau ('-' where none)."""
    from dflash_fi.records.engine import short_backend
    from dflash_fi.records.runs import label

    def names(backends) -> str:
        return ", ".join(sorted({short_backend(b) for b in backends})) or "-"

    lines = ["| engine | target layers | draft layers | CUDA-graph mode | tau |", "|---|---|---|---|---|"]
    lines += [f"| {label(run)} | {names(r.target_backends)} | {names(r.draft_backends)} | {r.cudagraph_mode} | "
              + (f"{r.tau:.3f}" if r.tau else "-") + " |" for run, r in records.items()]
    return "\n".join(lines)


def replay_table(bites: dict, batches) -> str:
    """`graphs_by_batch` of steps 4 and 5 (`bites[step]`: batch -> `Replay`) for `batches`: each one's path, then per step its claim and
    the graph it would replay."""
    lines = ["| batch | its path | step 4: claim, would replay | step 5: claim, would replay |", "|---|---|---|---|"]
    lines += [f"| {b.name} | {bites[4][b].path} | "
              + " | ".join(f"{bites[s][b].claim}, {bites[s][b].graph}" for s in (4, 5)) + " |" for b in batches]
    return "\n".join(lines)


DRAFT_KERNELS = {"flashinfer-fa3": "FlashInfer fa3 (auto, bf16)",
                 "vllm-flash-attn": "vLLM's FlashAttention (FLASH_ATTN draft)"}  # against fa2, on these KV caches:
DRAFT_KVS = ("bf16", "fp8-e4m3")
