"""``rgt run``, ``watch``, ``pull``, ``resume``, ``jobs``, ``verify`` and ``trust-host``: the
twins of the magics, over the same API (:mod:`rgt_jupyter.api`)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..api import TRANSIENT_KINDS, Job, JobGroup, find, jobs, submit
from ..args import (
    JOB_ARG,
    PULL_ARGS,
    RESUME_ARGS,
    RUN_ARGS,
    VERIFY_ARGS,
    WATCH_ARGS,
    add_args,
    run_options,
)
from ..errors import RgtError, TransportError
from ..run.rebuild import rebuild_registry
from ..views.render import progress_text, snapshot_text, strip_ansi, transfer_text

COMMANDS = ("run", "watch", "pull", "resume", "stop", "jobs", "verify", "trust-host")


def add_parsers(sub: Any) -> None:
    """Register the subcommands on the ``rgt`` parser."""
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
    stop = sub.add_parser(
        "stop",
        help="ask a job to stop: it saves and ends preempted (a job whose agent died: ended)",
        description="Send a signal to the job's agent, which forwards it (the job saves at its "
        "next step boundary and ends preempted); a job whose agent is gone gets it itself.",
    )
    add_args(stop, [JOB_ARG])
    stop.add_argument(
        "--signal", default="SIGTERM", metavar="SIG", help="the signal (default SIGTERM)"
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
    jobs_cmd = sub.add_parser(
        "jobs",
        help="list this project's jobs (--rebuild: rebuild a damaged registry)",
        description="List the project's jobs. With --rebuild, rebuild the registry from the "
        "jobs' control dirs, the run folders and the project's journal, keeping the old file "
        "beside it.",
    )
    jobs_cmd.add_argument(
        "--rebuild", action="store_true", help="rebuild the registry from what is on disk"
    )
    jobs_cmd.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="ALIAS",
        help="with --rebuild: an SSH host whose job dirs to read as well (repeatable)",
    )
    trust = sub.add_parser(
        "trust-host",
        help="show an SSH host's key and, once you confirm it, trust it",
        description="Fetch the host key ALIAS presents, show its fingerprint, and after an "
        "explicit 'yes' record it in <project>/.rgt/known_hosts (who and when, in "
        ".rgt/trusted_hosts.jsonl). A key that differs from a known one is refused.",
    )
    trust.add_argument("alias", help="a Host of ~/.ssh/config")


def dispatch(args: argparse.Namespace, project: Path) -> int | None:
    """Run a subcommand of this module; None when ``args`` is not one of them."""
    if args.command == "run":
        return _run(args, project)
    if args.command == "watch":
        return _watch(args, project)
    if args.command == "pull":
        return _pull(args, project)
    if args.command == "resume":
        return _resume(args, project)
    if args.command == "stop":
        return _stop(args, project)
    if args.command == "verify":
        return _verify(args, project)
    if args.command == "jobs":
        if args.rebuild:
            print(rebuild_registry(project, args.host).text())
        return _jobs(project)
    if args.command == "trust-host":
        return _trust_host(args.alias, project)
    return None


def _run(args: argparse.Namespace, project: Path) -> int:
    path = Path(args.file)
    if not path.is_file():
        raise RgtError(f"{args.file}: no such file")
    options = {
        **run_options(args),
        "name": args.name or path.stem.replace(" ", "_"),
        "profile": args.profile or "local",
    }
    launched = submit(
        path.read_text(encoding="utf-8"),
        project,
        program_name=path.name if path.suffix == ".py" else "rgt_program.py",
        label=str(path),
        line_offset=0,
        **options,
    )
    for line in launched.notices:
        print(line)
    for job in launched.jobs if isinstance(launched, JobGroup) else [launched]:
        print(f"launched {job.id} (profile {job.profile}); follow it with: rgt watch {job.name}")
    return 0


def _watch(args: argparse.Namespace, project: Path) -> int:
    found = find(args.job, project)
    if isinstance(found, JobGroup):
        states = found.wait(args.timeout) if args.wait else found.states()
        print(found.text())
        return 0 if set(states.values()) == {"finished"} else 1
    job = found
    if not args.wait:
        snap = job.snapshot()
        print(snapshot_text(snap, job.traceback() if snap.state == "failed" else None))
        return 0
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    last = None
    while True:
        try:
            snap = job.snapshot(log_lines=0)
        except TransportError as exc:
            if exc.kind not in TRANSIENT_KINDS:
                raise
            line = f"cannot reach {job.spec.host} now ({exc}); still waiting"
            if line != last:
                print(line, file=sys.stderr, flush=True)
                last = line
            if deadline is not None and time.monotonic() >= deadline:
                print(
                    f"{job.spec.host} still unreachable after {args.timeout:g} s", file=sys.stderr
                )
                return 124
            time.sleep(2.0)
            continue
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


def _pull(args: argparse.Namespace, project: Path) -> int:
    start = time.monotonic()

    def progress(done: int, total: int, path: str) -> None:
        if sys.stderr.isatty():
            text = transfer_text(done, total, path, time.monotonic() - start)
            print("\r" + text[:120].ljust(120), end="", file=sys.stderr, flush=True)

    found = find(args.job, project)
    if isinstance(found, JobGroup):
        runs = found.pull(to=args.to)
        print(runs.text())
        return 0 if all(r.verified for r in runs) else 1

    def waiting(holder: str) -> None:
        print(f"another pull of {found.name} runs ({holder}): waiting for it", file=sys.stderr)

    run = found.pull(to=args.to, on_progress=progress, on_wait=waiting)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(run.text())
    return 0 if run.verified else 1


def _resume(args: argparse.Namespace, project: Path) -> int:
    found = find(args.job, project)
    members = found.jobs if isinstance(found, JobGroup) else [found]
    for member in members:
        job = member.resume(fresh=args.fresh, force=args.force)
        print(f"relaunched {job.id}; follow it with: rgt watch {job.name}")
    return 0


def _stop(args: argparse.Namespace, project: Path) -> int:
    found = find(args.job, project)
    for member in found.jobs if isinstance(found, JobGroup) else [found]:
        member.stop(args.signal)
        print(
            f"sent {args.signal} to {member.id}; `rgt watch {member.name} --wait` follows its end"
        )
    return 0


def _verify(args: argparse.Namespace, project: Path) -> int:
    from ..verify.report import verify_args  # deferred: scipy and the checks, for this command

    report = verify_args(args, project)
    print(json.dumps(report.to_dict(), indent=2, default=str) if args.json else report.text())
    return 1 if args.strict and report.problems else 0


def _jobs(project: Path) -> int:
    """Every job of the project; one whose host cannot be reached now shows its last known
    state and how old that is (a host that failed once is not asked again in this listing)."""
    every: list[Job] = jobs(project)
    if not every:
        print(f"no jobs in {project}")
        return 0
    table = [("ID", "NAME", "STATE", "PROFILE", "CREATED", "PROGRESS")]
    away: dict[tuple[str, str], str] = {}
    now = time.time()
    for job in every:
        where = (job.spec.transport, job.spec.host_alias or "")
        progress = "-"
        if where in away:
            state = _unobserved(job, away[where], now)
        else:
            try:
                snap = job.snapshot(log_lines=0)
                state = snap.display_state
                progress = progress_text(snap.progress) if snap.progress else "-"
            except (TransportError, OSError) as exc:
                away[where] = str(exc)
                state = _unobserved(job, away[where], now)
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(job.spec.created_at))
        table.append((job.id, job.name, state, job.profile, created, progress))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    for (_, host), why in sorted(away.items()):
        print(f"not observed now: {host or 'this machine'} ({why})", file=sys.stderr)
    return 0


def _unobserved(job: Job, why: str, now: float) -> str:
    age = max(0.0, now - job.recorded_at)
    return f"{job.recorded_state}? (not observed; recorded {_age(age)} ago)"


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _trust_host(alias: str, project: Path) -> int:
    from ..transport.ssh.trust import trust_host  # deferred: paramiko, for this command

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
