"""The proof: what makes the lesson's claims evidence. Nothing the lesson imports lives here.

    engine/    one vLLM engine per process, and the typed record of what it did
    evidence/  the walkthrough: its plan of engine runs, its checks (by id) and near-tie rule, notebooks run live
    bench/     the kernel and engine benchmarks, paired intervals and targets, build profiles
    readme.py  README's generated blocks and docs/RESULTS.md, from the evidence summary

The machinery writes the evidence summary; the lesson reads it.
"""
