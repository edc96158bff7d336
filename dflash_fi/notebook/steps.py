"""The course map, for the notebooks (it lives beside the steps: the proof reads it too)."""

from dflash_fi.steps.course import NOTEBOOK_OF_STEP, STEPS_OF_NOTEBOOK  # noqa: F401
