"""The command-line arguments of ``rgt check-numbers`` and ``rgt reconcile``, apart from the
scanners so that building the ``rgt`` parser imports neither."""

from __future__ import annotations

import argparse


def check_numbers_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``rgt check-numbers`` (shared by its own ``main`` and the CLI)."""
    parser.add_argument("notebook", help="the .ipynb file")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 while a typed or stale number remains"
    )
    parser.add_argument(
        "--run", action="append", dest="runs", help="index this run folder instead (repeatable)"
    )


def reconcile_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``rgt reconcile`` (shared by its own ``main`` and the CLI)."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="documents or folders to scan")
    parser.add_argument(
        "--evidence",
        default=None,
        metavar="E",
        help="EVIDENCE.json (default: <project>/EVIDENCE.json)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
