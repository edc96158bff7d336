"""`dflash-fi walkthrough`: the main job. Every step of the change, run and checked against the last.

On any machine: the stack, the reference decoder's prediction, vLLM's selector for the draft, what each
step's metadata builder does with a DFlash batch, and what each step claims about CUDA graphs (all on
vLLM's real classes). With a CUDA GPU: the engine runs of `plan.walkthrough_plan`, each in its own process,
spread over the GPUs there are, every record appended to the raw ledger under artifacts/evidence/, then the
table and the checks, judged once, with the near-tie margin this walkthrough's own calibration pairs give; the
records (tokens by hash), the checks and the margin become the walkthrough section of the evidence summary.
Without one: the list of checks that were not run, and the walkthrough of the committed summary.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time

import dflash_fi.summary as S
from dflash_fi.errors import NoRecord
from dflash_fi.evidence.checks import Verdict, check_records, checks
from dflash_fi.evidence.near_ties import measure_margin
from dflash_fi.evidence.plan import expected_to_fail, walkthrough_plan
from dflash_fi.evidence.report import compact, render_mixed_table, render_table, sameness_rows
from dflash_fi.models import DEFAULT_NEW_TOKENS, DEFAULT_NUM_PROMPTS


def run_gpu_walkthrough(num_prompts: int, max_new_tokens: int, reference: dict, print_fn=print, only=None
                        ) -> tuple[dict, dict, list]:
    """The engines of the plan (or those of its runs in `only`) on every GPU there is, each record appended to the raw
    ledger as it comes; then the margin from its calibration pairs, and the checks over them (NOT RUN where a record
    is missing): (records by run, margin, checks)."""
    from dflash_fi.engine.pool import run_engines, share_gpus, visible_gpus
    from dflash_fi.stack import require_gpu

    gpu = require_gpu("the GPU part of the walkthrough")
    plan = [s for s in walkthrough_plan(num_prompts, max_new_tokens) if only is None or s.run in only]
    specs, slots = share_gpus(plan)  # correctness runs share GPUs
    ledger = S.raw_dir() / f"{S.gpu_slug(gpu.name)}.walkthrough-{time.strftime('%Y%m%dT%H%M%S')}.jsonl"
    print_fn(f"  {len(specs)} engine runs on {len(visible_gpus())} GPU(s) ({gpu.name}), {len(slots)} at a time; "
             f"raw records: {ledger}")

    def recorded(record):
        with open(ledger, "a") as f:
            f.write(json.dumps(record.to_json(), sort_keys=True) + "\n")
        return record

    records = {r.run: r for r in run_engines(specs, slots, "dflash-fi walkthrough", on_record=recorded,
                                             expected_to_fail=expected_to_fail, print_fn=print_fn)}
    margin = measure_margin(records)
    margin = {k: margin[k] for k in ("rule", "partings", "partings_at_confident_tokens", "largest_gap", "margin")}
    return records, margin, check_records(records, reference, margin if margin["margin"] is not None else None)


def write_section(records: dict, reference: dict, margin: dict, results: list, seconds: float) -> str:
    """The walkthrough's section of the evidence summary: records with tokens by hash, how each run's output compares
    with its baselines', the margin and the checks as judged now."""
    from dflash_fi.stack import run_context

    data = {"reference": {k: v for k, v in reference.items() if k != "per_prompt"}, "margin": margin,
            "records": [compact(r).to_json() for r in records.values()], "sameness": sameness_rows(records),
            "models": next((r.provenance.models for r in records.values() if r.provenance), {}),
            "checks": [c.to_json() for c in results]}
    return str(S.write(S.Section.WALKTHROUGH, data, S.provenance(run_context(), seconds)))


