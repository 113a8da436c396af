"""``rgt check-numbers``, ``reconcile``, ``evidence``, ``deliver`` and ``repro``: DELIVER from the
command line (the heavier ones imported when their command runs)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from ..deliver.arguments import check_numbers_arguments as check_arguments
from ..deliver.arguments import reconcile_arguments

COMMANDS = ("check-numbers", "reconcile", "evidence", "deliver", "repro")


def add_parsers(sub: Any) -> None:
    """Register the subcommands on the ``rgt`` parser."""
    check_arguments(
        sub.add_parser(
            "check-numbers",
            help="find numbers typed by hand in a notebook (--json, --strict)",
            description="List the numbers of a notebook that were typed rather than generated "
            "from results.json. Exit 0; with --strict 1 while a typed or stale number remains; "
            "2 when the notebook cannot be read.",
        )
    )
    reconcile_arguments(
        sub.add_parser(
            "reconcile",
            help="check README, Markdown and LaTeX numbers against EVIDENCE.json",
            description="Check every number next to a metric name in README, paper and notes "
            "against EVIDENCE.json (and EVIDENCE.json against results.json). Exit 0 no drift, "
            "1 drift, 2 a load error.",
        )
    )
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
        from ..deliver.check_numbers import run_args as check_run  # deferred: per command

        return check_run(args, project)
    if args.command == "reconcile":
        from ..deliver.reconcile import run_args as reconcile_run  # deferred: per command

        return reconcile_run(args, project)
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
