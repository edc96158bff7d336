"""`dflash-fi walkthrough`: the main job. Every step of the change, run and checked against the last.

On any machine: the stack, the reference decoder's prediction, vLLM's selector for the draft, what each
step's metadata builder does with a DFlash batch, and what each step claims about CUDA graphs (all on
vLLM's real classes). With a CUDA GPU: the engine runs of `plan.walkthrough_plan`, each in its own process,
spread over the GPUs there are, every record appended to runs/<gpu>.jsonl, then the table and the checks.
Without one: the list of checks that were not run, and the last walkthrough recorded under runs/.
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid

from dflash_fi.errors import NoRecord
from dflash_fi.evidence.checks import Verdict, check_records, checks
from dflash_fi.evidence.ledger import Walkthrough
from dflash_fi.evidence.near_ties import committed_margin, measure_margin
from dflash_fi.evidence.plan import expected_to_fail, walkthrough_plan
from dflash_fi.evidence.report import recorded_walkthrough, render_mixed_table, render_table
from dflash_fi.models import DEFAULT_NEW_TOKENS, DEFAULT_NUM_PROMPTS
from dflash_fi.runs import Kind, Runs, Tee


def run_gpu_walkthrough(num_prompts: int, max_new_tokens: int, reference: dict, runs: Runs | None = None,
                        print_fn=print) -> tuple[Walkthrough, dict, list]:
    """The engines of the plan on every GPU there is, each record appended to the GPU's ledger after the walkthrough's
    manifest; the checks over them."""
    from dflash_fi.engine.pool import run_engines, share_gpus, visible_gpus
    from dflash_fi.stack import git_commit, require_gpu

    runs = runs or Runs()
    gpu = require_gpu("the GPU part of the walkthrough")
    specs, slots = share_gpus(walkthrough_plan(num_prompts, max_new_tokens))  # correctness runs share GPUs
    margin = committed_margin(runs)
    manifest = Walkthrough(id=time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6],
                           planned=tuple(s.run for s in specs), planned_count=len(specs), reference=reference,
                           margin={"margin": margin["margin"], "file": margin["file"]} if margin else None,
                           commit=git_commit(), started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    runs.append(gpu.name, manifest.to_json())
    print_fn(f"  {len(specs)} engine runs on {len(visible_gpus())} GPU(s) ({gpu.name}), {len(slots)} at a time, "
             f"walkthrough {manifest.id}")

    def recorded(record):
        from dataclasses import replace

        record = replace(record, walkthrough=manifest.id)
        runs.append(gpu.name, record.to_json())
        return record

    records = {r.run: r for r in run_engines(specs, slots, f"dflash-fi walkthrough (id {manifest.id})",
                                             on_record=recorded, expected_to_fail=expected_to_fail, print_fn=print_fn)}
    return manifest, records, check_records(records, reference, margin)


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


def main(num_prompts: int = DEFAULT_NUM_PROMPTS, max_new_tokens: int = DEFAULT_NEW_TOKENS,
         runs: Runs | None = None) -> int:
    """The walkthrough; on a GPU its whole output is also written to runs/<gpu>.walkthrough-<id>.txt."""
    tee = Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        code, gpu, walkthrough_id = _main(num_prompts, max_new_tokens, runs or Runs())
    if walkthrough_id is not None:
        path = (runs or Runs()).write_new(Kind.WALKTHROUGH, gpu.name, walkthrough_id, tee.kept.getvalue())
        print(f"this output: {path}")
    return code


def _main(num_prompts: int, max_new_tokens: int, runs: Runs):
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
            _, records, source = recorded_walkthrough(runs)
        except NoRecord:  # nothing recorded yet: nothing to show
            return 0, gpu, None
        print(f"\n   The last walkthrough recorded in runs/, not re-run here:\n   {source}\n")
        print(render_table(records))
        print("\n" + render_mixed_table(records))
        return 0, gpu, None
    manifest, records, results = run_gpu_walkthrough(num_prompts, max_new_tokens, reference, runs)
    print()
    print(render_table(records))
    print("\nThe mixed-batch rows (the same engines' second workload):\n")
    print(render_mixed_table(records))
    own = measure_margin(records)
    print(f"\nNear-tie margin: {manifest.margin['margin']:.3f} nats from {manifest.margin['file']}" if manifest.margin
          else "\nNear-tie margin: none committed (`dflash-fi near-ties --record`): every parting fails")
    print(f"This walkthrough's own correct pairs parted {own['partings']} times, at gaps up to "
          f"{own['largest_gap'] if own['largest_gap'] is not None else '-'} "
          f"({own['partings_at_confident_tokens']} at a confident token)\n")
    for check in results:
        print(check.line())
    failed = [c for c in results if c.verdict is not Verdict.PASS]
    print(f"\n{len(results) - len(failed)} passed, {len(failed)} failed or not run")
    return (1 if failed else 0), gpu, manifest.id
