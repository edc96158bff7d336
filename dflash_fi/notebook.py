"""Small helpers the notebooks share: nothing here runs at import."""

from __future__ import annotations

from dflash_fi.walkthrough import latest_walkthrough, render_table


def recorded_walkthrough() -> tuple[dict[str, dict], str]:
    """The last complete GPU walkthrough committed under runs/, and a line saying where it came from."""
    from dflash_fi.ledger import all_records

    latest = latest_walkthrough(all_records())
    if latest is None:
        raise LookupError("no GPU walkthrough is recorded under runs/: run `dflash-fi walkthrough` on a GPU")
    wid, records = latest
    first = next(iter(records.values()))
    provenance = (f"recorded by walkthrough {wid} on {first['gpu']} (SM {first['compute_capability']}), "
                  f"vllm {first['versions']['vllm']}, flashinfer {first['versions']['flashinfer']}, "
                  f"torch {first['versions']['torch']}, commit {first['git_commit']}, {first['finished_at']}")
    return records, provenance


def live_run(step: int, draft_backend: str = "FLASHINFER", kv_cache_dtype: str = "auto",
             num_prompts: int = 8, max_new_tokens: int = 64) -> dict:
    """One DFlash run in vLLM, in its own process (GPU only). Not appended to the ledger."""
    from dflash_fi.runner import RunSpec, run
    from dflash_fi.stack import require_gpu

    require_gpu("a live vLLM run")
    spec = RunSpec(label=f"notebook step {step} {draft_backend}", step=step, draft_backend=draft_backend,
                   kv_cache_dtype=kv_cache_dtype, num_prompts=num_prompts, max_new_tokens=max_new_tokens)
    return run(spec, command="notebook live_run")


def outcome(record: dict) -> str:
    if record.get("ok"):
        return f"runs, tau {record['tau']:.3f}" if record.get("tau") is not None else "runs"
    e = record["error"]
    return f"{e['type']} at {e['phase']}: {e['message'][:160]}"


__all__ = ["recorded_walkthrough", "live_run", "outcome", "render_table"]
