"""The fault matrix as one suite: each case claims an entry of :data:`MATRIX` with
``@pytest.mark.fault(CASE, asserts=...)``, measures what it lost with the ``evidence`` fixture,
and names in its docstring (``Protection: ...``) the line that, removed, makes it fail.

A session that ran every case of the matrix writes ``bench/results/faults.json``; a session that
ran some writes ``test-artifacts/faults-partial.json`` and leaves the committed figures alone.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .evidence import Evidence
from .matrix import MATRIX
from .summary import summarize

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "faults.json"
PARTIAL = ROOT / "test-artifacts" / "faults-partial.json"

_cases: dict[str, dict[str, Any]] = {}


def _marker(item: pytest.Item) -> pytest.Mark | None:
    return item.get_closest_marker("fault")


def protection(item: pytest.Item) -> str | None:
    """The docstring's ``Protection:`` paragraph, on one line."""
    doc = getattr(getattr(item, "function", None), "__doc__", None) or ""
    if "Protection:" not in doc:
        return None
    text = doc.split("Protection:", 1)[1].split("\n\n", 1)[0]
    return " ".join(text.split())


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "fault(case, asserts, na=None): a case of the fault matrix (tests/faults/matrix.py)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    problems = []
    for item in items:
        mark = _marker(item)
        if mark is None:
            continue
        case = mark.args[0] if mark.args else None
        if case not in MATRIX:
            problems.append(f"{item.nodeid}: case {case!r} is not in tests/faults/matrix.py")
        if not mark.kwargs.get("asserts"):
            problems.append(f"{item.nodeid}: the fault marker says nothing of what is asserted")
        if protection(item) is None:
            problems.append(f"{item.nodeid}: the docstring names no 'Protection:'")
        if not mark.kwargs.get("mutation"):
            problems.append(
                f"{item.nodeid}: no mutation=(FILE, OLD, NEW) takes the protection away"
            )
    if problems:
        raise pytest.UsageError("fault matrix:\n  " + "\n  ".join(problems))


@pytest.fixture
def evidence(request: pytest.FixtureRequest) -> Iterator[Evidence]:
    """The case's measurements; a case that measured nothing fails at teardown."""
    ev = Evidence()
    yield ev
    mark = request.node.get_closest_marker("fault")
    passed = getattr(request.node, "_fault_call_passed", False)
    if mark is not None and passed and not mark.kwargs.get("na") and ev.bytes_lost is None:
        pytest.fail("this fault case never measured its evidence (evidence.account(...))")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    mark = _marker(item)
    if mark is None:
        return
    report = outcome.get_result()
    if report.when == "call":
        item._fault_call_passed = report.passed  # type: ignore[attr-defined]
    case = _cases.setdefault(
        item.nodeid,
        {
            "case": mark.args[0],
            "fault": MATRIX.get(mark.args[0], "?"),
            "test": item.nodeid,
            "asserted": " ".join(str(mark.kwargs.get("asserts", "")).split()),
            "protection": protection(item),
            "outcome": "passed",
            "duration_s": 0.0,
        },
    )
    case["duration_s"] = round(case["duration_s"] + report.duration, 2)
    if report.outcome != "passed" and case["outcome"] == "passed":
        case["outcome"] = "failed" if report.when == "call" else f"error in {report.when}"
    ev = getattr(item, "funcargs", {}).get("evidence")
    if report.when == "teardown":
        if isinstance(ev, Evidence):
            case.update(ev.record())
        else:
            case.update(
                {
                    "bytes_lost": None,
                    "corrupt_checkpoints_trusted": None,
                    "teardowns_without_gate": None,
                }
            )
        case["not_measured_because"] = mark.kwargs.get("na")


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _cases:
        return
    cases = sorted(_cases.values(), key=lambda c: (list(MATRIX).index(c["case"]), c["test"]))
    covered = {c["case"] for c in cases}
    report = {
        "schema": "rgt-faults/1",
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "kernel": platform.release()},
        "summary": summarize(cases, MATRIX),
        "cases": cases,
    }
    target = RESULTS if covered == set(MATRIX) else PARTIAL
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(target)


@pytest.fixture(scope="session")
def faultshim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The LD_PRELOAD fault shim (fsync EIO by path, wall-clock offset), built for this session."""
    from .shim import build

    return build(tmp_path_factory.mktemp("shim"))
