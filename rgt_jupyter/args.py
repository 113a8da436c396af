"""Argument lists shared by the magics and the CLI (one definition, two parsers)."""

from __future__ import annotations

import argparse
import difflib
import hashlib
import shlex
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import UsageError

Spec = tuple[tuple[str, ...], dict[str, Any]]


RUN_ARGS: list[Spec] = [
    (("--profile",), {"default": None, "help": "profile to run on (default: local)"}),
    (
        ("--name",),
        {
            "default": None,
            "help": "job name; re-running a preempted or failed job of "
            "this name resumes it (default: from the code)",
        },
    ),
    (
        ("--push",),
        {
            "action": "append",
            "default": [],
            "metavar": "PATH",
            "help": "file or dir the job needs, copied into its versioned code dir (repeatable)",
        },
    ),
    (
        ("--env",),
        {
            "action": "append",
            "default": [],
            "metavar": "K=V",
            "help": "environment variable for the job (repeatable)",
        },
    ),
    (
        ("--secret",),
        {
            "action": "append",
            "default": [],
            "metavar": "NAME",
            "help": "pass the environment variable NAME of this kernel to the job as a secret "
            "(job.secret(NAME)): sent over stdin into a 0600 file, never on a command line, in "
            "an environment or a log (repeatable)",
        },
    ),
    (
        ("--smoke",),
        {
            "action": argparse.BooleanOptionalAction,
            "default": None,
            "help": "run the program on this machine first with RGT_SMOKE=1 under a time "
            "budget; a failure blocks the launch (default: the profile's)",
        },
    ),
    (
        ("--smoke=overfit",),
        {
            "action": "store_const",
            "const": "overfit",
            "dest": "smoke",
            "help": "the overfit-one-batch smoke: the loop's batches (through timed_data) are "
            "its first batch again and again, and the launch is blocked unless the loss "
            "(watch_model(...).loss) falls as far as a model that can learn makes it fall",
        },
    ),
    (
        ("--smoke-timeout",),
        {
            "type": float,
            "default": 120.0,
            "metavar": "S",
            "help": "time budget of the smoke run in seconds (default 120)",
        },
    ),
    (
        ("--gpus",),
        {
            "default": None,
            "metavar": "SPEC",
            "help": "GPUs for the job: indices like 0 or 0,1, 'all' or 'none'; on Slurm and "
            "Kubernetes the number per node, N or TYPE:N (e.g. a100:2)",
        },
    ),
    (
        ("--seeds",),
        {
            "default": None,
            "metavar": "RANGE",
            "help": "one job per seed (0-4, 0,3,7), grouped as one experiment; each sees its "
            "seed as RGT_SEED (job.seed()); a job array on Slurm",
        },
    ),
    (
        ("--time",),
        {
            "default": None,
            "metavar": "LIMIT",
            "help": "Slurm: the job's time limit (HH:MM:SS or D-HH:MM); it is warned with "
            "SIGUSR2 before it ends, to checkpoint",
        },
    ),
    (("--partition",), {"default": None, "help": "Slurm: the partition to submit to"}),
    (
        ("--nodes",),
        {
            "type": int,
            "default": None,
            "metavar": "N",
            "help": "Slurm: nodes for the job; N > 1 runs one torchrun per node under srun",
        },
    ),
    (("--host",), {"default": None, "metavar": "ALIAS", "help": "host alias (ssh profiles)"}),
    (
        ("--python",),
        {
            "default": None,
            "metavar": "PATH",
            "help": "interpreter for the job (default: the profile's)",
        },
    ),
    (
        ("--fresh",),
        {"action": "store_true", "help": "start over in a new checkpoint dir instead of resuming"},
    ),
    (
        ("--grace",),
        {
            "type": float,
            "default": None,
            "metavar": "S",
            "help": "seconds between SIGTERM and SIGKILL (default: the profile's)",
        },
    ),
    (
        ("--ckpt-dir",),
        {
            "default": None,
            "metavar": "DIR",
            "help": "root of the checkpoint dir on the machine (default: the profile's "
            "durable_dir); it must survive the profile's meter-stop verb",
        },
    ),
    (
        ("--bucket",),
        {
            "default": None,
            "metavar": "S3_URL",
            "help": "also upload each checkpoint to this S3-compatible bucket prefix "
            "(s3://BUCKET/PREFIX; endpoint and credentials from the profile's [bucket])",
        },
    ),
    (
        ("--budget",),
        {
            "type": float,
            "default": None,
            "metavar": "USD",
            "help": "at this cost (its run time at the machine's price, every attempt counted) "
            "the job is told to save and stop, as on a preemption; the machine is left to the "
            "teardown gate",
        },
    ),
    (
        ("--allow-ephemeral-ckpt",),
        {
            "action": "store_true",
            "help": "launch even though the checkpoint dir does not survive the profile's "
            "meter-stop verb (recorded in the job and its run.json)",
        },
    ),
]
#: Where a flag of RUN_ARGS lands among the launch options (``rgt_jupyter.submit``'s keyword
#: names) when its own name differs.
_OPTION_NAMES = {"secret": "secrets", "grace": "grace_s"}


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The launch options a line parsed with :data:`RUN_ARGS` holds, by ``submit``'s names."""
    out = {}
    for flags, kw in RUN_ARGS:
        attr = kw.get("dest") or flags[0].lstrip("-").replace("-", "_")
        out[_OPTION_NAMES.get(attr, attr)] = getattr(args, attr)
    return out


