"""The ``rgt`` command: the twins of the magics and the machines' commands.

The parser and the dispatch; each group of commands is a module of its own: :mod:`.jobs`
(``run``, ``watch``, ``pull``, ``resume``, ``jobs``, ``verify``, ``trust-host``),
:mod:`.machines` (``profiles``, ``up``, ``down``, ``instances``), :mod:`.deliver`
(``check-numbers``, ``reconcile``, ``evidence``, ``deliver``, ``repro``) and :mod:`.demo`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import RemoteTraceback, RgtError
from ..store.project import project_dir
from ..views.render import strip_ansi
from . import deliver, jobs, machines


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rgt", description="Detached, checkpoint-durable jobs; verified pulls."
    )
    parser.add_argument(
        "--project",
        default=None,
        metavar="DIR",
        help="project root (default: nearest folder with .rgt/, or the cwd)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    jobs.add_parsers(sub)
    deliver.add_parsers(sub)
    machines.add_parsers(sub)
    demo = sub.add_parser(
        "demo",
        help="run the quickstart notebook headless on this machine",
        description="Execute example_notebooks/quickstart.ipynb with nbclient "
        "on the local profile and print where the run landed.",
    )
    demo.add_argument(
        "--dir",
        default="rgt-demo",
        metavar="DIR",
        help="project folder for the demo (default: ./rgt-demo)",
    )
    demo.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        metavar="S",
        help="limit for the whole notebook in seconds (default 900)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``rgt``; returns the exit code."""
    args = _parser().parse_args(argv)
    project = project_dir(args.project)
    try:
        for group in (jobs, deliver, machines):
            done = group.dispatch(args, project)
            if done is not None:
                return done
        if args.command == "demo":
            from .demo import run_demo  # deferred: nbclient and jupyter_client, for the demo

            return run_demo(Path(args.dir), timeout=args.timeout)
    except RemoteTraceback as exc:
        print(f"rgt: {exc.summary}", file=sys.stderr)
        print("\n".join(strip_ansi(line) for line in exc.lines), file=sys.stderr)
        return 1
    except RgtError as exc:
        print(f"rgt: {exc}", file=sys.stderr)
        return 2
    raise AssertionError(args.command)
