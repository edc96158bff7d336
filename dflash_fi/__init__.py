"""dflash-fi: vLLM PR #43081 ("Support DFlash with FlashInfer"), rebuilt one verified step at a time."""

__version__ = "0.1.0"
