"""What each `dflash-fi` subcommand does: a thin shell over the module that does the work."""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
import time
from pathlib import Path


def doctor(args) -> int:
    from dflash_fi.stack import doctor

    return doctor(as_json=args.json)


def train(args) -> int:
    from dflash_fi.errors import BadInput, MissingModelFiles
    from dflash_fi.models.train import train

    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise BadInput(f"--set takes KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    if args.target_from and not Path(args.target_from, "target", "config.json").is_file():
        raise MissingModelFiles(f"--target-from {args.target_from} holds no target/config.json (give the directory "
                                "of an earlier `dflash-fi train`, e.g. dflash_fi/models)")
    report = train(Path(args.out), smoke=args.smoke, device=args.device, overrides=overrides,
                   target_from=args.target_from and Path(args.target_from),
                   command=shlex.join(["dflash-fi", *sys.argv[1:]]), force=args.force)
    print(f"trained pair in {args.out}: tau non-causal {report['evaluation']['tau_noncausal']:.3f}, causal "
          f"{report['evaluation']['tau_causal']:.3f}")
    return 0


def reference(args) -> int:
    from dflash_fi.models import check_model_dir, load_prompts
    from dflash_fi.reference.evaluate import evaluate_pair
    from dflash_fi.stack import require_gpu

    if args.device == "cuda":
        require_gpu("dflash-fi reference --device cuda")

    prompts = load_prompts(Path(args.prompts_file), args.prompts)
    result = evaluate_pair(Path(check_model_dir("target", args.target)), Path(check_model_dir("drafter", args.drafter)),
                           prompts, args.new_tokens, device=args.device)
    if args.json:
        print(json.dumps({k: result[k] for k in (
            "tau_noncausal", "tau_causal", "per_position_acceptance", "lossless_fraction",
            "n_prompts", "n_new_tokens", "seconds")}))
    else:
        print(f"reference decoder, {result['n_prompts']} prompts x {result['n_new_tokens']} new tokens "
              f"({result['dtype']} on {result['device']}, {result['seconds']} s)")
        print(f"  tau non-causal block attention: {result['tau_noncausal']:.3f}")
        print(f"  tau causal block attention:     {result['tau_causal']:.3f}")
        print(f"  speculative == greedy on {result['lossless_fraction']:.1%} of prompts")
    return 0


def run(args) -> int:
    from dflash_fi.engine.identity import Pair, RunId, label
    from dflash_fi.engine.records import outcome
    from dflash_fi.engine.runner import run as run_engine
    from dflash_fi.engine.spec import RunSpec
    from dflash_fi.logs import tail
    from dflash_fi.models import DEFAULT_DRAFTER, DEFAULT_TARGET
    from dflash_fi.stack import require_gpu

    embedded = (args.target, args.drafter) == (str(DEFAULT_TARGET), str(DEFAULT_DRAFTER))
    run_id = RunId(step=args.step, speculative=args.speculative,
                   draft_backend=None if args.draft_backend == "selector" else args.draft_backend,
                   target_backend=args.target_backend, kv_cache_dtype=args.kv_cache_dtype,
                   flash_attn_version=args.flash_attn_version, cuda_graphs=args.cuda_graphs,
                   pair=Pair.EMBEDDED if embedded else Pair.CUSTOM)
    spec = RunSpec(
        run=run_id, target=args.target, drafter=args.drafter, prompts_file=args.prompts_file,
        num_prompts=args.prompts, max_new_tokens=args.max_new_tokens, workloads=tuple(args.workload or ("uniform",)),
        gpu_memory_utilization=args.gpu_memory_utilization, num_gpu_blocks=args.num_gpu_blocks,
        max_num_seqs=args.max_num_seqs, logprobs=args.logprobs,
    ).validate()
    gpu = require_gpu("dflash-fi run")
    record = run_engine(spec)
    if not args.no_ledger:
        import dflash_fi.summary as S

        with open(S.raw_dir() / f"{S.gpu_slug(gpu.name)}.runs.jsonl", "a") as f:
            f.write(json.dumps(record.to_json(), sort_keys=True) + "\n")
    shown = record.to_json()
    for generate in shown["generates"].values():
        generate.pop("tokens", None)
    shown["provenance"].pop("log_tail", None)
    print(json.dumps(shown, indent=None if args.json else 2))
    print(f"{label(spec.run)}: {outcome(record, detail=True)}; engine log: {record.provenance.log_file}",
          file=sys.stderr)
    if not record.ok:
        print(tail(Path(record.provenance.log_file), 10**6), file=sys.stderr)
    return 0


def selector_matrix(args) -> int:
    from dflash_fi.lab.selector import feature_table, render_matrix, selector_matrix

    rows = selector_matrix(steps=args.step or None)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(render_matrix(rows))
    for step in (0, 1):
        print(f"\nvLLM attention-backend feature table, Non-Causal column (step {step}):\n{feature_table(step)}")
    return 0


def routing(args) -> int:
    from dflash_fi.lab.routing import format_routing, routing_report

    report = routing_report(args.step, trtllm=args.trtllm, capability=args.sm, kv_cache_dtype=args.kv_cache_dtype,
                            cuda_graphs=args.cuda_graphs)
    print(json.dumps(report.to_json(), indent=1) if args.json else format_routing(report))
    return 0


def upstream(args) -> int:
    from dflash_fi.upstream import check_all

    print("\n".join(check_all()))
    return 0


def graphs(args) -> int:
    from dflash_fi.lab.graphs import cudagraph_claims, format_claims
    from dflash_fi.steps import STEPS
    from dflash_fi.vocabulary import BLACKWELL, HOPPER, RTX_4090

    rows = [cudagraph_claims(step, capability, trtllm) for step in STEPS
            for capability, trtllm in ((RTX_4090, False), (HOPPER, False), (BLACKWELL, True))]
    print(json.dumps(rows, indent=1) if args.json else format_claims(rows))
    return 0


def exercise(args) -> int:
    from dflash_fi.exercises import run_command

    return run_command(args.step, out=args.out, check=args.check, force=args.force)


def walkthrough(args) -> int:
    from dflash_fi.evidence.walkthrough import main

    return main(num_prompts=args.prompts, max_new_tokens=args.max_new_tokens)


def bench(args) -> int:
    from dflash_fi.bench.record import bench

    return bench(args.what, args.quick, args.models, args.rounds, args.record)


def profile(args) -> int:
    from dflash_fi.bench.record import profile

    return profile(args.record)


def record(args) -> int:
    from dflash_fi.evidence.junit import record_pytest

    print(record_pytest(args.kind, args.junit, args.ran))
    return 0


def near_ties(args) -> int:
    from dflash_fi.evidence.near_ties import run_calibration

    run_calibration()
    return 0


def figures(args) -> int:
    from dflash_fi.bench.results import latest_kernels
    from dflash_fi.bench.turns import latest_turns
    from dflash_fi.errors import NoRecord
    from dflash_fi.figures import write_benchmark_figures
    from dflash_fi.figures.path import write_path_figure

    def read(latest):
        try:
            return latest()
        except NoRecord as missing:
            print(f"not drawn: {missing}")
            return None

    kernels, turns = read(latest_kernels), read(latest_turns)
    for path in [*write_benchmark_figures(kernels, turns), write_path_figure()]:
        print(path)
    return 0


def notebooks(args) -> int:
    from dflash_fi.evidence.notebooks import execute_notebooks

    return execute_notebooks(only=args.only, timeout=args.timeout, allow_cpu=args.allow_cpu)


def report(args) -> int:
    from dflash_fi.readme import blocks, results_page, update_readme, write_results_page

    if args.update_readme:
        print("rewrote README.md blocks:", ", ".join(update_readme()))
        print(f"wrote {write_results_page()}")
        return 0
    for name, body in blocks().items():
        print(f"<!-- {name} -->\n{body}\n<!-- /{name} -->\n")
    print(results_page())
    return 0


def model_card(args) -> int:
    from dflash_fi.models.card import write_model_card

    print(write_model_card())
    return 0
