"""`dflash-fi`: the command line of the tutorial. Every subcommand is a thin shell over a module."""

from __future__ import annotations

import argparse
import sys

from dflash_fi import commands


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {number}")
    return number


def _sm(value: str) -> tuple[int, int]:
    from dflash_fi.vocabulary import CAPABILITIES, sm

    known = {sm(c): c for c in CAPABILITIES}
    if value not in known:
        raise argparse.ArgumentTypeError(f"SM {value!r}: choose one of {', '.join(known)}")
    return known[value]


def build_parser() -> argparse.ArgumentParser:
    from dflash_fi.bench.e2e import ROUNDS
    from dflash_fi.models import (CPU_REFERENCE_NEW_TOKENS, CPU_REFERENCE_PROMPTS, DEFAULT_DRAFTER, DEFAULT_NEW_TOKENS,
                                  DEFAULT_NUM_PROMPTS, DEFAULT_PROMPTS, DEFAULT_TARGET)
    from dflash_fi.stack import ARTIFACTS_DIR
    from dflash_fi.steps import FINAL_STEP, STEPS
    from dflash_fi.vocabulary import DRAFT_BACKENDS, KV_CACHE_DTYPES

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--verbose", action="store_true", help="vLLM's own log lines on the terminal (stderr)")
    parser = argparse.ArgumentParser(prog="dflash-fi", description=__doc__, parents=[common])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, func, help_text):
        p = sub.add_parser(name, help=help_text, parents=[common])
        p.set_defaults(func=func)
        return p

    def step_arg(p, default):
        p.add_argument("--step", default=default, type=str, help=f"{STEPS[0]} (stock) .. {FINAL_STEP} (final step)")

    p = command("doctor", commands.doctor, "installed versions, GPU, and what can run here")
    p.add_argument("--json", action="store_true")

    p = command("train", commands.train, "train the embedded target + DFlash drafter pair")
    p.add_argument("--out", default=str(ARTIFACTS_DIR / "models"),
                   help="output directory (default: artifacts/models; the shipped pair is dflash_fi/models, and "
                        "replacing it takes --force)")
    p.add_argument("--force", action="store_true", help="replace a pair that --out already holds (its training.json)")
    p.add_argument("--smoke", action="store_true", help="seconds on a CPU: every stage, nothing useful")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="change one training setting (a TrainConfig field), e.g. drafter_steps=8000; repeatable")
    p.add_argument("--target-from", default=None, metavar="DIR",
                   help="reuse the target of an earlier pair in DIR and train only the drafter")

    p = command("reference", commands.reference, "the reference decoder's tau (non-causal and causal) on held-out prompts")
    p.add_argument("--json", action="store_true")
    p.add_argument("--prompts", type=_positive, default=CPU_REFERENCE_PROMPTS)
    p.add_argument("--new-tokens", type=_positive, default=CPU_REFERENCE_NEW_TOKENS)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--target", default=str(DEFAULT_TARGET))
    p.add_argument("--drafter", default=str(DEFAULT_DRAFTER))
    p.add_argument("--prompts-file", default=str(DEFAULT_PROMPTS))

    p = command("run", commands.run, "one DFlash (or plain) vLLM engine on the GPU (its record kept under artifacts/evidence/)")
    step_arg(p, "0")
    p.add_argument("--draft-backend", default="FLASHINFER", choices=(*DRAFT_BACKENDS, "selector"),
                   help="selector: name none, vLLM's selector chooses (as for the RTX 4090 case)")
    p.add_argument("--target-backend", default=None, choices=["FLASHINFER", "FLASH_ATTN"],
                   help="the target's attention backend (default: vLLM chooses)")
    p.add_argument("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES)
    p.add_argument("--flash-attn-version", type=int, default=None, choices=(2, 3),
                   help="force vLLM's FlashAttention version (2: all an RTX 4090 has, no fp8 KV)")
    p.add_argument("--no-spec", dest="speculative", action="store_false", help="plain greedy decoding")
    p.add_argument("--target", default=str(DEFAULT_TARGET), help="local dir or hub id, e.g. Qwen/Qwen3-4B")
    p.add_argument("--drafter", default=str(DEFAULT_DRAFTER), help="e.g. z-lab/Qwen3-4B-DFlash-b16")
    p.add_argument("--prompts-file", default=str(DEFAULT_PROMPTS))
    p.add_argument("--prompts", type=_positive, default=DEFAULT_NUM_PROMPTS)
    p.add_argument("--max-new-tokens", type=_positive, default=DEFAULT_NEW_TOKENS)
    p.add_argument("--cuda-graphs", action="store_true", help="vLLM's default compilation and graphs (default: eager)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.4, help="raise for real models, e.g. 0.85")
    p.add_argument("--num-gpu-blocks", type=_positive, default=None,
                   help="pin the KV cache to N blocks (default: sized from free GPU memory)")
    p.add_argument("--max-num-seqs", type=_positive, default=None, help="vLLM's max_num_seqs (default: vLLM's)")
    p.add_argument("--workload", action="append", choices=("uniform", "mixed"),
                   help="what to generate, in order (repeatable; default: uniform)")
    p.add_argument("--logprobs", type=_positive, default=None, help="record the target's top-k logprobs")
    p.add_argument("--label", default=None)
    p.add_argument("--no-ledger", action="store_true", help="do not keep the record under artifacts/evidence/")
    p.add_argument("--json", action="store_true")

    p = command("selector-matrix", commands.selector_matrix, "vLLM's backend choice per step x GPU x KV dtype x role")
    p.add_argument("--step", action="append", type=int, help="only these steps (repeatable; default: all)")
    p.add_argument("--json", action="store_true")

    command("upstream", commands.upstream, "fetch vLLM 0.24.0's and 0.33.0's wheels (once) and check the files read")

    p = command("routing", commands.routing, "what the real FlashInferMetadataBuilder.build() does with DFlash and target batches")
    step_arg(p, str(FINAL_STEP))
    p.add_argument("--trtllm", action="store_true", help="TRTLLM attention available (as on Blackwell, SM 10.0)")
    p.add_argument("--sm", type=_sm, default=None, help="compute capability (default 9.0, or 10.0 with --trtllm)")
    p.add_argument("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES)
    p.add_argument("--cuda-graphs", action="store_true", help="the builder as vLLM makes it with full CUDA graphs")
    p.add_argument("--json", action="store_true")

    p = command("graphs", commands.graphs, "each step's CUDA-graph claim and the mode vLLM's runner resolves from it")
    p.add_argument("--json", action="store_true")

    p = command("exercise", commands.exercise, "write one of PR #43081's steps yourself (1-4), checked by the CPU lab")
    p.add_argument("step", help="1, 2, 3 or 4")
    p.add_argument("--out", default=None, help="the exercise file (default: exercises/stepN.py here)")
    p.add_argument("--force", action="store_true", help="replace an existing exercise file")
    p.add_argument("--check", nargs="?", const="", default=None, metavar="PATH",
                   help="check your hunks in PATH (default: --out's path) with step N's CPU checks")

    p = command("walkthrough", commands.walkthrough, "the main job: every step, run and checked (GPU parts when a GPU exists)")
    p.add_argument("--prompts", type=_positive, default=DEFAULT_NUM_PROMPTS)
    p.add_argument("--max-new-tokens", type=_positive, default=DEFAULT_NEW_TOKENS)

    p = command("bench", commands.bench, "benchmarks on the GPU: kernels, or whole engines in turns (e2e)")
    p.add_argument("what", choices=["kernels", "e2e"])
    p.add_argument("--quick", action="store_true", help="a few shapes (kernels) or fewer tokens (e2e), to try it")
    p.add_argument("--models", default="all", choices=["all", "embedded", "shape"],
                   help="e2e: the embedded pair, the Qwen3-4B shape, or both (default)")
    p.add_argument("--rounds", type=_positive, default=ROUNDS,
                   help=f"e2e: rounds of every engine in turn, the first a warm-up (default {ROUNDS})")
    p.add_argument("--record", action="store_true",
                   help="write its section of the evidence summary, evidence/<gpu>.json (default: artifacts/evidence/)")

    p = command("profile", commands.profile, "where the draft's metadata builds spend host time, step by step (GPU)")
    p.add_argument("--record", action="store_true",
                   help="write its section of the evidence summary, evidence/<gpu>.json (default: artifacts/evidence/)")

    p = command("record", commands.record, "a pytest run on the GPU (`pytest tests/gpu`) as its section of the "
                "evidence summary, from the JUnit XML it wrote")
    p.add_argument("kind", choices=("gpu-tests",))
    p.add_argument("--junit", required=True, help="the file pytest --junitxml=FILE wrote")
    p.add_argument("--ran", required=True, metavar="COMMAND", help="the pytest command that wrote it")

    p = command("near-ties", commands.near_ties,
                "measure the near-tie margin: where correct engines' greedy outputs part (GPU)")

    command("figures", commands.figures, "draw docs/figures/*.svg from the evidence summary")

    p = command("notebooks", commands.notebooks, "re-execute the notebooks in place (outputs from this machine)")
    p.add_argument("--only", action="append", default=None,
                   help="only notebooks whose name contains this, e.g. 03 (repeatable)")
    p.add_argument("--timeout", type=_positive, default=900, help="seconds per cell")
    p.add_argument("--allow-cpu", action="store_true", help="execute without a GPU too (gpu cells say they skip)")

    command("model-card", commands.model_card, "regenerate the embedded pair's MODEL_CARD.md (runs the CPU reference)")
    p = command("report", commands.report, "README's generated blocks: the last walkthrough and the benchmarks")
    p.add_argument("--update-readme", action="store_true", help="rewrite those blocks in README.md")
    return parser


QUIET_COMMANDS = ("doctor", "train", "reference", "model-card", "report", "figures", "record", "upstream")  # these import no vLLM engine


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command not in QUIET_COMMANDS:
        from dflash_fi.logs import quiet_vllm, relative

        log = quiet_vllm(args.command, verbose=args.verbose)
        if log is not None:
            print(f"(vLLM's log lines: {relative(log)}; --verbose shows them here)", file=sys.stderr)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the project's own, user-fixable failures are one line; anything else is a bug
        from dflash_fi.errors import UserError

        if isinstance(exc, UserError):
            print(f"dflash-fi {args.command}: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
