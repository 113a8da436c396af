"""The README's fault-matrix line is the one generated from the committed ``faults.json``, and
that report covers the whole matrix with nothing lost, trusted or ungated."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from .matrix import MATRIX
from .summary import README, RESULTS, readme_block, readme_line, summarize

MUTANTS = RESULTS.with_name("fault_mutants.json")


def _fault_tests() -> set[str]:
    """``file::function`` of every test that claims a case of the matrix."""
    found = set()
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                "mark.fault" in ast.unparse(d) for d in node.decorator_list
            ):
                found.add(f"tests/faults/{path.name}::{node.name}")
    return found


def test_the_readme_line_is_generated_from_the_committed_report() -> None:
    report = json.loads(RESULTS.read_text())
    assert readme_block(README.read_text()) == readme_line(report), (
        "run the fault suite, then `python -m tests.faults.summary`"
    )


def test_the_committed_report_covers_the_matrix_and_found_nothing_lost() -> None:
    report = json.loads(RESULTS.read_text())
    assert report["summary"] == summarize(report["cases"], MATRIX)
    assert {c["case"] for c in report["cases"]} == set(MATRIX)
    summary = report["summary"]
    assert summary["failed"] == 0 and summary["passed"] == summary["tests"] > 0
    assert summary["bytes_of_evidence_lost"] == 0
    assert summary["corrupt_checkpoints_trusted"] == 0
    assert summary["teardowns_without_gate"] == 0
    assert summary["tests_measuring_corrupt_trust"] > 0
    assert summary["tests_measuring_the_gate"] > 0
    for case in report["cases"]:
        assert case["protection"], case["test"]
        assert case["bytes_lost"] is not None or case["not_measured_because"], case["test"]


def test_every_protection_was_taken_away_once_and_its_case_failed() -> None:
    """``bench/results/fault_mutants.json`` is what ``python -m tests.faults.mutants --json``
    wrote: each fault test was run with its protection removed, and failed."""
    outcomes = json.loads(MUTANTS.read_text())["mutants"]
    assert {o["test"] for o in outcomes} == _fault_tests(), "run python -m tests.faults.mutants"
    survivors = [o for o in outcomes if o["result"] != "fails without it"]
    assert survivors == []
