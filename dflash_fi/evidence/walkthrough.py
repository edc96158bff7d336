"""`dflash-fi walkthrough`: the main job. Every step of the change, run and checked against the last.

On any machine: the stack, the reference decoder's prediction, vLLM's selector for the draft, what each
step's metadata builder does with a DFlash batch, and what each step claims about CUDA graphs (all on
vLLM's real classes). With a CUDA GPU: the engine runs of `plan.walkthrough_plan`, each in its own process,
spread over the GPUs there are, every record appended to runs/<gpu>.jsonl, then the table and the checks.
Without one: the list of checks that were not run, and the last walkthrough recorded under runs/.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from dflash_fi.evidence.checks import CHECKS, check_records
from dflash_fi.evidence.ledger import RUNS_DIR, append_record, ledger_path
from dflash_fi.evidence.near_ties import committed_margin, measure_margin
from dflash_fi.evidence.plan import expected_to_fail, walkthrough_plan
from dflash_fi.evidence.report import latest_walkthrough, provenance, render_mixed_table, render_table


def run_gpu_walkthrough(num_prompts: int, max_new_tokens: int, reference: dict, runs_dir: Path = RUNS_DIR,
                        print_fn=print) -> tuple[dict, list]:
    from dflash_fi.stack import require_gpu

    gpu = require_gpu("the GPU part of the walkthrough")
    specs = walkthrough_plan(num_prompts, max_new_tokens)
    walkthrough_id = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
    for spec in specs:
        spec.extra = {"walkthrough_id": walkthrough_id, "planned_runs": len(specs), "reference": reference}
    from dflash_fi.engine.pool import run_engines, share_gpus, visible_gpus

    slots = share_gpus(specs)  # correctness runs: several engines to a GPU where it has room
    ledger = ledger_path(gpu.name, runs_dir)
    print_fn(f"  {len(specs)} engine runs on {len(visible_gpus())} GPU(s) ({gpu.name}), {len(slots)} at a time, "
             f"walkthrough {walkthrough_id}")
    records = run_engines(specs, slots, f"dflash-fi walkthrough (id {walkthrough_id})",
                          on_record=lambda record: append_record(ledger, record), expected_to_fail=expected_to_fail,
                          print_fn=print_fn)
    return records, check_records(records, reference, committed_margin(runs_dir))


def _cpu_sections(reference_prompts: int, reference_tokens: int, device: str) -> dict:
    from dflash_fi.lab.graphs import cudagraph_claims, format_claims
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
            draft = report["batches"][0]
            path = draft.get("error") or draft["decode"] or draft["prefill"]
            plan = f", plan causal={draft['plan_causal']}" if draft.get("plan_causal") is not None else ""
            check = draft.get("dflash_check", "-").split(":")[0]
            cells.append(f"{path}{plan}, DFlash check {check}")
            if (capability, kv) == (HOPPER, "auto"):
                targets = [{k: v for k, v in b.items() if k != "metadata_causal"}
                           for b in report["batches"] if b["role"] == "target"]
        stock_targets = stock_targets or targets
        cells.append("as stock" if targets == stock_targets else "CHANGED")
        print(f"| {step} | " + " | ".join(cells) + " |")

    print("\n== 4. CUDA graphs: what each step's FlashInfer claims, what vLLM's runner resolves for the engine")
    print(format_claims([cudagraph_claims(s, c, t) for s in (0, 4, 5, FINAL_STEP)
                         for c, t in ((HOPPER, False), (BLACKWELL, True))]))
    return reference


def main(num_prompts: int = 32, max_new_tokens: int = 128, runs_dir: Path = RUNS_DIR) -> int:
    from dflash_fi.evidence.ledger import all_records
    from dflash_fi.models import CPU_REFERENCE_NEW_TOKENS, CPU_REFERENCE_PROMPTS, require_count
    from dflash_fi.stack import cuda_gpu, doctor, require_pinned_stack

    require_count("--prompts", num_prompts)
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
        for check in CHECKS:
            print(f"     NOT RUN  {check.name}")
        latest = latest_walkthrough(all_records(runs_dir))
        if latest:
            wid, records = latest
            print(f"\n   The last walkthrough recorded in runs/, not re-run here:\n   "
                  f"{provenance(next(iter(records.values())), wid)}\n")
            print(render_table(records))
            if any("mixed" in r for r in records.values()):
                print("\n" + render_mixed_table(records))
        return 0
    records, checks = run_gpu_walkthrough(num_prompts, max_new_tokens, reference, runs_dir)
    print()
    print(render_table(records))
    print("\nThe mixed-batch rows (the same engines' second workload):\n")
    print(render_mixed_table(records))
    margin, own = committed_margin(runs_dir), measure_margin(records)
    print(f"\nNear-tie margin: {margin['margin']:.3f} nats from {margin['file']}" if margin else
          "\nNear-tie margin: none committed (`dflash-fi near-ties --record`): every parting fails")
    print(f"This walkthrough's own correct pairs parted {own['partings']} times, at gaps up to "
          f"{own['largest_gap'] if own['largest_gap'] is not None else '-'} "
          f"({own['partings_at_confident_tokens']} at a confident token)\n")
    for check in checks:
        print(check.line())
    failed = [c for c in checks if c.passed is not True]
    print(f"\n{len(checks) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0
