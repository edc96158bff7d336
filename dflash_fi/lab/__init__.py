"""The CPU lab: vLLM 0.22.1's real selector, configuration classes and metadata builders, on any machine.

    pretend_gpu.py   vLLM's CudaPlatform answering a chosen compute capability (and TRTLLM, if asked)
    gpu_doubles.py   named doubles for the only GPU-bound parts: FlashInfer wrappers, XQA's kernel call (step 9),
                     vLLM's page-index Triton kernel, the CUDA extension modules (imported, never called), a DCP
                     process group; step 8's Triton kernel runs from its own source under Triton's CPU interpreter
    selector.py      which backend vLLM picks, per step x GPU x KV dtype x role, and why the others refuse
    batches.py       the draft and target batches routed       routing.py  what build() does with them
    graphs.py        what each step claims about CUDA graphs, and the mode vLLM's runner resolves
    hunks.py         each step's hunks one at a time: the diff of each, and where in flashinfer.py it lands
    merged.py        step 4 beside vLLM 0.24.0's own flashinfer.py (PR #43081 merged), build by build
    today.py         the places the lesson taught, in vLLM 0.22.1, 0.24.0 and 0.33.0's own code
    glossary.py      the words the notebooks use, from vLLM's own enums where it defines them
    plan_race.py     GPU only: FlashInfer's pinned-buffer plan race in isolation (docs/plan-race.md)

May import: dflash_fi.steps, dflash_fi.plugin, dflash_fi.models, dflash_fi.reference (the reference attention),
dflash_fi.vocabulary, dflash_fi.errors, dflash_fi.stack, dflash_fi.patched and dflash_fi.upstream (vLLM 0.24.0's and
0.33.0's files).
"""

MAY_IMPORT = ("dflash_fi.steps", "dflash_fi.plugin", "dflash_fi.models", "dflash_fi.reference", "dflash_fi.vocabulary",
              "dflash_fi.errors", "dflash_fi.stack", "dflash_fi.patched", "dflash_fi.upstream")
