"""Step 4 - keep non-causal batches off TRTLLM.

On Blackwell (SM 10.x) vLLM prefers the TRTLLM-gen kernels for prefill and decode; they are causal only.
A non-causal batch therefore never uses them: `prefill_use_trtllm`, `decode_use_trtllm` and
`all_uses_trtllm` are False for it, and the first such batch logs once that the draft runs on FlashInfer
while the target may keep TRTLLM. Causal batches are routed exactly as before.
"""

from dflash_fi.steps import step3_noncausal_wrapper as previous
from dflash_fi.steps.patching import Hunk

HUNKS: tuple[Hunk, ...] = previous.HUNKS + (
    Hunk(
        why="no TRTLLM prefill for a non-causal batch",
        old='''        prefill_use_trtllm = use_trtllm_attention(
''',
        new='''        prefill_use_trtllm = causal and use_trtllm_attention(
''',
    ),
    Hunk(
        why="no TRTLLM decode for a non-causal batch, with a one-time warning",
        old='''        decode_use_trtllm = (
            self.use_trtllm_decode_attention and self.dcp_world_size <= 1
        )

        all_uses_trtllm = (num_prefills == 0 or prefill_use_trtllm) and (
            num_decodes == 0 or decode_use_trtllm
        )
''',
        new='''        decode_use_trtllm = (
            causal and self.use_trtllm_decode_attention and self.dcp_world_size <= 1
        )
        if not causal and self.use_trtllm_decode_attention:
            logger.warning_once(
                "DFlash draft (non-causal) attention runs on FlashInfer's native "
                "prefill kernels; causal target attention may still use TRTLLM."
            )

        all_uses_trtllm = causal and (
            (num_prefills == 0 or prefill_use_trtllm)
            and (num_decodes == 0 or decode_use_trtllm)
        )
''',
    ),
)
