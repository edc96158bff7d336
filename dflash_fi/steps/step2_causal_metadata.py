"""Step 2 - the `causal` metadata field, with all-prefill batches when it is False.

DFlash's proposer builds the draft's metadata from a `CommonAttentionMetadata` with `causal=False` and then
asserts `attn_metadata.causal is False` on every draft layer. The builder now carries the flag into
`FlashInferMetadata` and routes a non-causal batch entirely to prefill: decode kernels and the TRTLLM
spec-as-decode path cannot let a query token see the query tokens after it.

Deliberately unfinished: the prefill wrapper is still planned with `causal=True`, so the draft runs,
passes DFlash's check, and is silently causal. Step 3 fixes the plan.
"""

from dflash_fi.steps import step1_capability_flag as previous
from dflash_fi.steps.patching import Hunk

HUNKS: tuple[Hunk, ...] = previous.HUNKS + (
    Hunk(
        why="FlashInferMetadata carries the batch's causality",
        old='''    cascade_wrapper: MultiLevelCascadeAttentionWrapper | None


class FlashInferMetadataBuilder(''',
        new='''    cascade_wrapper: MultiLevelCascadeAttentionWrapper | None

    causal: bool
    """False for a DFlash draft batch: every query token sees its whole block."""


class FlashInferMetadataBuilder(''',
    ),
    Hunk(
        why="a non-causal batch is all prefill",
        old='''        num_actual_tokens = common_attn_metadata.num_actual_tokens
        num_decodes, num_prefills, num_decode_tokens, num_prefill_tokens = (
            split_decodes_and_prefills(
                common_attn_metadata,
                decode_threshold=self.reorder_batch_threshold,
                require_uniform=True,
            )
        )
''',
        new='''        num_actual_tokens = common_attn_metadata.num_actual_tokens
        causal = common_attn_metadata.causal
        if causal:
            num_decodes, num_prefills, num_decode_tokens, num_prefill_tokens = (
                split_decodes_and_prefills(
                    common_attn_metadata,
                    decode_threshold=self.reorder_batch_threshold,
                    require_uniform=True,
                )
            )
        else:
            # Decode kernels cannot let a query token attend to later query tokens.
            num_decodes, num_decode_tokens = 0, 0
            num_prefills, num_prefill_tokens = num_reqs, num_actual_tokens
''',
    ),
    Hunk(
        why="the builder records causality in the metadata",
        old='''            decode=None,
            cascade_wrapper=None,
        )
''',
        new='''            decode=None,
            cascade_wrapper=None,
            causal=causal,
        )
''',
    ),
)