def _cpu_sections(reference_prompts: int, reference_tokens: int, device: str) -> dict:
    from dataclasses import replace

    from dflash_fi.lab.graphs import cudagraph_claims, format_claims
    from dflash_fi.lab.routes import dflash_check, label, route_cell
    from dflash_fi.lab.routing import routing_report
    from dflash_fi.lab.selector import render_matrix, selector_matrix
    from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_TARGET, load_prompts
    from dflash_fi.reference.evaluate import evaluate_pair
    from dflash_fi.steps import FINAL_STEP, STEPS
    from dflash_fi.vocabulary import BLACKWELL, HOPPER, RTX_4090

    print("\n== 1. the reference decoder (pure PyTorch, fp32): what vLLM must show")
    reference = evaluate_pair(DEFAULT_TARGET, DEFAULT_DRAFTER, load_prompts(n=reference_prompts), reference_tokens,
                              device=device)
    print(f"   {reference_prompts} held-out prompts x {reference_tokens} tokens on {device}: tau non-causal "
          f"{reference['tau_noncausal']:.3f}, tau causal {reference['tau_causal']:.3f}, speculative == greedy on "
          f"{reference['lossless_fraction']:.0%} of prompts")

    print("\n== 2. vLLM's selector for the DFlash draft (real selector, pretended GPUs)")
    rows = [r for r in selector_matrix(steps=(0, 1), capabilities=(RTX_4090, HOPPER)) if r["role"] == "draft"]
    print(render_matrix(rows))

    print("\n== 3. what each step's real FlashInferMetadataBuilder.build() does with a DFlash draft batch")
    print("| step | H100/H200 (SM 9.0) | B200 (SM 10.0, TRTLLM) | RTX 4090 (SM 8.9), fp8 KV | target batches |")
    print("|---|---|---|---|---|")
    stock_targets = None
    for step in STEPS:
        cells = []
        for capability, trtllm, kv in ((HOPPER, False, "auto"), (BLACKWELL, True, "auto"), (RTX_4090, False, "fp8")):
            report = routing_report(step, trtllm=trtllm, capability=capability, kv_cache_dtype=kv)
            draft = report.routes[0]
            path = route_cell(draft) if draft.refused else label(draft.decode or draft.prefill, draft)
            plan = f", plan causal={draft.plan_causal}" if draft.plan_causal is not None else ""
            cells.append(f"{path}{plan}, DFlash check {dflash_check(draft)}")
            if (capability, kv) == (HOPPER, "auto"):
                targets = [replace(r, metadata_causal=None) for r in report.routes if r.role == "target"]
        stock_targets = stock_targets or targets
        cells.append("as stock" if targets == stock_targets else "CHANGED")
        print(f"| {step} | " + " | ".join(cells) + " |")

    print("\n== 4. CUDA graphs: what each step's FlashInfer claims, what vLLM's runner resolves for the engine")
    print(format_claims([cudagraph_claims(s, c, t) for s in (0, 4, 5, FINAL_STEP)
                         for c, t in ((HOPPER, False), (BLACKWELL, True))]))
    return reference


def main(num_prompts: int = DEFAULT_NUM_PROMPTS, max_new_tokens: int = DEFAULT_NEW_TOKENS) -> int:
    """The walkthrough; on a GPU its whole output is also kept under artifacts/evidence/ (not committed)."""
    tee, started = S.Tee(sys.stdout), time.time()
    with contextlib.redirect_stdout(tee):
        code, gpu = _main(num_prompts, max_new_tokens, started)
    if gpu is not None:
        path = S.raw_dir() / f"{S.gpu_slug(gpu.name)}.walkthrough-{time.strftime('%Y%m%dT%H%M%S')}.txt"
        path.write_text(tee.kept.getvalue())
        print(f"this output: {path}")
    return code


def _main(num_prompts: int, max_new_tokens: int, started: float):
    from dflash_fi.models import CPU_REFERENCE_NEW_TOKENS, CPU_REFERENCE_PROMPTS, require_count, require_prompts
    from dflash_fi.stack import cuda_gpu, doctor, require_pinned_stack

    require_prompts(num_prompts)
    require_count("--max-new-tokens", max_new_tokens)
    print("== 0. the stack")
    doctor()
    require_pinned_stack()
    gpu = cuda_gpu()
    if gpu:
        reference = _cpu_sections(num_prompts, max_new_tokens, "cuda")
    else:
        reference = _cpu_sections(CPU_REFERENCE_PROMPTS, CPU_REFERENCE_NEW_TOKENS, "cpu")

    print("\n== 5. DFlash in vLLM on the GPU")
    if not gpu:
        print(f"   SKIPPED (no CUDA GPU here): the {len(walkthrough_plan())} engine runs and these checks:")
        for check in checks():
            print(f"     NOT RUN  {check.name}")
        try:
            records, _, _, _, made = S.read().walkthrough()
        except NoRecord:  # nothing recorded yet: nothing to show
            return 0, None
        print(f"\n   The walkthrough of the committed evidence summary, not re-run here: {S.describe(made)}\n")
        print(render_table(records, S.read().entry(S.Section.WALKTHROUGH).data["sameness"]))
        print("\n" + render_mixed_table(records, S.read().entry(S.Section.WALKTHROUGH).data["sameness"]))
        return 0, None
    records, margin, results = run_gpu_walkthrough(num_prompts, max_new_tokens, reference)
    same = sameness_rows(records)
    print()
    print(render_table(records, same))
    print("\nThe mixed-batch rows (the same engines' second workload):\n")
    print(render_mixed_table(records, same))
    print(f"\nNear-tie margin: {margin['margin']} nats, {margin['rule']}: this walkthrough's calibration pairs parted "
          f"{margin['partings']} times, at gaps up to {margin['largest_gap']} ({margin['partings_at_confident_tokens']} "
          "at a confident token)\n")
    for check in results:
        print(check.line())
    failed = [c for c in results if c.verdict is not Verdict.PASS]
    print(f"\n{len(results) - len(failed)} passed, {len(failed)} failed or not run")
    print(f"evidence summary: {write_section(records, reference, margin, results, time.time() - started)}")
    return (1 if failed else 0), gpu
