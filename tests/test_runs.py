"""runs/: one owner names, writes and reads every file; what is committed stays readable and is never rewritten."""

import json

import pytest

from dflash_fi.engine.identity import RunId
from dflash_fi.engine.records import EngineRecord
from dflash_fi.errors import BadInput, LedgerCorrupt
from dflash_fi.evidence.ledger import Walkthrough, latest_walkthrough, read_ledger
from dflash_fi.runs import Kind, Runs, classify, gpu_slug, result_path, write_result


def test_every_committed_file_has_a_kind_and_reads():
    runs = Runs()
    files = runs.files()
    assert files, "nothing committed under runs/"
    for f in files:
        content = f.read()
        assert content, f.path.name
        if f.path.suffix == ".json" and f.kind not in (Kind.DRAFTER_SEARCH, Kind.DISCARDED_TRAINING):
            assert content.get("gpu") or content.get("runs"), f.path.name  # every result names where it ran
    kinds = {f.kind for f in files}
    assert {Kind.LEDGER, Kind.WALKTHROUGH, Kind.BENCH_KERNELS, Kind.BENCH_TURNS, Kind.NEAR_TIE_MARGIN} <= kinds


def test_every_ledger_line_is_a_typed_record_or_manifest():
    records, manifests = read_ledger()
    assert len(records) >= 8 and manifests
    for r in records:
        p = r.provenance
        assert p.gpu and p.versions["vllm"] == "0.22.1" and p.command and p.finished_at
        assert r.ok == (r.failure is None)
        if r.walkthrough:
            assert p.git_commit, "walkthrough records must name the commit they ran"
            assert r.walkthrough in manifests
    for f in Runs().files(Kind.LEDGER):
        assert {gpu_slug(line.get("gpu") or line.get("provenance", {}).get("gpu") or f.gpu) for line in f.read()
                if line.get("kind") != "walkthrough"} == {f.gpu}  # one ledger per GPU kind


def test_names_say_what_a_file_is():
    f = classify("runs/nvidia-h200.bench-turns-ddb4e49.json")
    assert (f.gpu, f.kind, f.tag) == ("nvidia-h200", Kind.BENCH_TURNS, "ddb4e49")
    assert classify("x/nvidia-h200.jsonl").kind is Kind.LEDGER
    assert classify("nvidia-h200.walkthrough-20261201T104509-f13604.txt").tag == "20261201T104509-f13604"
    assert classify("nvidia-h200.walkthrough.txt").tag is None
    with pytest.raises(BadInput, match="no kind of file"):
        classify("runs/nvidia-h200.notes.md")
    assert Runs().path(Kind.NEAR_TIE_MARGIN, "NVIDIA H200", "abc").name == "nvidia-h200.near-tie-margin-abc.json"


def test_records_append_and_never_rewrite(tmp_path):
    runs = Runs(tmp_path)
    path = runs.append("NVIDIA H100 80GB HBM3", {"kind": "x", "tau": 1.5})
    assert path.name == "nvidia-h100-80gb-hbm3.jsonl" and gpu_slug("") == "unknown-gpu"
    first = path.read_bytes()
    runs.append("NVIDIA H100 80GB HBM3", {"kind": "x", "tokens": list(range(3000))})
    assert path.read_bytes().startswith(first)
    assert [r.get("tau") for r in runs.ledger()] == [1.5, None]


def test_an_unserialisable_record_writes_nothing(tmp_path):
    runs = Runs(tmp_path)
    path = runs.append("gpu", {"a": 1})
    before = path.read_bytes()
    with pytest.raises(TypeError):
        runs.append("gpu", {"bad": object()})
    assert path.read_bytes() == before


def test_a_truncated_last_line_is_refused_not_extended(tmp_path):
    runs = Runs(tmp_path)
    path = runs.append("gpu", {"a": 1})
    with open(path, "ab") as f:
        f.write(b'{"label": "half')
    with pytest.raises(LedgerCorrupt, match="does not end with a newline"):
        runs.append("gpu", {"b": 2})
    with pytest.raises(LedgerCorrupt, match="gpu.jsonl:2 is not a JSON record"):
        runs.ledger()