INPUTS_ARG: Spec = (
    ("--inputs",),
    {
        "default": "",
        "metavar": "a,b",
        "help": "notebook variables to ship to the job, comma-separated",
    },
)
WATCH_ARGS: list[Spec] = [
    (("job",), {"nargs": "?", "default": None, "help": "job id or name (default: the latest)"}),
    (("--wait",), {"action": "store_true", "help": "block until the job ends"}),
    (
        ("--timeout",),
        {
            "type": float,
            "default": None,
            "metavar": "S",
            "help": "with --wait: give up waiting after S seconds",
        },
    ),
]
PULL_ARGS: list[Spec] = [
    (("job",), {"nargs": "?", "default": None, "help": "job id or name (default: the latest)"}),
    (
        ("--to",),
        {"default": None, "metavar": "DIR", "help": "runs folder (default: <project>/runs)"},
    ),
    (
        ("--from-bucket",),
        {
            "action": "store_true",
            "help": "the machine is gone: pull the newest complete checkpoint from the job's "
            "bucket instead (its outputs were on the machine)",
        },
    ),
]
JOB_ARG: Spec = (
    ("job",),
    {"nargs": "?", "default": None, "help": "job id or name (default: the latest)"},
)
DOWN_ARGS: list[Spec] = [
    JOB_ARG,
    (
        ("--yes",),
        {
            "action": "store_true",
            "help": "approve stopping the meter (only when every check of the gate passes)",
        },
    ),
    (
        ("--override",),
        {
            "default": None,
            "metavar": "INSTANCE_ID",
            "help": "stop the meter although the gate fails: type the instance id to confirm",
        },
    ),
    (
        ("--refuse",),
        {"action": "store_true", "help": "record that the machine is to be kept running"},
    ),
    (
        ("--confirm-stopped",),
        {
            "action": "store_true",
            "help": "guided platforms: record that you did the console action that stops the meter",
        },
    ),
    (
        ("--timeout",),
        {
            "type": float,
            "default": 600.0,
            "metavar": "S",
            "help": "how long to poll for the platform to confirm the machine is gone",
        },
    ),
]
VERIFY_ARGS: list[Spec] = [
    (
        ("runs",),
        {
            "nargs": "+",
            "metavar": "RUN",
            "help": "the variant: run ids or folders, jobs (their newest pulled run), or a seed "
            "group (one run per seed)",
        },
    ),
    (
        ("--baseline",),
        {"nargs": "+", "default": [], "metavar": "RUN", "help": "the baseline, named the same way"},
    ),
    (("--metric",), {"default": None, "metavar": "M", "help": "the metric (default: declared)"}),
    (
        ("--direction",),
        {
            "choices": ["max", "min"],
            "default": None,
            "help": "whether higher (max) or lower (min) is better (default: declared)",
        },
    ),
    (("--split",), {"default": None, "help": "the split the metric is reported on"}),
    (
        ("--changed",),
        {
            "nargs": "+",
            "default": [],
            "metavar": "KEY",
            "help": "config keys the variant changes (default: what the runs declared)",
        },
    ),
]

RESUME_ARGS: list[Spec] = [
    (("job",), {"help": "job id or name"}),
    (("--fresh",), {"action": "store_true", "help": "start over in a new checkpoint dir"}),
    (
        ("--force",),
        {
            "action": "store_true",
            "help": "relaunch even a job that failed with a bug in its code (it runs the same code)",
        },
    ),
    (
        ("--budget",),
        {
            "type": float,
            "default": None,
            "metavar": "USD",
            "help": "the job's budget from here on (default: the one it had)",
        },
    ),
    (
        ("--new-machine",),
        {
            "action": "store_true",
            "help": "its rented machine is gone (the platform says so): create a replacement "
            "from the same plan and continue there from the bucket's newest checkpoint",
        },
    ),
    (
        ("--host",),
        {"default": None, "metavar": "ALIAS", "help": "with --new-machine: its Host alias"},
    ),
    (
        ("--boot-timeout",),
        {
            "type": float,
            "default": 600.0,
            "metavar": "S",
            "help": "with --new-machine: how long the replacement may take to boot (default 600)",
        },
    ),
]


