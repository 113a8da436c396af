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
from ..errors import RgtError, TransportError, UsageError
from ..run.billing import job_cost
from ..run.phases import phases_to
from ..run.rebuild import rebuild_registry
from ..store.registry import Registry
from ..views.progress import TransferBar
from ..views.render import age_text, progress_text, rate_text, snapshot_text
from .output import dump, for_stream, run_dict, snapshot_dict, state_word

_JSON_HELP = "print what is shown as one JSON object"

#: Exit code of a job that runs but needs a look: stalled, or its agent lost.
EXIT_ATTENTION = 3

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
    watch = sub.add_parser(
        "watch",
        help="show a job's status (--wait: until it ends)",
        description="Show a job's status. Exit 0 finished, or queued or running and healthy; 1 "
        "ended failed, preempted or lost; 3 running but stalled or its agent lost; 124 "
        "--timeout ran out. The same codes hold with and without --wait.",
    )
    add_args(watch, WATCH_ARGS)
    watch.add_argument("--json", action="store_true", help=_JSON_HELP)
    pull = sub.add_parser(
        "pull",
        help="pull a job into a verified, immutable run",
        description="Pull outputs and checkpoints into runs/<run-id>/. Exit 0 verified, 1 not.",
    )
    add_args(pull, PULL_ARGS)
    pull.add_argument("--json", action="store_true", help=_JSON_HELP)
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
    jobs_cmd.add_argument("--json", action="store_true", help=_JSON_HELP)
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
            report = rebuild_registry(project, args.host).text()
            print(report, file=sys.stderr if args.json else sys.stdout)
        return _jobs(project, as_json=args.json)
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
    with phases_to(lambda line: print(f"rgt: {line}", file=sys.stderr, flush=True)):
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


def _exit_code(snap: Any) -> int:
    """0 finished or healthy, 1 ended otherwise, 3 running but needing a look."""
    if snap.terminal:
        return 0 if snap.state == "finished" else 1
    return EXIT_ATTENTION if snap.display_state in ("stalled", "running, agent lost") else 0


def _watch(args: argparse.Namespace, project: Path) -> int:
    found = find(args.job, project)
    if isinstance(found, JobGroup):
        return _watch_group(found, args)
    job = found
    if args.wait:
        code = _wait(job, args.timeout, quiet=args.json)
        if code is not None:
            return code
    snap = job.snapshot()
    tb = job.traceback() if snap.state == "failed" else None
    rate = rate_text(job.progress_records(), snap)
    if args.json:
        dump({**snapshot_dict(snap, tb), "rate": rate or None})
    else:
        print(for_stream(snapshot_text(snap, tb, rate=rate)))
    return _exit_code(snap)


def _watch_group(group: JobGroup, args: argparse.Namespace) -> int:
    states = group.wait(args.timeout) if args.wait else group.states()
    if args.json:
        dump({"group": group.name, "states": states})
    else:
        print(group.text())
    if any(s in ("failed", "preempted", "lost") for s in states.values()):
        return 1
    if args.wait and set(states.values()) != {"finished"}:
        return 124
    return 0


def _wait(job: Job, timeout: float | None, quiet: bool) -> int | None:
    """Follow ``job`` until it ends (None) or ``timeout`` runs out (124), through outages."""
    deadline = None if timeout is None else time.monotonic() + timeout
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
                print(f"{job.spec.host} still unreachable after {timeout:g} s", file=sys.stderr)
                return 124
            time.sleep(2.0)
            continue
        line = f"{snap.state}: {progress_text(snap.progress)}"
        if line != last:
            print(line, file=sys.stderr if quiet else sys.stdout, flush=True)
            last = line
        if snap.terminal:
            return None
        if deadline is not None and time.monotonic() >= deadline:
            print(f"still {snap.state} after {timeout:g} s", file=sys.stderr)
            return 124
        time.sleep(0.5)


def _pull(args: argparse.Namespace, project: Path) -> int:
    found = find(args.job, project)
    say = phases_to(lambda line: print(f"rgt: {line}", file=sys.stderr, flush=True))
    if isinstance(found, JobGroup):
        if args.from_bucket:
            raise UsageError("--from-bucket pulls one job: name a member of the group")
        with say:
            runs = found.pull(to=args.to)
        if args.json:
            dump({"group": runs.name, "runs": [run_dict(r) for r in runs]})
        else:
            print(runs.text())
        return 0 if all(r.verified for r in runs) else 1

    def waiting(holder: str) -> None:
        print(f"another pull of {found.name} runs ({holder}): waiting for it", file=sys.stderr)

    bar = TransferBar(f"pulling {found.name}")
    try:
        with say:
            run = found.pull(
                to=args.to, on_progress=bar, on_wait=waiting, from_bucket=args.from_bucket
            )
    finally:
        bar.close()
    if args.json:
        dump(run_dict(run))
    else:
        print(run.text())
    return 0 if run.verified else 1


