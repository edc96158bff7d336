"""dflash-fi: vLLM PR #43081 ("Support DFlash with FlashInfer"), rebuilt one verified step at a time.

The parts, and the direction they may import in (each folder's __init__ says what it may import):

    vocabulary.py  errors.py  stack.py  logs.py    shared words, the project's own failures, the pinned
                                                   stack and the machine, where vLLM's log lines go
    steps/  patched/  plugin.py                    the steps as hunks on vLLM's flashinfer.py, imported as
                                                   real modules, registered as FLASHINFER in every process
    reference/                                     the independent pure-PyTorch target, drafter and decoder
    models/                                        the embedded pair: files, prompts, training, model card
    lab/                                           vLLM's real selector and metadata builders on the CPU
    engine/                                        one vLLM engine per process, and its record
    evidence/                                      the ledger under runs/, the walkthrough and its checks
    bench/                                         the kernel and end-to-end benchmarks
    figures/  notebook.py  readme.py               pictures, the notebooks' helpers, README's generated blocks
    cli.py  commands.py                            the command line
"""

__version__ = "0.2.0"
