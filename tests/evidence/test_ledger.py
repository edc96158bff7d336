import json
import os

import pytest

from dflash_fi.errors import LedgerCorrupt
from dflash_fi.evidence.ledger import RUNS_DIR, append_record, gpu_slug, ledger_path, read_records


def test_records_append_and_never_rewrite(tmp_path):
    path = ledger_path("NVIDIA H100 80GB HBM3", tmp_path)
    assert path.name == "nvidia-h100-80gb-hbm3.jsonl" and gpu_slug("") == "unknown-gpu"
    append_record(path, {"label": "a", "tau": 1.5})
    first = path.read_bytes()
    append_record(path, {"label": "b", "tokens": list(range(3000))})
    assert path.read_bytes().startswith(first)
    assert [r["label"] for r in read_records(path)] == ["a", "b"]


def test_unserialisable_record_writes_nothing(tmp_path):
    path = tmp_path / "gpu.jsonl"
    append_record(path, {"label": "a"})
    before = path.read_bytes()
    with pytest.raises(TypeError):
        append_record(path, {"label": "b", "bad": object()})
    assert path.read_bytes() == before


def test_a_truncated_last_line_is_refused_not_extended(tmp_path):
    path = tmp_path / "gpu.jsonl"
    append_record(path, {"label": "a"})
    with open(path, "ab") as f:
        f.write(b'{"label": "half')
    with pytest.raises(LedgerCorrupt, match="does not end with a newline"):
        append_record(path, {"label": "b"})
    with pytest.raises(LedgerCorrupt, match="gpu.jsonl:2 is not a JSON record"):
        read_records(path)


def test_committed_gpu_records_are_complete():
    files = sorted(RUNS_DIR.glob("*.jsonl"))
    assert files, "no GPU records committed under runs/"
    count = 0
    for f in files:
        for r in read_records(f):
            assert r["gpu"] and r["versions"]["vllm"] == "0.22.1" and r["command"] and "git_commit" in r
            if (r["spec"].get("extra") or {}).get("walkthrough_id"):
                assert r["git_commit"], "walkthrough records must name the commit they ran"
            assert os.path.basename(f) == gpu_slug(r["gpu"]) + ".jsonl"
            assert json.loads(json.dumps(r)) == r  # plain JSON all the way down
            count += 1
    assert count >= 8
