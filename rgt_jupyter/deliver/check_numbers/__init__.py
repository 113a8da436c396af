"""``rgt check-numbers``: which numbers of a notebook were typed rather than generated.

Static pass only (the notebook is not executed). Every number of the markdown and raw cells, of
the code cells' numeric literals and of their saved outputs is found
(:mod:`rgt_jupyter.deliver.numtokens`) and classified:

* ``generated``: a ``{{rgt:<ref>|<fmt>}}`` placeholder, or a number of an output whose
  ``metadata["rgt_jupyter"]["generated"]`` records that text (``stale`` when the recorded sha256
  is no longer the results file's);
* ``ignored``: years, dates, versions, section and figure numbers, identifiers (ResNet-50),
  code-like text, execution noise, safe code literals (figsize, ``range()``), configuration
  literals in code and settings named in prose or tables (lr, epochs, batch size), counts
  (``15 corruptions``, ``52K instruction-following data``), model sizes, hardware and setup
  figures, reference lists, citations, money, outputs the cell computed, and numbers with no
  result word near them that no run shows; each with its reason;
* ``ambiguous``: one significant digit and no result word, yet equal to a results.json value;
* ``typed``: the rest (a result word near it, a ``±``, a table of results, or a run showing
  it). A typed number equal to a results.json value at its display rounding gets the match and
  a placeholder to use instead; one that shows an older run of a job than its newest is
  ``stale``, with the newest run's placeholder.

The innocent classes are decided by the words and structure around a number (its sentence,
its table cell's headers, the heading it is under), not by a list of exceptions; the labelled
corpus of ``tests/fixtures/numbers_corpus/`` measures them (``bench/check_numbers_corpus.py``).

Disclose mode exits 0; ``--strict`` exits 1 while a typed or stale number remains.

    python -m rgt_jupyter.deliver.check_numbers NOTEBOOK [--json] [--strict] [--project DIR]

This package's face is :func:`check_numbers`, :func:`main` (the command) and what they return
(:class:`NumbersReport` of :class:`NumberItem`, ``SCHEMA``, ``STATUSES``) or read
(:class:`ResultsIndex` of :class:`Leaf`). Inside: :mod:`.index` (the results.json leaves),
:mod:`.cells` (the pass over cells and outputs), :mod:`.report` (the report).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...errors import RgtError
from ...store.project import project_dir
from ..arguments import check_numbers_arguments as add_arguments
from ..notebook import read_notebook
from .cells import Checker
from .index import Leaf, ResultsIndex
from .report import SCHEMA, STATUSES, NumberItem, NumbersReport

__all__ = [
    "SCHEMA",
    "STATUSES",
    "Leaf",
    "NumberItem",
    "NumbersReport",
    "ResultsIndex",
    "add_arguments",
    "check_numbers",
    "main",
    "run_args",
]


def _read_notebook(path: Path) -> tuple[Any, str]:
    # Read as JSON and checked against nbformat 4's shape (:mod:`rgt_jupyter.deliver.notebook`):
    # importing nbformat costs seconds here (its validator's jsonschema). Other versions go
    # through nbformat's conversion to v4.
    return read_notebook(path)


def _default_project(notebook: Path) -> Path:

    found = project_dir(notebook.parent)
    if (found / ".rgt").is_dir() or (found / "runs").is_dir():
        return found
    env = os.environ.get("RGT_PROJECT")
    return Path(env).expanduser().resolve() if env else found


def check_numbers(
    notebook_path: str | os.PathLike[str],
    project: str | os.PathLike[str] | None = None,
    runs: Sequence[str | os.PathLike[str]] | None = None,
) -> NumbersReport:
    """Classify every number of the notebook (static pass).

    ``project``: where ``runs/*/results.json`` are indexed (default: the notebook's project,
    else ``$RGT_PROJECT``). ``runs``: index these run folders (or results.json files) instead.
    """
    nb_path = Path(notebook_path)
    nb, sha = _read_notebook(nb_path)
    proj = Path(project) if project is not None else _default_project(nb_path.resolve())
    if runs is not None:
        folders = [Path(r) for r in runs]
    else:
        root = proj / "runs"
        folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    index = ResultsIndex.load(folders, proj)
    checker = Checker(nb_path, proj, index)
    cells = nb.get("cells")
    for i, cell in enumerate(cells if isinstance(cells, list) else []):
        if isinstance(cell, dict):
            checker.cell(i, cell)
    checker.figures(cells if isinstance(cells, list) else [])
    order = {
        "markdown": 0,
        "code_source": 0,
        "code_string": 0,
        "code_comment": 0,
        "output": 1,
        "figure_text": 2,
    }
    checker.items.sort(
        key=lambda it: (
            it.cell_index,
            order[it.where],
            -1 if it.output_index is None else it.output_index,
            it.line,
            it.col,
        )
    )
    return NumbersReport(nb_path, sha, checker.items, index.files, checker.warnings)


def run_args(args: argparse.Namespace, project: str | os.PathLike[str] | None = None) -> int:
    """Run ``rgt check-numbers`` from parsed arguments; prints the report, returns the exit
    code (0, 1 with ``--strict`` while a typed or stale number remains, 2 a load error)."""
    try:
        report = check_numbers(args.notebook, project, args.runs)
    except RgtError as exc:
        print(f"rgt check-numbers: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"rgt check-numbers: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"rgt check-numbers: {args.notebook} is not a notebook ({exc})", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        print(report.text())
    if args.strict and (report.typed or report.stale):
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``rgt check-numbers NOTEBOOK [--json] [--strict] [--project DIR] [--run DIR ...]``."""
    parser = argparse.ArgumentParser(
        prog="rgt check-numbers",
        description="List the numbers of a notebook that were typed rather than generated "
        "from results.json.",
    )
    add_arguments(parser)
    parser.add_argument("--project", help="project whose runs/*/results.json are indexed")
    args = parser.parse_args(argv)
    return run_args(args, args.project)
