"""A pytest run as data: its JUnit XML (`pytest --junitxml=FILE`), one outcome per test. pytest's printed summary is
text for people and is never read back."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from dflash_fi.errors import BadInput


def outcomes(path: Path) -> list[dict]:
    """Each test case: its id (classname and name), outcome (passed, failed, error, skipped, xfailed) and seconds."""
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        raise BadInput(f"{path} is not JUnit XML ({exc}): give the file `pytest --junitxml=FILE` wrote") from None
    cases = list(root.iter("testcase"))
    if root.tag not in ("testsuites", "testsuite") or not cases:
        raise BadInput(f"{path} holds no JUnit test cases: give the file `pytest --junitxml=FILE` wrote")
    out = []
    for case in cases:
        children = {child.tag: child for child in case}
        skipped = children.get("skipped")
        if "failure" in children:
            outcome = "failed"
        elif "error" in children:
            outcome = "error"
        elif skipped is not None:  # pytest writes an expected failure as a skip of type pytest.xfail
            outcome = "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"
        else:
            outcome = "passed"
        out.append({"id": f"{case.get('classname', '')}::{case.get('name', '')}", "outcome": outcome,
                    "seconds": round(float(case.get("time") or 0), 2)})
    return out


def record_pytest(kind: str, junit: str, ran: str) -> Path:
    """`dflash-fi record`: a pytest run on the GPU (its JUnit XML) as its section of the evidence summary."""
    import dflash_fi.summary as S
    from dflash_fi.stack import require_gpu, run_context

    section = {S.Section.GPU_TESTS.key: S.Section.GPU_TESTS}[kind]
    source = Path(junit)
    if not source.is_file():
        raise BadInput(f"no file {source} to record: give the --junitxml file pytest wrote")
    tests = outcomes(source)  # refuses a file that is not JUnit XML, before anything is written
    require_gpu("dflash-fi record (a GPU run is named by the GPU it ran on)")
    counts = {o: sum(t["outcome"] == o for t in tests) for o in ("passed", "failed", "error", "skipped", "xfailed")}
    context = {**run_context(), "command": ran}
    return S.write(section, {"counts": counts, "tests": tests}, S.provenance(context, sum(t["seconds"] for t in tests)))
