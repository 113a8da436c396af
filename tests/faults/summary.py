"""The summary of ``bench/results/faults.json`` and the README line generated from it.

``python -m tests.faults.summary`` rewrites the README line from the committed figures.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RESULTS = ROOT / "bench" / "results" / "faults.json"
#: The README line lies between these two comments.
BEGIN, END = "<!-- faults.json summary -->", "<!-- end faults.json summary -->"


def _total(cases: list[dict[str, Any]], key: str) -> int:
    return sum(int(c[key]) for c in cases if c.get(key) is not None)


def summarize(cases: list[dict[str, Any]], matrix: dict[str, str]) -> dict[str, Any]:
    """Totals over the cases (a figure no case measured counts as 0 of 0 cases)."""
    return {
        "matrix_cases": len(matrix),
        "matrix_cases_covered": len({c["case"] for c in cases} & set(matrix)),
        "tests": len(cases),
        "passed": sum(c["outcome"] == "passed" for c in cases),
        "failed": sum(c["outcome"] != "passed" for c in cases),
        "bytes_of_evidence_lost": _total(cases, "bytes_lost"),
        "tests_measuring_bytes_lost": sum(c.get("bytes_lost") is not None for c in cases),
        "corrupt_checkpoints_trusted": _total(cases, "corrupt_checkpoints_trusted"),
        "tests_measuring_corrupt_trust": sum(
            c.get("corrupt_checkpoints_trusted") is not None for c in cases
        ),
        "teardowns_without_gate": _total(cases, "teardowns_without_gate"),
        "tests_measuring_the_gate": sum(c.get("teardowns_without_gate") is not None for c in cases),
    }


def readme_line(report: dict[str, Any]) -> str:
    """The README's summary line for a ``faults.json`` report."""
    s = report["summary"]
    return (
        f"Fault matrix (`bench/results/faults.json`, {report['generated_at'][:10]}): "
        f"{s['matrix_cases_covered']}/{s['matrix_cases']} cases in {s['tests']} tests, "
        f"{s['passed']} passed; {s['bytes_of_evidence_lost']} bytes of evidence lost "
        f"({s['tests_measuring_bytes_lost']} tests measured it), "
        f"{s['corrupt_checkpoints_trusted']} corrupt checkpoints trusted "
        f"({s['tests_measuring_corrupt_trust']}), "
        f"{s['teardowns_without_gate']} teardowns reachable without the gate "
        f"({s['tests_measuring_the_gate']})."
    )


def readme_block(text: str) -> str | None:
    """The line the README holds between the markers, or None."""
    match = re.search(re.escape(BEGIN) + r"\n(.*?)\n" + re.escape(END), text, re.S)
    return match.group(1) if match else None


def write_readme(readme: Path = README, results: Path = RESULTS) -> str:
    """Rewrite the README's summary line from ``results``; return it."""
    line = readme_line(json.loads(results.read_text()))
    text = readme.read_text()
    if readme_block(text) is None:
        raise SystemExit(f"{readme} has no {BEGIN} ... {END} block")
    new = re.sub(
        re.escape(BEGIN) + r"\n.*?\n" + re.escape(END),
        lambda _m: f"{BEGIN}\n{line}\n{END}",
        text,
        count=1,
        flags=re.S,
    )
    readme.write_text(new)
    return line


if __name__ == "__main__":
    print(write_readme())
    sys.exit(0)
