"""The ``rgt`` command: twins of the magics (``run``, ``watch``, ``pull``, ``resume``) plus
``jobs``, ``profiles`` and ``demo``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .args import PULL_ARGS, RESUME_ARGS, RUN_ARGS, VERIFY_ARGS, WATCH_ARGS, add_args
from .cli_machines import add_parsers, dispatch
from .errors import RemoteTraceback, RgtError
from .render import progress_text, snapshot_text, strip_ansi, transfer_text


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
    run = sub.add_parser(
        "run",
        help="run a Python file as a detached job",
        description="Run FILE as a detached, checkpoint-durable job.",
    )
    run.add_argument("file", metavar="FILE.py")
    add_args(run, RUN_ARGS)
    add_args(
        sub.add_parser(
            "watch",
            help="show a job's status (--wait: until it ends)",
            description="Show a job's status.",
        ),
        WATCH_ARGS,
    )
    add_args(
        sub.add_parser(
            "pull",
            help="pull a job into a verified, immutable run",
            description="Pull outputs and checkpoints into runs/<run-id>/.",
        ),
        PULL_ARGS,
    )
    add_args(
        sub.add_parser(
            "resume",
            help="relaunch a preempted or failed job from its checkpoints",
            description="Relaunch a job into its checkpoint dir.",
        ),
        RESUME_ARGS,
    )
    verify = sub.add_parser(
        "verify",
        help="check runs for bugs, effects and noise",
        description="Run the VERIFY checks on pulled runs; findings are appended to "
        "verify/findings.jsonl.",
    )
    add_args(verify, VERIFY_ARGS)
    verify.add_argument("--json", action="store_true", help="print the report as one JSON object")
    verify.add_argument(
        "--strict", action="store_true", help="exit 1 when any finding is not pass / not_checked"
    )
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
    sub.add_parser("jobs", help="list this project's jobs", description="List jobs.")
    add_parsers(sub)
    trust = sub.add_parser(
        "trust-host",
        help="show an SSH host's key and, once you confirm it, trust it",
        description="Fetch the host key ALIAS presents, show its fingerprint, and after an "
        "explicit 'yes' record it in <project>/.rgt/known_hosts (who and when, in "
        ".rgt/trusted_hosts.jsonl). A key that differs from a known one is refused.",
    )
    trust.add_argument("alias", help="a Host of ~/.ssh/config")
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


def _cmd_run(args: argparse.Namespace, project: Path) -> int:
    from .api import Job
    from .launch import request_from_args
    from .launch_group import launch_seeds

    path = Path(args.file)
    if not path.is_file():
        raise RgtError(f"{args.file}: no such file")
    req = request_from_args(
        args,
        program=path.read_text(encoding="utf-8"),
        name=args.name or path.stem.replace(" ", "_"),
        profile=args.profile or "local",
        program_name=path.name if path.suffix == ".py" else "rgt_program.py",
        label=str(path),
        line_offset=0,
    )
    rows = launch_seeds(req, project)
    for line in rows[0].pop("notices", []):
        print(line)
    for row in rows:
        job = Job(row, project)
        print(f"launched {job.id} (profile {job.profile}); follow it with: rgt watch {job.name}")
    return 0


def _job(ref: str | None, project: Path):  # type: ignore[no-untyped-def]
    from .api import Job

    return Job.latest(project) if ref is None else Job.from_registry(ref, project)


def _group(ref: str | None, project: Path):  # type: ignore[no-untyped-def]
    """The seed group ``ref`` names, when no job has that name or id."""
    from .errors import JobNotFound
    from .group import JobGroup

    if ref is None:
        return None
    try:
        _job(ref, project)
        return None
    except JobNotFound:
        return JobGroup.find(ref, project)


def _cmd_watch(args: argparse.Namespace, project: Path) -> int:
    group = _group(args.job, project)
    if group is not None:
        states = group.wait(args.timeout) if args.wait else group.states()
        print(group.text())
        return 0 if set(states.values()) == {"finished"} else 1
    job = _job(args.job, project)
    if not args.wait:
        snap = job.snapshot()
        print(snapshot_text(snap, job.traceback() if snap.state == "failed" else None))
        return 0
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    last = None
    while True:
        snap = job.snapshot(log_lines=0)
        line = f"{snap.state}: {progress_text(snap.progress)}"
        if line != last:
            print(line, flush=True)
            last = line
        if snap.terminal:
            break
        if deadline is not None and time.monotonic() >= deadline:
            print(f"still {snap.state} after {args.timeout:g} s", file=sys.stderr)
            return 124
        time.sleep(0.5)
    snap = job.snapshot()
    tb = job.traceback() if snap.state == "failed" else None
    print(strip_ansi(snapshot_text(snap, tb)))
    return 0 if snap.state == "finished" else 1


def _cmd_pull(args: argparse.Namespace, project: Path) -> int:
    start = time.monotonic()

    def progress(done: int, total: int, path: str) -> None:
        if sys.stderr.isatty():
            text = transfer_text(done, total, path, time.monotonic() - start)
            print("\r" + text[:120].ljust(120), end="", file=sys.stderr, flush=True)

    group = _group(args.job, project)
    if group is not None:
        runs = group.pull(to=args.to)
        print(runs.text())
        return 0 if all(r.verified for r in runs) else 1
    run = _job(args.job, project).pull(to=args.to, on_progress=progress)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(run.text())
    return 0 if run.verified else 1


def _cmd_verify(args: argparse.Namespace, project: Path) -> int:
    from .verify.report import verify_args

    report = verify_args(args, project)
    print(json.dumps(report.to_dict(), indent=2, default=str) if args.json else report.text())
    return 1 if args.strict and report.problems else 0


def _cmd_deliver(args: argparse.Namespace, project: Path) -> int:
    """The DELIVER commands: check-numbers, reconcile, evidence, deliver, repro."""
    import os

    os.environ["RGT_PROJECT"] = str(project)
    if args.command == "check-numbers":
        from .deliver.check_numbers import main as check_main

        return check_main(["--project", str(project), *args.rest])
    if args.command == "reconcile":
        from .deliver.reconcile import main as reconcile_main

        return reconcile_main(list(args.rest))
    if args.command == "evidence":
        from .deliver.evidence import sync

        changes = sync(project, write=not args.dry_run)
        for change in changes:
            print(change)
        print(f"{len(changes)} evidence row(s) changed" if changes else "EVIDENCE.json is in step")
        return 1 if any(c.error for c in changes) else 0
    if args.command == "deliver":
        from .deliver.report import deliver

        report = deliver(args.notebook, project, docs=args.docs)
        print(json.dumps(report.to_dict(), indent=2, default=str) if args.json else report.text())
        return 1 if args.strict and not report.clean else 0
    from .deliver.repro import repro

    result = repro(args.notebook, project)
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.text())
    return 0 if result.identical else 1


def _cmd_resume(args: argparse.Namespace, project: Path) -> int:
    job = _job(args.job, project).resume(fresh=args.fresh)
    print(f"relaunched {job.id}; follow it with: rgt watch {job.name}")
    return 0


def _cmd_jobs(project: Path) -> int:
    from .api import Job
    from .registry import Registry

    rows = Registry(project).jobs()
    if not rows:
        print(f"no jobs in {project}")
        return 0
    table = [("ID", "NAME", "STATE", "PROFILE", "CREATED", "PROGRESS")]
    for row in rows:
        snap = Job(row, project).snapshot(log_lines=0)
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(row["created_at"]))
        table.append(
            (
                row["id"],
                row["name"],
                snap.state,
                row["profile"],
                created,
                progress_text(snap.progress) if snap.progress else "-",
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


def _cmd_trust_host(alias: str, project: Path) -> int:
    from .transport.ssh import trust_host

    def confirm(message: str) -> bool:
        print(message)
        print(f"Trust this key for {alias}? Type 'yes' to trust it: ", end="", flush=True)
        answer = sys.stdin.readline().strip().lower()
        return answer == "yes"

    result = trust_host(alias, project, confirm)
    if result["status"] == "already trusted":
        print(f"{alias} is already trusted ({result['fingerprint']})")
    else:
        print(f"trusted {alias} ({result['fingerprint']}); recorded in {result['known_hosts']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``rgt``; returns the exit code."""
    args = _parser().parse_args(argv)
    from .project import project_dir

    project = project_dir(args.project)
    try:
        if args.command == "run":
            return _cmd_run(args, project)
        if args.command == "watch":
            return _cmd_watch(args, project)
        if args.command == "pull":
            return _cmd_pull(args, project)
        if args.command == "resume":
            return _cmd_resume(args, project)
        if args.command == "verify":
            return _cmd_verify(args, project)
        if args.command in ("check-numbers", "reconcile", "evidence", "deliver", "repro"):
            return _cmd_deliver(args, project)
        if args.command == "jobs":
            return _cmd_jobs(project)
        done = dispatch(args, project)
        if done is not None:
            return done
        if args.command == "trust-host":
            return _cmd_trust_host(args.alias, project)
        if args.command == "demo":
            from .demo import run_demo

            return run_demo(Path(args.dir), timeout=args.timeout)
    except RemoteTraceback as exc:
        print(f"rgt: {exc.summary}", file=sys.stderr)
        print("\n".join(strip_ansi(line) for line in exc.lines), file=sys.stderr)
        return 1
    except RgtError as exc:
        print(f"rgt: {exc}", file=sys.stderr)
        return 2
    raise AssertionError(args.command)
