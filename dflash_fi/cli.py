"""`dflash-fi`: the command line of the tutorial. Every subcommand is a thin shell over a module."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path


def _doctor(args) -> int:
    from dflash_fi.stack import doctor

    return doctor(as_json=args.json)


def _train(args) -> int:
    from dflash_fi.train import train

    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"dflash-fi train: --set takes KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    if args.target_from and not Path(args.target_from, "target", "config.json").is_file():
        raise SystemExit(f"dflash-fi train: --target-from {args.target_from} holds no target/config.json "
                         "(give the directory of an earlier `dflash-fi train`, e.g. dflash_fi/models)")
    try:
        train(Path(args.out), smoke=args.smoke, device=args.device, overrides=overrides,
              target_from=args.target_from and Path(args.target_from),
              command=shlex.join(["dflash-fi", *sys.argv[1:]]))
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"dflash-fi train: {e}") from None
    return 0


def _reference(args) -> int:
    from dflash_fi.evaluate import DEFAULT_NEW_TOKENS, DEFAULT_NUM_PROMPTS, evaluate_pair, load_prompts

    prompts = load_prompts(Path(args.prompts_file), args.prompts or DEFAULT_NUM_PROMPTS)
    result = evaluate_pair(Path(args.target), Path(args.drafter), prompts, args.new_tokens or DEFAULT_NEW_TOKENS)
    if args.json:
        print(json.dumps({k: result[k] for k in (
            "tau_noncausal", "tau_causal", "per_position_acceptance", "lossless_fraction",
            "n_prompts", "n_new_tokens", "seconds")}))
    else:
        print(f"reference decoder, {result['n_prompts']} prompts x {result['n_new_tokens']} new tokens "
              f"({result['dtype']}, {result['seconds']} s)")
        print(f"  tau non-causal block attention: {result['tau_noncausal']:.3f}")
        print(f"  tau causal block attention:     {result['tau_causal']:.3f}")
        print(f"  speculative == greedy on {result['lossless_fraction']:.1%} of prompts")
    return 0


def _run(args) -> int:
    from dflash_fi.ledger import append_record, ledger_path
    from dflash_fi.runner import RunSpec, run
    from dflash_fi.stack import require_gpu

    spec = RunSpec(
        label=args.label or f"step{args.step}-{args.draft_backend}-{args.kv_cache_dtype}"
        + ("" if args.speculative else "-nospec"),
        step=args.step, draft_backend=args.draft_backend, kv_cache_dtype=args.kv_cache_dtype,
        speculative=args.speculative, target=args.target, drafter=args.drafter,
        prompts_file=args.prompts_file, num_prompts=args.prompts, max_new_tokens=args.max_new_tokens,
        enforce_eager=not args.cuda_graphs, gpu_memory_utilization=args.gpu_memory_utilization,
        num_gpu_blocks=args.num_gpu_blocks,
    ).validate()
    gpu = require_gpu("dflash-fi run")
    record = run(spec)
    if not args.no_ledger:
        append_record(ledger_path(gpu.name), record)
    shown = {k: v for k, v in record.items() if k not in ("tokens", "log_tail")}
    print(json.dumps(shown, indent=None if args.json else 2))
    return 0


def _selector_matrix(args) -> int:
    from dflash_fi.selector_matrix import feature_table, render_matrix, selector_matrix

    rows = selector_matrix()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(render_matrix(rows))
    for step in (0, 4):
        print(f"\nvLLM attention-backend feature table, Non-Causal column (step {step}):\n{feature_table(step)}")
    return 0


def _routing(args) -> int:
    from dflash_fi.routing import format_routing, routing_report

    report = routing_report(args.step, trtllm=args.trtllm)
    if args.json:
        print(json.dumps(report, indent=1, default=str))
        return 0
    print(format_routing(report))
    return 0


def _walkthrough(args) -> int:
    from dflash_fi.walkthrough import main as walkthrough

    return walkthrough(num_prompts=args.prompts, max_new_tokens=args.max_new_tokens)


def _report(args) -> int:
    from dflash_fi.notebook import recorded_walkthrough, render_table

    records, provenance = recorded_walkthrough()
    print(f"<!-- {provenance} -->")
    print(render_table(records))
    return 0


def _model_card(args) -> int:
    from dflash_fi.model_card import write_model_card

    print(write_model_card())
    return 0


def build_parser() -> argparse.ArgumentParser:
    from dflash_fi.evaluate import DEFAULT_DRAFTER, DEFAULT_PROMPTS, DEFAULT_TARGET

    parser = argparse.ArgumentParser(prog="dflash-fi", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("doctor", help="installed versions, GPU, and what can run here")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_doctor)

    p = sub.add_parser("train", help="train the embedded target + DFlash drafter pair")
    p.add_argument("--out", default="dflash_fi/models", help="output directory (default: the embedded pair)")
    p.add_argument("--smoke", action="store_true", help="seconds on a CPU: every stage, nothing useful")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="change one training setting (a TrainConfig field), e.g. drafter_steps=8000; repeatable")
    p.add_argument("--target-from", default=None, metavar="DIR",
                   help="reuse the target of an earlier pair in DIR and train only the drafter")
    p.set_defaults(func=_train)

    p = sub.add_parser("reference", help="the reference decoder's tau (non-causal and causal) on held-out prompts")
    p.add_argument("--json", action="store_true")
    p.add_argument("--prompts", type=int, default=None, help="number of held-out prompts (default 16)")
    p.add_argument("--new-tokens", type=int, default=None, help="new tokens per prompt (default 96)")
    p.add_argument("--target", default=str(DEFAULT_TARGET))
    p.add_argument("--drafter", default=str(DEFAULT_DRAFTER))
    p.add_argument("--prompts-file", default=str(DEFAULT_PROMPTS))
    p.set_defaults(func=_reference)

    p = sub.add_parser("run", help="one DFlash (or plain) vLLM run on the GPU, recorded under runs/")
    p.add_argument("--step", default="0", help="0 (stock) .. 4 (complete change)")
    p.add_argument("--draft-backend", default="FLASHINFER", choices=["FLASHINFER", "FLASH_ATTN"])
    p.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8"])
    p.add_argument("--no-spec", dest="speculative", action="store_false", help="plain greedy decoding")
    p.add_argument("--target", default=str(DEFAULT_TARGET), help="local dir or hub id, e.g. Qwen/Qwen3-4B")
    p.add_argument("--drafter", default=str(DEFAULT_DRAFTER), help="e.g. z-lab/Qwen3-4B-DFlash-b16")
    p.add_argument("--prompts-file", default=str(DEFAULT_PROMPTS))
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--cuda-graphs", action="store_true", help="capture CUDA graphs (default: eager)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.4, help="raise for real models, e.g. 0.85")
    p.add_argument("--num-gpu-blocks", type=int, default=None,
                   help="pin the KV cache to N blocks (default: sized from free GPU memory)")
    p.add_argument("--label", default=None)
    p.add_argument("--no-ledger", action="store_true", help="do not append the record to runs/")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_run)

    p = sub.add_parser("selector-matrix", help="vLLM's backend choice per step x GPU x KV dtype x role")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_selector_matrix)

    p = sub.add_parser("routing", help="what the real FlashInferMetadataBuilder.build() does with DFlash and target batches")
    p.add_argument("--step", default="4")
    p.add_argument("--trtllm", action="store_true", help="TRTLLM attention available (as on Blackwell, SM 10.0)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_routing)

    p = sub.add_parser("walkthrough", help="the main job: every step, run and checked (GPU parts when a GPU exists)")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.set_defaults(func=_walkthrough)

    p = sub.add_parser("model-card", help="regenerate the embedded pair's MODEL_CARD.md (runs the CPU reference)")
    p.set_defaults(func=_model_card)

    p = sub.add_parser("report", help="the last GPU walkthrough recorded under runs/, as a markdown table")
    p.set_defaults(func=_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    import os

    # vLLM logs to stdout by default; keep stdout for tables and --json output.
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # every expected failure surfaces as one clear line
        from dflash_fi.errors import EXPECTED_ERRORS

        if isinstance(exc, EXPECTED_ERRORS):
            print(f"dflash-fi {args.command}: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
