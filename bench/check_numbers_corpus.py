"""Benchmark: how well ``rgt check-numbers`` tells typed results from innocent numbers, on the
labelled corpus of ``tests/fixtures/numbers_corpus/`` (real documents from public
repositories and synthetic ones; see ``tests/numbers_corpus.py``).

Each document is checked in a fresh project holding its runs. A labelled result counts as found
when an item over it is ``typed``, or ``ambiguous`` with a suggested placeholder that renders to
the number as written; a labelled innocent number is a false alarm when an item over it is
``typed`` or ``ambiguous``. Writes recall overall and by written form, false alarms per 200
innocent numbers overall and by class, the counts, the misses and false alarms, the items no
label covers (labelling gaps), crashes, and the machine, to
``bench/results/check_numbers_corpus.json`` (or ``--out``). The goal: recall ≥ 0.97 and at most
1 false alarm per 200 innocent numbers.

    python bench/check_numbers_corpus.py [--doc NAME ...] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from _machine import machine  # noqa: E402 - the bench folder on the path

from tests import numbers_corpus as corpus  # noqa: E402 - needs the repo on the path

GOAL_RECALL = 0.97
GOAL_FALSE_ALARMS_PER_200 = 1.0


def run(docs: list[str]) -> dict[str, Any]:
    """Check each document and summarize; adds timings and which documents are real."""
    real = {s["doc"] for s in corpus.sources() if s.get("origin") != "synthetic"}
    results = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rgt-corpus-") as tmp:
        for doc in docs:
            results.append(corpus.evaluate(doc, Path(tmp) / doc))
    elapsed = time.perf_counter() - started
    summary = corpus.summarize(results)
    summary["documents_real"] = sum(1 for d in docs if d in real)
    summary["documents_synthetic"] = len(docs) - summary["documents_real"]
    summary["seconds"] = round(elapsed, 2)
    summary["goal"] = {
        "recall": GOAL_RECALL,
        "false_alarms_per_200": GOAL_FALSE_ALARMS_PER_200,
        "met": bool(
            summary["recall"] is not None
            and summary["recall"] >= GOAL_RECALL
            and summary["false_alarms_per_200"] is not None
            and summary["false_alarms_per_200"] <= GOAL_FALSE_ALARMS_PER_200
        ),
    }
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--doc", action="append", help="only this document (repeatable)")
    parser.add_argument(
        "--out", default=str(HERE / "results" / "check_numbers_corpus.json"), help="JSON to write"
    )
    args = parser.parse_args(argv)
    docs = args.doc or corpus.documents()
    summary = run(docs)
    doc = {"benchmark": "check_numbers_corpus", "machine": machine(), **summary}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(
        f"{summary['documents']} documents ({summary['documents_real']} real): "
        f"recall {summary['recall']} over {summary['results']} results, "
        f"{summary['false_alarms_per_200']} false alarms per 200 over {summary['innocent']} "
        f"innocent numbers; {len(summary['unlabelled'])} unlabelled items, "
        f"{len(summary['crashes'])} crashes -> {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
