"""``rgt reconcile PATH... [--evidence E] [--json]``: every copy of an EVIDENCE number in a
README, a paper or notes agrees with the number itself.

EVIDENCE.json gives one authoritative scalar per evidence row with a numeric ``value``; when the
row's ``results_json`` exists, that file's value at ``key`` is the authority, and an EVIDENCE copy
that differs from it is itself a drift. Markdown, LaTeX and plain-text files (and the Markdown cells of a notebook) are scanned for metric
anchors (a metric name or an alias, as whole words) and for the numbers on either side of them in
the same sentence, and for Markdown and LaTeX tables whose header (or row label) names a metric.
A number passes when it equals the authority at the decimals it shows (half-up or half-even), as a
percent of a fraction (``87.3%`` for 0.873), or as the difference of two entries of one metric
and split. ``a ± b`` is a value and its uncertainty, ``n=100`` a sample count; both are compared
with the row the value belongs to. Method aliases, ``exp_id`` and run names pick that row when
several claims share a metric.

Left alone, and listed as ignored: table/figure/section references, years, versions, dates,
identifiers (``ResNet-50``, ``Set5``, ``AP@0.5``), counts of other things (``300 epochs``), code,
URLs, ``{{rgt:...}}`` placeholders, lines marked ``<!-- rgt:ignore -->`` or ``% rgt:ignore``,
numbers on a split EVIDENCE does not hold, and table rows naming no EVIDENCE method once another
row of the table names one. Numbers written as words ("three seeds") are not read. A prior work's
number quoted in a sentence beside a metric name matches nothing and is reported; mark the line.

Output: ``Reconciled N doc(s) against M authoritative scalar(s) in E.``, then ``No drift.`` (exit
0) or one ``doc:line  metric 'm': reported R != authoritative A`` block per drift (exit 1); a load
or usage error exits 2.

    python -m rgt_jupyter.deliver.reconcile PATH... [--evidence E] [--json] [--project DIR]

This package's face is :func:`reconcile`, :func:`main` and the CLI's :func:`add_arguments` /
:func:`run_args`, with what they report (:class:`ReconcileReport` of :class:`Drift`,
:class:`Checked`, :class:`Ignored`; :class:`ReconcileError`). Inside: :mod:`.evidence` (the
authoritative scalars), :mod:`.documents` (Markdown, text and LaTeX as prose and tables),
:mod:`.tokens` (the numbers of a text), :mod:`.scan` (which row a number is compared with, and
the comparison), :mod:`.report` (the report).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ...errors import RgtError
from ...store.project import project_dir
from ..arguments import reconcile_arguments as add_arguments
from ..notebook import read_notebook
from .documents import latex, markdown
from .evidence import load_evidence
from .report import Checked, Drift, Ignored, Log, ReconcileError, ReconcileReport
from .scan import Scanner

__all__ = [
    "DOC_SUFFIXES",
    "Checked",
    "Drift",
    "Ignored",
    "ReconcileError",
    "ReconcileReport",
    "add_arguments",
    "main",
    "reconcile",
    "run_args",
]

DOC_SUFFIXES = (".md", ".markdown", ".tex", ".txt", ".rst")
_SKIP_DIRS = frozenset({"runs", "results", "checkpoints", "node_modules", "__pycache__", "venv"})


def _documents(paths: Sequence[str | os.PathLike[str]]) -> list[tuple[str, Path]]:
    docs: list[tuple[str, Path]] = []
    for given in paths:
        path = Path(given).expanduser()
        if path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and p.suffix.lower() in DOC_SUFFIXES
                and not any(
                    part.startswith(".") or part in _SKIP_DIRS
                    for part in p.relative_to(path).parts[:-1]
                )
            )
            if not found:
                raise ReconcileError(f"{given}: no .md, .tex or text document in this folder")
            docs.extend((str(p), p) for p in found)
        elif path.is_file():
            docs.append((str(given), path))
        else:
            raise ReconcileError(f"{given}: no such file or folder")
    return docs


def _texts(name: str, path: Path) -> list[tuple[str, list[str]]]:
    """The lines of a document; of a notebook, those of each Markdown and raw cell, named
    ``NOTEBOOK#CELL_ID`` (a file that is not a notebook raises :class:`.NotebookError`)."""
    if path.suffix.lower() == ".ipynb":
        nb, _ = read_notebook(path)
        return [
            (f"{name}#{cell.get('id') or f'cell-{i}'}", str(cell["source"]).splitlines())
            for i, cell in enumerate(nb["cells"])
            if cell["cell_type"] in ("markdown", "raw")
        ]
    try:
        return [(name, path.read_text(encoding="utf-8", errors="replace").splitlines())]
    except OSError as exc:
        raise ReconcileError(f"cannot read {name}: {exc.strerror or exc}") from exc


def reconcile(
    paths: Sequence[str | os.PathLike[str]],
    evidence_path: str | os.PathLike[str] | None = None,
    project: str | os.PathLike[str] | None = None,
) -> ReconcileReport:
    """Compare every anchored number of the documents at ``paths`` (files or folders) with
    EVIDENCE.json (default ``<project>/EVIDENCE.json``); raises :class:`ReconcileError` when the
    evidence or a document cannot be read."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise ReconcileError("no documents given: rgt reconcile README.md paper/ ...")
    root = project_dir(project)
    evidence = Path(evidence_path).expanduser() if evidence_path else root / "EVIDENCE.json"
    display = str(evidence_path) if evidence_path else str(evidence)
    log = Log()
    entries = load_evidence(evidence, root, display, log)
    docs = _documents(paths)
    scanner = Scanner(entries, log)
    order: dict[str, int] = {}
    for name, path in docs:
        for part, raw_lines in _texts(name, path):
            order[part] = len(order)
            units = latex(raw_lines) if path.suffix.lower() == ".tex" else markdown(raw_lines)
            scanner.scan(part, raw_lines, units)
    log.drifts.sort(key=lambda d: (order.get(d.doc, -1), d.line))
    log.checked.sort(key=lambda c: (order.get(c.doc, -1), c.line))
    return ReconcileReport(
        evidence=display,
        docs=[name for name, _ in docs],
        scalars=len(entries),
        drifts=log.drifts,
        checked=log.checked,
        ignored=log.ignored,
    )


def run_args(args: argparse.Namespace, project: str | os.PathLike[str] | None = None) -> int:
    """Run ``rgt reconcile`` from parsed arguments; prints the report, returns the exit code."""
    try:
        report = reconcile(args.paths, args.evidence, project=project)
    except RgtError as exc:
        print(f"rgt reconcile: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.text())
    return report.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """``rgt reconcile PATH... [--evidence E] [--json] [--project DIR]``: 0 no drift, 1 drift,
    2 a load or usage error."""
    parser = argparse.ArgumentParser(
        prog="rgt reconcile",
        description="Check every number next to a metric name in README, paper and notes "
        "against EVIDENCE.json (and EVIDENCE.json against results.json).",
    )
    add_arguments(parser)
    parser.add_argument("--project", default=None, metavar="DIR", help="project root")
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    return run_args(args, args.project)
