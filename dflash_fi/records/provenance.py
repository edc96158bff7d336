"""Where a record or a section of the evidence summary came from: one `Provenance`.

An engine's record carries it (with its log and the models' hashes); a summary's section carries it with `inputs`:
a hash of each thing the section's command ran (the steps as patched, the plugin, the loader, the checks, the pinned
versions; `dflash_fi.freshness` computes them), which is what `Summary.stale` compares.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

# Keys earlier files wrote, and the field each one is now.
_RENAMED = {"git_commit": "commit", "wall_s": "seconds"}


@dataclass(frozen=True)
class Provenance:
    gpu: str | None
    compute_capability: str | None
    versions: dict
    commit: str | None
    command: str | None
    finished_at: str
    seconds: float | None = None
    inputs: dict = field(default_factory=dict)  # what the command ran: name -> sha256 (empty: not hashed)
    log_file: str | None = None
    log_tail: str = ""
    models: dict = field(default_factory=dict)  # sha256 of each local model's weight files

    def to_json(self) -> dict:
        """What differs from the defaults, and the six fields always."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v for k, v in data.items() if v not in (None, "", {}) or k in _ALWAYS}

    @classmethod
    def from_json(cls, data: dict) -> "Provenance":
        """From this file's `to_json`, or an earlier one's (`git_commit`, `wall_s`; a `step_hash` hashed the step
        modules' files only, so it is dropped: such a section has no inputs, and reads as stale)."""
        known = {f.name for f in fields(cls)}
        values = {_RENAMED.get(k, k): v for k, v in data.items()}
        return cls(**{k: v for k, v in values.items() if k in known})


_ALWAYS = ("gpu", "compute_capability", "versions", "commit", "command", "finished_at")


def describe(p: Provenance) -> str:
    """One line naming where a section came from."""
    versions = ", ".join(f"{k} {v}" for k, v in p.versions.items() if k in ("vllm", "flashinfer", "torch"))
    return (f"{p.gpu} (SM {p.compute_capability}), {versions}, commit {(p.commit or '?')[:10]}, {p.finished_at}"
            + (f", {p.seconds:.0f} s" if p.seconds is not None else ""))
