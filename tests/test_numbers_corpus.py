"""The labelled corpus of ``rgt check-numbers`` is well formed (every label where it says,
every number the scanner finds labelled, every real document's origin and licence recorded),
and its benchmark runs and writes its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from . import numbers_corpus as corpus

REPO = Path(__file__).resolve().parent.parent


def test_the_corpus_is_well_formed() -> None:
    docs = corpus.documents()
    entries = {s["doc"]: s for s in corpus.sources()}
    assert set(entries) == set(docs), set(entries) ^ set(docs)
    real = [d for d in docs if entries[d]["origin"] != "synthetic"]
    assert len(real) >= 30, len(real)
    for doc in real:
        entry = entries[doc]
        for key in ("repository", "path", "commit", "licence", "url", "licence_file"):
            assert entry.get(key), (doc, key)
        assert (corpus.CORPUS / entry["licence_file"]).is_file(), doc
    size = sum(p.stat().st_size for p in corpus.CORPUS.rglob("*") if p.is_file())
    assert size < 2_000_000, size

    problems: list[str] = []
    innocent = planted = 0
    for doc in docs:
        nb = corpus.notebook(doc)
        assert nb["nbformat"] == 4, doc
        runs = corpus.runs(doc)
        stored = [lab for lab in corpus.labels(doc) if lab.result and lab.kind != "derived"]
        assert runs or not stored, doc
        for run_id, run in runs.items():
            assert run["job"] and isinstance(run["created"], int | float), run_id
            assert isinstance(run["results"], dict) and run["results"], run_id
        where: dict[tuple[int, int | None, int], list[tuple[int, int]]] = defaultdict(list)
        for lab in corpus.labels(doc):
            kinds = corpus.RESULT_FORMS if lab.result else corpus.INNOCENT_CLASSES
            if lab.label not in ("innocent", "result") or lab.kind not in kinds:
                problems.append(f"{doc} cell {lab.cell}: {lab.text!r} is {lab.label}/{lab.kind}")
            found = corpus.span(
                corpus.cell_text(nb, lab.cell, lab.output), lab.text, lab.occurrence
            )
            if found is None:
                problems.append(f"{doc} cell {lab.cell}: {lab.text!r} #{lab.occurrence} not found")
                continue
            line, start, end = found
            where[(lab.cell, lab.output, line)].append((start, end))
            innocent += not lab.result
            planted += lab.result and lab.kind not in ("table",)
        for num in corpus.scanned_numbers(doc):
            spans = where.get((num["cell"], num["output"], num["line"]), [])
            if not any(s < num["end"] and num["start"] < e for s, e in spans):
                place = f"output {num['output']}" if num["output"] is not None else "source"
                problems.append(
                    f"{doc} cell {num['cell']} {place} line {num['line']}: {num['text']!r} unlabelled"
                )
    assert not problems, "\n".join(problems[:50])
    assert innocent >= 300 and planted >= 150, (innocent, planted)


def test_the_bench_runs_and_writes_its_json(tmp_path: Path) -> None:
    out = tmp_path / "corpus.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "check_numbers_corpus.py"),
            "--doc",
            "pytorch_cifar_readme",
            "--doc",
            "synthetic_00",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["benchmark"] == "check_numbers_corpus"
    assert doc["documents"] == 2 and doc["documents_real"] == 1
    assert doc["results"] > 0 and doc["innocent"] > 0
    assert 0 <= doc["recall"] <= 1 and doc["false_alarms_per_200"] >= 0
    assert set(doc["recall_by_form"]) <= corpus.RESULT_FORMS
    assert set(doc["false_alarms_by_class"]) <= corpus.INNOCENT_CLASSES
    for key in ("unlabelled", "crashes", "misses", "false_alarm_items", "machine", "goal"):
        assert key in doc, key
    assert "python" in doc["machine"]


def test_the_check_meets_its_goals_on_the_whole_corpus(tmp_path: Path) -> None:
    """Recall ≥ 0.97 (typed, or ambiguous with a placeholder that renders the number as
    written) and at most 1 false alarm per 200 innocent numbers, computed by the bench on every
    document; the committed bench file says the same of the tree it was made from."""
    out = tmp_path / "corpus.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "check_numbers_corpus.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert not doc["crashes"], doc["crashes"]
    assert doc["goal"]["met"] is True
    assert doc["documents"] >= 30 and doc["results"] >= 150 and doc["innocent"] >= 300
    assert doc["recall"] >= 0.97, (doc["recall_by_form"], doc["misses"])
    assert doc["false_alarms_per_200"] <= 1.0, (
        doc["false_alarms_by_class"],
        doc["false_alarm_items"],
    )
    committed = json.loads((REPO / "bench" / "results" / "check_numbers_corpus.json").read_text())
    assert committed["recall"] >= 0.97 and committed["false_alarms_per_200"] <= 1.0
