"""``rgt check-numbers``, ``reconcile``, ``evidence``, ``deliver`` and ``repro``: DELIVER from the
command line (each imported when its command runs)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

COMMANDS = ("check-numbers", "reconcile", "evidence", "deliver", "repro")


def add_parsers(sub: Any) -> None:
    """Register the subcommands on the ``rgt`` parser."""
    for name, text in (
        ("check-numbers", "find numbers typed by hand in a notebook (--json, --strict)"),
        ("reconcile", "check README, Markdown and LaTeX numbers against EVIDENCE.json"),
    ):
        delegated = sub.add_parser(name, help=text, add_help=False, description=text)
        delegated.add_argument("rest", nargs=argparse.REMAINDER)
    evidence = sub.add_parser(
        "evidence",
        help="bring EVIDENCE.json in step with the runs",
        description="Re-read every evidence row's run and key; update value and sha256.",
    )
    evidence.add_argument("--dry-run", action="store_true", help="report changes, write nothing")
    deliver = sub.add_parser(
        "deliver",
        help="audit a notebook's delivery: typed numbers, figures, evidence, disclosures",
        description="Audit what NOTEBOOK delivers; write delivery/<notebook>.manifest.json.",
    )
    deliver.add_argument("notebook", nargs="?", default=None)
    deliver.add_argument("--docs", nargs="*", default=None, help="documents to reconcile")
    deliver.add_argument("--json", action="store_true", help="print the report as JSON")
    deliver.add_argument("--strict", action="store_true", help="exit 1 unless the audit is clean")
    repro_cmd = sub.add_parser(
        "repro",
        help="rebuild a delivered notebook's numbers and figures from runs/ and compare",
        description="Run NOTEBOOK in a clean copy of the project and list changed outputs.",
    )
    repro_cmd.add_argument("notebook")
    repro_cmd.add_argument("--json", action="store_true", help="print the report as JSON")


def dispatch(args: argparse.Namespace, project: Path) -> int | None:
    """Run a subcommand of this module; None when ``args`` is not one of them."""
    if args.command not in COMMANDS:
        return None
    os.environ["RGT_PROJECT"] = str(project)
    if args.command == "check-numbers":
        from ..deliver.check_numbers import main as check_main  # deferred: per command

        return check_main(["--project", str(project), *args.rest])
    if args.command == "reconcile":
        from ..deliver.reconcile import main as reconcile_main  # deferred: per command

        return reconcile_main(list(args.rest))
    if args.command == "evidence":
        from ..deliver.evidence import sync  # deferred: per command

        changes = sync(project, write=not args.dry_run)
        for change in changes:
            print(change)
        print(f"{len(changes)} evidence row(s) changed" if changes else "EVIDENCE.json is in step")
        return 1 if any(c.error for c in changes) else 0
    if args.command == "deliver":
        from ..deliver.report import deliver  # deferred: per command

        report = deliver(args.notebook, project, docs=args.docs)
        print(json.dumps(report.to_dict(), indent=2, default=str) if args.json else report.text())
        return 1 if args.strict and not report.clean else 0
    from ..deliver.repro import repro  # deferred: per command

    result = repro(args.notebook, project)
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.text())
    return 0 if result.identical else 1