def _resume(args: argparse.Namespace, project: Path) -> int:
    found = find(args.job, project)
    members = found.jobs if isinstance(found, JobGroup) else [found]
    for member in members:
        with phases_to(lambda line: print(f"rgt: {line}", file=sys.stderr, flush=True)):
            if args.new_machine:
                job = member.resume_on_new_machine(
                    _confirm_key, alias=args.host, boot_timeout_s=args.boot_timeout
                )
            else:
                job = member.resume(fresh=args.fresh, force=args.force, budget=args.budget)
        print(f"relaunched {job.id}; follow it with: rgt watch {job.name}")
    return 0


def _confirm_key(message: str) -> bool:
    """Ask on the terminal whether to trust the host key ``message`` shows."""
    print(message)
    print("Trust this key? Type 'yes' to trust it: ", end="", flush=True)
    return sys.stdin.readline().strip().lower() == "yes"


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


#: Recorded states no later look can change: such a job's row is read from the registry alone.
SETTLED = frozenset({"finished", "failed"})


def _jobs(project: Path, as_json: bool = False) -> int:
    """Every job of the project; one whose host cannot be reached now shows its last known
    state and how old that is (a host that failed once is not asked again in this listing).
    Jobs recorded as finished or failed are shown as recorded: nothing can change them, so
    their hosts are not asked."""
    every: list[Job] = jobs(project)
    rows: list[dict[str, Any]] = []
    away: dict[tuple[str, str], str] = {}
    now = time.time()
    registry = Registry(project)
    ran = registry.run_seconds()
    machines = {inst["id"]: inst for inst in registry.instances()}
    for job in every:
        where = (job.spec.transport, job.spec.host_alias or "")
        row: dict[str, Any] = {
            "id": job.id,
            "name": job.name,
            "profile": job.profile,
            "host": job.spec.host_alias or job.spec.host,
            "group": (job.spec.group or {}).get("name"),
            "created_at": job.spec.created_at,
            "observed": False,
            "state": job.recorded_state,
            "recorded_age_s": round(max(0.0, now - job.recorded_at), 1),
            "progress": None,
            "settled": False,
        }
        elapsed = ran.get(job.id)
        if job.recorded_state in SETTLED:
            row.update(observed=True, settled=True)  # its state is final: nothing to ask
        elif where not in away:
            try:
                snap = job.snapshot(log_lines=0)
                row.update(observed=True, state=snap.display_state, progress=snap.progress)
                elapsed = snap.elapsed
            except (TransportError, OSError) as exc:
                away[where] = str(exc)
        inst = machines.get(job.spec.instance_id or "")
        row["cost_usd"] = job_cost(job.spec.cost_per_hour, elapsed, inst)[0]
        rows.append(row)
    if as_json:
        dump({"project": str(project), "jobs": rows, "not_observed": _away(away)})
        return 0
    if not rows:
        print(f"no jobs in {project}")
        return 0
    table = [("ID", "NAME", "STATE", "PROFILE", "CREATED", "COST", "PROGRESS")]
    for row in rows:
        state = row["state"] if row["observed"] else _unobserved(row)
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(row["created_at"]))
        progress = progress_text(row["progress"]) if row["progress"] else "-"
        cost = f"${row['cost_usd']:.2f}" if row["cost_usd"] is not None else "-"
        table.append((row["id"], row["name"], state, row["profile"], created, cost, progress))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        cells = [c.ljust(w) for c, w in zip(r, widths, strict=True)]
        if r is not table[0]:
            cells[2] = state_word(r[2], widths[2])
        print("  ".join(cells).rstrip())
    for host, why in _away(away).items():
        print(f"not observed now: {host} ({why})", file=sys.stderr)
    return 0


def _away(away: dict[tuple[str, str], str]) -> dict[str, str]:
    return {host or "this machine": why for (_, host), why in sorted(away.items())}


def _unobserved(row: dict[str, Any]) -> str:
    return f"{row['state']}? (not observed; recorded {age_text(row['recorded_age_s'])} ago)"


def _trust_host(alias: str, project: Path) -> int:
    from ..transport.ssh.trust import trust_host  # deferred: paramiko, for this command

    result = trust_host(alias, project, _confirm_key)
    if result["status"] == "already trusted":
        print(f"{alias} is already trusted ({result['fingerprint']})")
    else:
        print(f"trusted {alias} ({result['fingerprint']}); recorded in {result['known_hosts']}")
    return 0
