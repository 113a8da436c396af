"""The ``rgt`` command: the twins of the magics and the machines' commands.

The parser and the dispatch; each group of commands is a module of its own: :mod:`.jobs`
(``run``, ``watch``, ``pull``, ``resume``, ``jobs``, ``verify``, ``trust-host``),
:mod:`.machines` (``profiles``, ``up``, ``down``, ``instances``), :mod:`.deliver`
(``check-numbers``, ``reconcile``, ``evidence``, ``deliver``, ``repro``) and :mod:`.demo`;
:mod:`.output` writes JSON and colours.

Exit codes, with or without ``--wait``: 0 done as asked (a job finished, or is queued or running
and healthy); 1 the thing looked at is not good (a job ended failed, preempted or lost, a pull
did not verify, a gate refused, ``--strict`` findings); 2 a usage or rgt error, said on stderr;
3 a job runs but needs a look (stalled, or its agent lost); 124 ``--timeout`` ran out; 141 the
reader of the output went away (``rgt jobs | head -1``), as for other command-line tools.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from importlib.metadata import version
from pathlib import Path

from ..errors import RemoteTraceback, RgtError
from ..store.project import project_dir
from . import deliver, jobs, machines
from .output import for_stream

#: The exit code when the reader of stdout went away (128 + SIGPIPE, as a shell reports it).
EXIT_PIPE = 141


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
    parser.add_argument(
        "--version", action="version", version=f"rgt-jupyter {version('rgt-jupyter')}"
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="say what is done on stderr (-vv: every command sent to a host); "
        "errors with their traceback",
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


def _log_to_stderr(verbosity: int) -> None:
    if verbosity <= 0:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("rgt: %(message)s"))
    logger = logging.getLogger("rgt_jupyter")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if verbosity == 1 else logging.DEBUG)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``rgt``; returns the exit code (see the module's docstring)."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader closed the pipe: say nothing more, and let the interpreter's own flush at
        # exit write into /dev/null rather than raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_PIPE


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    _log_to_stderr(args.verbose)
    project = project_dir(args.project)
    try:
        for group in (jobs, deliver, machines):
            done = group.dispatch(args, project)
            if done is not None:
                sys.stdout.flush()
                return done
        if args.command == "demo":
            from .demo import run_demo  # deferred: nbclient and jupyter_client, for the demo

            return run_demo(Path(args.dir), timeout=args.timeout)
    except RemoteTraceback as exc:
        print(f"rgt: {exc.summary}", file=sys.stderr)
        print(for_stream("\n".join(exc.lines), sys.stderr), file=sys.stderr)
        return 1
    except RgtError as exc:
        if args.verbose:
            traceback.print_exc(file=sys.stderr)
        print(f"rgt: {exc}", file=sys.stderr)
        return 2
    raise AssertionError(args.command)
