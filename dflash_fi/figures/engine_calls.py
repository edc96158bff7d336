"""Engines as a reader would start them: the `LLM(...)` call they share, as a listing, and a markdown table of what each
changes (notebooks 03-05).

    common_call(calls)             what N engine calls share, and what each changes
    engine_calls(calls, steps)     the shared call as a listing, and a markdown table of the rest

Plain data (a `Listing` and markdown); nothing here displays or imports IPython.
"""

from __future__ import annotations

from dataclasses import dataclass

from dflash_fi.figures.listings import Listing, code_block

_MISSING = object()


@dataclass(frozen=True)
class Difference:
    """How one engine's call differs from the common one: an argument (a path through nested dicts) set to
    another value, or left out (`absent`)."""

    path: tuple[str, ...]
    value: object = None
    absent: bool = False

    def __str__(self) -> str:  # rendered for the table, never read back
        shown = self.path[0] + "".join(f"[{key!r}]" for key in self.path[1:])
        return f"no {shown}" if self.absent else f"{shown}={self.value!r}"


def common_call(calls: dict[str, dict]) -> tuple[dict, dict[str, list[Difference]]]:
    """calls: engine name -> its keyword arguments (dicts nested). Returns the base arguments (each path at the
    value most engines give it; left out where most leave it out) and, per engine, how it differs from the base."""
    flat = {engine: _flatten(kwargs) for engine, kwargs in calls.items()}
    paths = list(dict.fromkeys(p for f in flat.values() for p in f))
    base = {}
    for path in paths:
        values = [f.get(path, _MISSING) for f in flat.values()]
        best = max(values, key=lambda v: (sum(_same(v, w) for w in values), v is not _MISSING))
        if best is not _MISSING:
            base[path] = best
    differences = {}
    for engine, f in flat.items():
        changed = [Difference(p, f[p]) for p in paths if p in f and not _same(f[p], base.get(p, _MISSING))]
        absent = [p for p in base if p not in f]
        # A whole argument left out (no speculation: no speculative_config) is named once.
        whole = {p[0] for p in absent if not any(q[0] == p[0] for q in f)}
        differences[engine] = changed + [Difference((h,), absent=True) for h in dict.fromkeys(p[0] for p in absent)
                                         if h in whole]
        differences[engine] += [Difference(p, absent=True) for p in absent if p[0] not in whole]
    return _unflatten(base), differences


def _same(a, b) -> bool:
    return a is b if _MISSING in (a, b) else a == b


def _flatten(kwargs: dict, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    flat = {}
    for key, value in kwargs.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, (*prefix, key)))
        else:
            flat[(*prefix, key)] = value
    return flat


def _unflatten(flat: dict) -> dict:
    out: dict = {}
    for (*parents, leaf), value in flat.items():
        node = out
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return out


def engine_calls(calls: dict[str, dict], steps: dict[str, int], env: str, order: tuple[str, ...],
                 root=None) -> tuple[Listing, str]:
    """calls: engine name -> its `LLM(**kwargs)`; steps: engine name -> the step `env` selects. The call all share
    (arguments in `order`, paths under `root` shown relative to it) as a listing, and a markdown table: each engine,
    its step, what it changes."""
    def relative(value):  # the same text on every machine
        if isinstance(value, dict):
            return {k: relative(v) for k, v in value.items()}
        return value.removeprefix(f"{root}/") if root and isinstance(value, str) else value

    base, differences = common_call({name: relative(kwargs) for name, kwargs in calls.items()})
    lines = ["import os", "from vllm import LLM", "",
             f"os.environ[{env!r}] = step  # FLASHINFER's step: the table's column 'step' (0: vLLM's own)",
             "llm = LLM(", *(f"    {name}={_argument(base[name])}," for name in order if name in base), ")"]
    table = ["| engine | step | what it changes in the call above |", "|---|---|---|"]
    table += [f"| {name} | {steps[name]} | " + ("; ".join(f"`{d}`" for d in differences[name]) or "nothing") + " |"
              for name in calls]
    return code_block("\n".join(lines), f"The call every engine below makes ({len(calls)} engines, one process "
                      "each)"), "\n".join(table)


def _argument(value) -> str:
    """repr, a dict one key a line when it would not fit on one."""
    if not isinstance(value, dict) or len(repr(value)) < 70:
        return repr(value)
    return "{\n" + "".join(f"        {k!r}: {v!r},\n" for k, v in value.items()) + "    }"
