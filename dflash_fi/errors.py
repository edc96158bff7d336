"""The failures a user causes and can fix. The CLI prints these as one line (exit 2), and nothing else:
any other exception is a bug in dflash-fi or vLLM and keeps its traceback.

Every class says what went wrong in its message and what to do about it.
"""


class UserError(Exception):
    """Base of everything a user can fix: bad input, a missing file, the wrong machine or stack."""


class BadInput(UserError, ValueError):
    """An argument or setting outside what dflash-fi accepts (an unknown step, zero prompts, ...)."""


class UnknownStep(BadInput):
    """A step number that is not one of the tutorial's steps."""


class MissingModelFiles(UserError, FileNotFoundError):
    """A model directory or prompt file that is not there, or not an HF model."""


class NoGpu(UserError, RuntimeError):
    """A GPU-only action on a machine without a CUDA GPU."""


class StackMismatch(UserError, RuntimeError):
    """The installed vLLM or FlashInfer is not the version every step is written against."""


class PatchError(UserError, RuntimeError):
    """The installed vLLM source is not the one the steps' hunks were written against."""


class HunkMismatch(PatchError):
    """A hunk whose old text occurs `count` times, not exactly once, in `source`, the text it was applied to:
    hunk `number` (1-based) of those applied."""

    def __init__(self, message: str, number: int, count: int, source: str):
        super().__init__(message)
        self.number, self.count, self.source = number, count, source


class LedgerCorrupt(UserError, RuntimeError):
    """A committed run record under runs/ is damaged: restore it from git."""


class NoRecord(UserError, LookupError):
    """A recorded result the command needs is not committed under runs/ yet."""


class UpstreamUnavailable(BadInput):
    """A later vLLM's wheel, which the lesson reads files from, could not be fetched from PyPI."""
