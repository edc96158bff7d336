"""Step 1 - the capability flag.

`AttentionBackend.supports_non_causal()` is what `validate_configuration` asks when the draft's attention
config has `use_non_causal=True` (DFlash sets it in `_create_draft_vllm_config`). Saying True lets the
selector accept FlashInfer for the draft; nothing below the selector knows about non-causal yet.
"""

from dflash_fi.steps import step0_stock as previous
from dflash_fi.steps.patching import Hunk

HUNKS: tuple[Hunk, ...] = previous.HUNKS + (
    Hunk(
        why="FlashInferBackend declares non-causal support",
        old='''    @staticmethod
    def get_name() -> str:
        return "FLASHINFER"
''',
        new='''    @staticmethod
    def get_name() -> str:
        return "FLASHINFER"

    @classmethod
    def supports_non_causal(cls) -> bool:
        return True
''',
    ),
)
