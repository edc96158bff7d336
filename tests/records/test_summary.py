"""The evidence summary: one small typed file per GPU, replaced section by section, read by one reader; and the
committed one is a single pass that ran the code of HEAD."""

import gzip
import json
import zlib
from dataclasses import replace

import pytest

import dflash_fi.records.summary as S
from dflash_fi.errors import BadInput, NoRecord

PROVENANCE = S.Provenance("NVIDIA H200", "9.0", {"vllm": "0.22.1", "flashinfer": "0.6.11.post2", "torch": "2.11"},
                          "abc1234", "dflash-fi walkthrough", "2026-12-02T10:00:00Z", 12.5, {"steps": "1" * 64})


def test_a_section_is_written_read_and_replaced_with_its_provenance(tmp_path):
    path = S.write(S.Section.GPU_TESTS, {"counts": {"passed": 3}}, PROVENANCE, root=tmp_path)
    assert path == tmp_path / "nvidia-h200.json"
    S.write(S.Section.PROFILE, {"engines": 9}, PROVENANCE, root=tmp_path)
    S.write(S.Section.GPU_TESTS, {"counts": {"passed": 4}}, replace(PROVENANCE, commit="def5678"), root=tmp_path)
    summary = S.read(tmp_path)
    assert summary.entry(S.Section.GPU_TESTS).data == {"counts": {"passed": 4}}
    assert summary.entry(S.Section.GPU_TESTS).provenance.commit == "def5678"
    assert summary.entry(S.Section.PROFILE).provenance == PROVENANCE
    with pytest.raises(NoRecord, match="dflash-fi bench e2e --record"):
        summary.entry(S.Section.BENCH_E2E)


def test_rows_go_beside_the_summary_compressed_and_a_section_without_rows_says_what_to_run(tmp_path):
    rows = {"engines": [{"x": 1.0}] * 50}
    S.write(S.Section.BENCH_E2E, {"targets": []}, PROVENANCE, rows=rows, root=tmp_path)
    S.write(S.Section.PROFILE, {"engines": 0}, PROVENANCE, root=tmp_path)
    summary = S.read(tmp_path)
    assert summary.rows(S.Section.BENCH_E2E) == rows
    assert json.loads(gzip.decompress(summary.rows_path.read_bytes())).keys() == {"bench-e2e"}
    with pytest.raises(NoRecord, match="profile"):
        summary.rows(S.Section.PROFILE)


def test_merged_sections_keep_what_other_processes_wrote_for_the_same_inputs(tmp_path):
    S.write(S.Section.NOTEBOOKS, {"notebooks": {"01": {"seconds": 1}}}, PROVENANCE, root=tmp_path, merge="notebooks")
    S.write(S.Section.NOTEBOOKS, {"notebooks": {"02": {"seconds": 2}}}, PROVENANCE, root=tmp_path, merge="notebooks")
    assert S.read(tmp_path).entry(S.Section.NOTEBOOKS).data["notebooks"].keys() == {"01", "02"}
    other = replace(PROVENANCE, inputs={"steps": "0" * 64})  # another pass: what the old one wrote goes
    S.write(S.Section.NOTEBOOKS, {"notebooks": {"03": {}}}, other, root=tmp_path, merge="notebooks")
    assert S.read(tmp_path).entry(S.Section.NOTEBOOKS).data["notebooks"].keys() == {"03"}


def test_a_section_is_stale_for_the_inputs_that_changed_and_one_recorded_without_inputs_for_all(tmp_path):
    S.write(S.Section.GPU_TESTS, {}, replace(PROVENANCE, inputs={"steps": "a", "plugin": "b"}), root=tmp_path)
    S.write(S.Section.PROFILE, {}, replace(PROVENANCE, inputs={}), root=tmp_path)
    summary = S.read(tmp_path)
    now = {"steps": "a", "plugin": "c"}
    assert summary.stale(lambda s: now) == [S.Stale(S.Section.GPU_TESTS, ("plugin",)),
                                            S.Stale(S.Section.PROFILE, ("plugin", "steps"), recorded=False)]
    assert summary.stale(lambda s: now, (S.Section.GPU_TESTS,)) == [S.Stale(S.Section.GPU_TESTS, ("plugin",))]
    assert summary.stale(lambda s: now, ()) == []
    assert summary.stale(lambda s: {"steps": "a", "plugin": "b"}, (S.Section.GPU_TESTS,)) == []