def test_results_are_written_once_and_refused_before_the_work(tmp_path):
    runs = Runs(tmp_path)
    path = runs.write_new(Kind.BENCH_TURNS, "GPU", "abc", {"finished_at": "2026-12-01T00:00:00Z"})
    with pytest.raises(BadInput, match="already recorded and runs/ is append-only"):
        runs.write_new(Kind.BENCH_TURNS, "GPU", "abc", {"finished_at": "later"})
    with pytest.raises(BadInput, match="already recorded"):  # a command asks before its minutes of GPU time
        result_path(Kind.BENCH_TURNS, "GPU", "abc", record=True, runs=runs)
    with pytest.raises(BadInput, match="give --tag"):  # `record` has no --out: it says what it has
        runs.write_new(Kind.BENCH_TURNS, "GPU", "abc", {}, remedy="give --tag for a second transcript")
    assert json.loads(path.read_text())["finished_at"] == "2026-12-01T00:00:00Z"
    scratch = result_path(Kind.BENCH_TURNS, "GPU", "abc", record=False)
    assert "artifacts" in scratch.parts and "runs" not in scratch.parts
    assert write_result(tmp_path / "mine.json", {"a": 1}, record=False).read_text().startswith("{")


def test_the_newest_result_is_the_one_that_finished_last(tmp_path):
    runs = Runs(tmp_path)
    runs.write_new(Kind.BENCH_KERNELS, "GPU", "zzz", {"finished_at": "2026-11-01T00:00:00Z"})
    runs.write_new(Kind.BENCH_KERNELS, "GPU", "aaa", {"finished_at": "2026-12-01T00:00:00Z"})
    assert runs.newest(Kind.BENCH_KERNELS).tag == "aaa"
    with pytest.raises(Exception, match="no near-tie-margin result"):
        runs.newest(Kind.NEAR_TIE_MARGIN)


def test_a_walkthrough_is_its_manifest_and_the_records_that_point_to_it(tmp_path):
    """The latest complete walkthrough: every planned run recorded; a walkthrough cut short is not one."""
    from tests.evidence.test_checks import REFERENCE, good_records

    runs = Runs(tmp_path)
    records = good_records()
    for wid, planned in (("complete", list(records)), ("cut-short", list(records))):
        runs.append("GPU", Walkthrough(wid, tuple(planned), len(planned), REFERENCE, None, "abc").to_json())
        kept = list(records.values()) if wid == "complete" else list(records.values())[:3]
        for record in kept:
            from dataclasses import replace

            runs.append("GPU", replace(record, walkthrough=wid).to_json())
    manifest, found = latest_walkthrough(runs)
    assert manifest.id == "complete" and list(found) == list(records)  # in the plan's order
    assert all(isinstance(r, EngineRecord) and r.walkthrough == "complete" for r in found.values())
    assert found[RunId(speculative=False)].generate().tokens == records[RunId(speculative=False)].generate().tokens


def test_a_recorded_transcript_says_where_it_ran_and_what_ran():
    from dflash_fi.runs import transcript

    context = {"versions": {"vllm": "0.22.1", "torch": "2.11.0"}, "gpu": "NVIDIA H200", "compute_capability": "9.0",
               "git_commit": "abc123", "finished_at": "2026-12-01T00:00:00Z"}
    text = transcript(Kind.NBVAL, "1 passed\n", context, "pytest notebooks/08_what_it_costs.ipynb")
    head, command, blank, body = text.split("\n", 3)
    assert head.startswith("# nbval transcript on NVIDIA H200 (SM 9.0), commit abc123; vllm 0.22.1, torch 2.11.0;")
    assert command == "# command: pytest notebooks/08_what_it_costs.ipynb" and not blank and body == "1 passed\n"
    assert "record --ran" in transcript(Kind.NBVAL, "", context, None)  # an unnamed command says so
