"""The failures a user can cause and fix: the CLI prints these as one line, not a traceback."""

from dflash_fi.stack import NoGpu, StackMismatch
from dflash_fi.steps import UnknownStep
from dflash_fi.steps.patching import PatchError

EXPECTED_ERRORS = (LookupError, NoGpu, StackMismatch, UnknownStep, PatchError, FileNotFoundError, ValueError)