def test_a_summary_of_schema_1_is_read_its_provenance_renamed_and_rewritten_as_schema_2(tmp_path):
    old = {"gpu": "NVIDIA H200", "compute_capability": "9.0", "versions": {}, "commit": "abc", "step_hash": "f" * 64,
           "command": "dflash-fi notebooks", "finished_at": "2026-12-02T10:00:00Z", "seconds": 3.0}
    ran = {"source_sha256": "0", "executed_on": "NVIDIA H200", "commit": "abc", "step_hash": "f", "seconds": 3.0}
    (tmp_path / "nvidia-h200.json").write_text(json.dumps({"schema": 1, "sections": {"notebooks": {
        "provenance": old, "data": {"notebooks": {"01_x": {**ran, "status": "ok"},
                                                   "02_y": {**ran, "status": "FAILED: NameError: x"}}}}}}))
    summary = S.read(tmp_path)
    assert summary.entry(S.Section.NOTEBOOKS).provenance.inputs == {}
    runs = summary.notebooks()
    assert runs["01_x"].status is S.NotebookStatus.RAN and runs["02_y"].status is S.NotebookStatus.FAILED
    assert runs["02_y"].error == "NameError: x"
    S.write(S.Section.PROFILE, {}, PROVENANCE, root=tmp_path)
    data = json.loads((tmp_path / "nvidia-h200.json").read_text())
    assert data["schema"] == 2 and "step_hash" not in data["sections"]["notebooks"]["provenance"]
    assert S.read(tmp_path).notebooks() == runs


def test_an_engine_records_provenance_is_the_same_type_and_reads_its_earlier_keys():
    from dflash_fi.records.provenance import Provenance

    old = {"gpu": "G", "compute_capability": "9.0", "versions": {}, "git_commit": "abc", "command": "c",
           "finished_at": "now", "wall_s": 1.5, "log_tail": "x"}
    made = Provenance.from_json(old)
    assert made is not None and (made.commit, made.seconds, made.log_tail) == ("abc", 1.5, "x")
    assert Provenance.from_json(made.to_json()) == made and S.Provenance is Provenance


def test_the_walkthrough_is_typed(tmp_path):
    summary = S.read()
    if S.Section.WALKTHROUGH not in summary.entries:
        pytest.skip("no walkthrough committed")
    walkthrough = summary.walkthrough()
    assert walkthrough.records and walkthrough.checks and walkthrough.provenance.gpu
    assert all(r.provenance is not None for r in walkthrough.records.values())


def test_no_summary_and_a_summary_of_another_schema_are_refused_in_one_line(tmp_path):
    with pytest.raises(NoRecord, match="no evidence summary"):
        S.read(tmp_path)
    (tmp_path / "nvidia-h200.json").write_text(json.dumps({"schema": 99, "sections": {}}))
    with pytest.raises(BadInput, match="schema 99"):
        S.read(tmp_path)


def test_floats_are_kept_to_six_digits_and_each_section_is_one_line(tmp_path):
    path = S.write(S.Section.GPU_TESTS, {"x": 1 / 3}, PROVENANCE, root=tmp_path)
    S.write(S.Section.PROFILE, {"y": 2 / 3}, PROVENANCE, root=tmp_path)
    assert S.read(tmp_path).entry(S.Section.GPU_TESTS).data == {"x": 0.333333}
    assert len(path.read_text().splitlines()) == 4  # the opening, one line per section, the closing


# The committed evidence: small, one pass, at the step modules of HEAD.
COMMITTED = sorted(S.EVIDENCE_DIR.glob("*.json"))


def test_the_committed_evidence_is_small():
    total = sum(p.stat().st_size for p in S.EVIDENCE_DIR.glob("*") if p.is_file() and not p.name.startswith("."))
    assert total <= S.EVIDENCE_CAP_BYTES
    for path in COMMITTED:
        rows = S.load(path).rows_path
        added = len(zlib.compress(path.read_bytes())) + (rows.stat().st_size if rows.is_file() else 0)
        assert added <= S.PASS_CAP_BYTES, f"{path.name} and its rows add {added} bytes to the repository"


@pytest.mark.skipif(not COMMITTED, reason="no GPU evidence pass committed yet (evidence/ is empty)")
def test_the_committed_evidence_is_one_pass_that_ran_the_code_of_head():
    from dflash_fi.freshness import stale

    summary = S.read()
    if not any(e.provenance.inputs for e in summary.entries.values()):
        pytest.skip(f"{summary.path.name} was recorded before a pass hashed what it ran: the next GPU pass rewrites it")
    found = stale(summary)
    assert not found, (f"sections of {summary.path.name} ran other code than HEAD's: "
                       f"{[(s.section.key, s.changed) for s in found]}: run the evidence pass on a GPU (README)")
    # One pass is one set of inputs; a phase re-run after a fix outside them may name a later commit, never one
    # that is not in this history.
    import subprocess

    for s, e in summary.entries.items():
        known = subprocess.run(["git", "merge-base", "--is-ancestor", e.provenance.commit, "HEAD"],
                               cwd=S.EVIDENCE_DIR.parent, capture_output=True).returncode
        assert known in (0, 128), f"{s.key} names commit {e.provenance.commit}, not in this history"
    missing = [s.key for s in S.Section if s not in summary.entries]
    assert not missing, f"{summary.path.name} lacks {missing}: run those commands on the GPU"
