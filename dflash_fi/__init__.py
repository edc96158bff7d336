"""dflash-fi: vLLM PR #43081 ("Support DFlash with FlashInfer"), rebuilt one verified step at a time.

Two halves over one bottom. The lesson, at the top level, is what a reader and the notebooks use; the proof, under
proof/, is what makes its claims evidence. Each package's __init__ says what it may import.

The lesson
    steps/  patched/  plugin.py     the steps as hunks on vLLM's flashinfer.py, imported as real modules,
                                    registered as FLASHINFER in every process
    reference/                      the independent pure-PyTorch target, drafter and decoder
    models/                         the embedded pair: files, prompts, training, model card
    lab/                            vLLM's real selector and metadata builders on the CPU
    exercises/                      write a step of the PR yourself, checked by the lab
    figures/                        pictures and tables, drawn from the lab and the evidence summary
    notebook/                       the notebooks' one door: cells, the session, which steps each is about
    upstream.py                     the same files in vLLM 0.24.0 and 0.33.0, from their wheels
The proof
    proof/engine/                   one vLLM engine per process, and what it did
    proof/evidence/                 the walkthrough: its engine runs and its checks
    proof/bench/                    the kernel and end-to-end benchmarks
    proof/readme.py                 README's generated blocks, from the evidence summary
The edge
    cli.py  commands.py             the command line; every --json through one encoder
The bottom
    records/                        what the proof writes and the lesson reads, as types: runs, engine records,
                                    checks, the evidence summary
    freshness.py                    what each evidence section ran, as hashes, and what the code at hand staled
    errors.py  vocabulary.py        the project's own failures, the shared words
    stack.py  logs.py               the pinned stack and the machine, where vLLM's log lines go
"""

__version__ = "0.2.0"
