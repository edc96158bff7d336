"""The evidence summary: one small typed file per GPU, replaced section by section, read by one reader; and the
committed one is a single pass at the step modules of HEAD."""

import gzip
import json
import zlib
from dataclasses import replace

import pytest

import dflash_fi.summary as S
from dflash_fi.errors import BadInput, NoRecord

PROVENANCE = S.Provenance("NVIDIA H200", "9.0", {"vllm": "0.22.1", "flashinfer": "0.6.11.post2", "torch": "2.11"},
                          "abc1234", S.step_hash(), "dflash-fi walkthrough", "2026-12-02T10:00:00Z", 12.5)


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


def test_merged_sections_keep_what_other_processes_wrote_for_the_same_steps(tmp_path):
    S.write(S.Section.NOTEBOOKS, {"notebooks": {"01": {"seconds": 1}}}, PROVENANCE, root=tmp_path, merge="notebooks")
    S.write(S.Section.NOTEBOOKS, {"notebooks": {"02": {"seconds": 2}}}, PROVENANCE, root=tmp_path, merge="notebooks")
    assert S.read(tmp_path).entry(S.Section.NOTEBOOKS).data["notebooks"].keys() == {"01", "02"}
    other = replace(PROVENANCE, step_hash="0" * 64)  # another pass: what the old one wrote goes
    S.write(S.Section.NOTEBOOKS, {"notebooks": {"03": {}}}, other, root=tmp_path, merge="notebooks")
    assert S.read(tmp_path).entry(S.Section.NOTEBOOKS).data["notebooks"].keys() == {"03"}


def test_the_step_hash_follows_the_step_modules_and_a_section_of_other_steps_is_stale(tmp_path):
    steps = tmp_path / "steps"
    steps.mkdir()
    (steps / "step1.py").write_text("HUNKS = ()\n")
    before = S.step_hash(steps)
    (steps / "step1.py").write_text("HUNKS = ('changed',)\n")
    assert S.step_hash(steps) != before
    S.write(S.Section.GPU_TESTS, {}, replace(PROVENANCE, step_hash=before), root=tmp_path)
    assert S.read(tmp_path).stale(S.step_hash(steps)) == [S.Section.GPU_TESTS]
    assert S.read(tmp_path).stale(before) == []


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
def test_the_committed_evidence_is_one_pass_at_the_step_modules_of_head():
    summary = S.read()
    stale = summary.stale()
    assert not stale, (f"sections {[s.key for s in stale]} of {summary.path.name} ran other step modules than HEAD's: "
                       "run the evidence pass on a GPU (README, 'The evidence')")
    # One pass is one set of step modules; a phase re-run after a fix outside them (a notebook's cells) may name a
    # later commit, never one that is not in this history.
    import subprocess

    for s, e in summary.entries.items():
        known = subprocess.run(["git", "merge-base", "--is-ancestor", e.provenance.commit, "HEAD"],
                               cwd=S.REPO_ROOT, capture_output=True).returncode
        assert known in (0, 128), f"{s.key} names commit {e.provenance.commit}, not in this history"
    missing = [s.key for s in S.Section if s not in summary.entries]
    assert not missing, f"{summary.path.name} lacks {missing}: run those commands on the GPU"