class HelpShown(Exception):
    """Raised instead of exiting after ``--help`` was printed."""


class MagicParser(argparse.ArgumentParser):
    """An argparse parser that raises :class:`UsageError` instead of exiting."""

    def error(self, message: str) -> Any:
        hint = ""
        if "unrecognized arguments" in message:
            for token in message.split(":", 1)[1].split():
                if token.startswith("-"):
                    options = [o for a in self._actions for o in a.option_strings]
                    close = difflib.get_close_matches(token.split("=")[0], options, n=1)
                    if close:
                        hint = f" (did you mean {close[0]}?)"
                        break
        raise UsageError(f"{self.prog}: {message}{hint}. See {self.prog} --help")

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        if message:
            print(message)
        raise HelpShown()


def add_args(parser: argparse.ArgumentParser, specs: list[Spec]) -> argparse.ArgumentParser:
    """Add every spec to ``parser``."""
    for flags, kwargs in specs:
        parser.add_argument(*flags, **kwargs)
    return parser


def magic_parser(prog: str, description: str, specs: list[Spec]) -> MagicParser:
    """A parser for a magic's line."""
    return add_args(MagicParser(prog=prog, description=description), specs)  # type: ignore[return-value]


def parse_line(parser: MagicParser, line: str) -> argparse.Namespace | None:
    """Split ``line`` like a shell and parse it; None when ``--help`` was shown."""
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise UsageError(
            f"{parser.prog}: cannot parse the arguments ({exc}); check the quotes"
        ) from None
    try:
        return parser.parse_args(argv)
    except HelpShown:
        return None


def completions(
    parser: argparse.ArgumentParser,
    before: str,
    symbol: str,
    values: Mapping[str, Callable[[], Iterable[str]]],
) -> list[str]:
    """What may stand at the cursor of a magic's line (IPython tab completion).

    ``before``: the line before the word being typed; ``symbol``: that word. A word starting with
    ``-`` gets the parser's flags; after an option whose ``dest`` is in ``values``, that
    option's values (e.g. profile names); elsewhere the first positional's (e.g. job names).
    """
    if symbol.startswith("-"):
        flags = sorted({o for a in parser._actions for o in a.option_strings if o != "-h"})
        return [f for f in flags if f.startswith(symbol)]
    try:
        words = shlex.split(before)
    except ValueError:
        words = before.split()
    previous = words[-1] if words else ""
    for action in parser._actions:
        if previous in action.option_strings and action.nargs != 0:
            source = values.get(action.dest)
            return sorted(v for v in source() if v.startswith(symbol)) if source else []
    positional = next((a for a in parser._actions if not a.option_strings), None)
    source = values.get(positional.dest) if positional is not None else None
    return sorted(v for v in source() if v.startswith(symbol)) if source else []


NEW_ARG: Spec = (
    ("--new",),
    {
        "action": "store_true",
        "help": "launch even when this cell's job (same notebook, cell and text) is still running "
        "or has finished (by default the cell re-binds to it, or shows its output again)",
    },
)
#: The parser of ``%%remote_run``'s line.
RUN_MAGIC = magic_parser(
    "%%remote_run",
    "Run the cell as a detached, checkpoint-durable job; returns a Job at once.",
    [*RUN_ARGS, INPUTS_ARG, NEW_ARG],
)


def cell_digest(args: argparse.Namespace, cell: str) -> str:
    """What identifies a ``%%remote_run`` cell's launch: its options (``--new`` aside) and body
    (as IPython passes it: the text after the magic's line, ending in a newline)."""
    options = {k: v for k, v in sorted(vars(args).items()) if k != "new"}
    return hashlib.sha256(f"{options!r}\n{cell}".encode()).hexdigest()


def saved_cell_digest(source: str) -> str | None:
    """:func:`cell_digest` of a saved notebook cell's source, when it is a ``%%remote_run``
    cell whose line parses (None otherwise): what finds a job's cell in a notebook file when the
    frontend that ran it sent no cell id."""
    text = source.lstrip("\n")
    if not text.startswith("%%remote_run"):
        return None
    first, _, body = text.partition("\n")
    line = first[len("%%remote_run") :]
    if line and not line[0].isspace():
        return None  # another magic whose name starts the same
    if body and not body.endswith("\n"):
        body += "\n"  # IPython ends every cell with a newline before passing the body
    try:
        args = parse_line(RUN_MAGIC, line)
    except (UsageError, SystemExit):
        return None
    return None if args is None else cell_digest(args, body)
