"""``rgt profiles``, ``rgt up``, ``rgt down`` and ``rgt instances``: machines and their meters
(what each command needs imported when it runs, so that other commands start fast)."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ..args import DOWN_ARGS, add_args
from ..errors import UsageError
from .output import dump, fit, pad

_JSON_HELP = "print what is shown as one JSON object"

_SSH_RE = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?P<host>[A-Za-z0-9.\-\[\]:]+)$")


def add_parsers(sub: Any) -> None:
    """Register the subcommands on the ``rgt`` parser."""
    prof = sub.add_parser(
        "profiles",
        help="list the profiles; `profiles show NAME` explains one",
        description="List profiles, explain one (what stop and destroy keep and lose, where "
        "checkpoints must go, what keeps billing), or acknowledge its danger clocks.",
    )
    prof.add_argument("action", nargs="?", choices=("list", "show", "ack"), default="list")
    prof.add_argument("name", nargs="?", default=None)
    prof.add_argument("--json", action="store_true", help=_JSON_HELP)
    up = sub.add_parser(
        "up",
        help="bring up a machine on a rental profile (API or guided)",
        description="Create a machine through the platform's API, or record one you created in "
        "its console (guided platforms: --connection).",
    )
    up.add_argument("profile")
    up.add_argument("--host", default="", metavar="ALIAS", help="the ~/.ssh/config Host for it")
    up.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="K=V",
        help="a create parameter of the platform's API (JSON values allowed; repeatable)",
    )
    up.add_argument("--connection", default=None, help="guided: the SSH command the console shows")
    up.add_argument("--id", default=None, help="guided: the instance name the console shows")
    up.add_argument(
        "--ssh-config",
        action="store_true",
        help="write the machine's Host block (named by --host) into the SSH config",
    )
    up.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="USD",
        help="at this cost of the machine, its jobs are told to save and stop (the meter is "
        "then stopped only behind the teardown gate)",
    )
    up.add_argument("--ack-clocks", action="store_true", help="acknowledge the danger clocks")
    up.add_argument("--yes", action="store_true", help="approve the spend")
    down = sub.add_parser(
        "down",
        help="the teardown gate; stop a machine's meter once its work is safe",
        description="Compute the teardown gate from artifacts; with --yes (gate passing) or "
        "--override INSTANCE_ID, stop the meter with the profile's verb. Exit 0 when the gate "
        "passes or the decision is done, 1 when it is refused and nothing was done.",
    )
    add_args(down, DOWN_ARGS)
    down.add_argument("--json", action="store_true", help=_JSON_HELP)
    instances = sub.add_parser(
        "instances",
        help="machines brought up, with cost so far",
        description="The machines `rgt up` brought up in this project, with their state, cost "
        "so far and any idle warning.",
    )
    instances.add_argument("--json", action="store_true", help=_JSON_HELP)
    auto = sub.add_parser(
        "autostop",
        help="stop a machine's meter by itself once its jobs are pulled, verified, gate passing",
        description="`on PROFILE` records your standing approval for a profile that opts in "
        '(autostop = "after-verified-pull") and starts a watcher that outlives this shell: '
        "once every job on a machine ended, it pulls and verifies them and stops the meter only "
        "if the teardown gate passes, else keeps the machine and says why. `off PROFILE` "
        "withdraws the approval; `status` says what the watcher did; `watch` runs it here.",
    )
    auto.add_argument("action", choices=("on", "off", "status", "watch"))
    auto.add_argument("profile", nargs="?", default=None)
    auto.add_argument(
        "--interval", type=float, default=60.0, metavar="S", help="seconds between looks (60)"
    )
    auto.add_argument("--json", action="store_true", help=_JSON_HELP)


def dispatch(args: argparse.Namespace, project: Path) -> int | None:
    """Run a subcommand of this module; None when ``args`` is not one of them."""
    if args.command == "profiles":
        return _profiles(args, project)
    if args.command == "up":
        return _up(args, project)
    if args.command == "down":
        return _down(args, project)
    if args.command == "instances":
        return _instances(project, as_json=args.json)
    if args.command == "autostop":
        return _autostop(args, project)
    return None


def _profiles(args: argparse.Namespace, project: Path) -> int:
    from ..backends import get_backend  # deferred: per command
    from ..machines.profile_text import explain  # deferred: per command
    from ..machines.profiles import available, load_profile  # deferred: per command
    from ..store.registry import Registry  # deferred: per command

    if args.action == "list":
        profiles = [load_profile(name, project) for name in sorted(available(project))]
        if args.json:
            dump({"profiles": [_profile_row(p) for p in profiles]})
            return 0
        for prof in profiles:
            mark = " (irreversible)" if prof.meter_stop.irreversible else ""
            verb = fit(prof.meter_stop.verb, 40 - len(mark)) + mark
            print(f"{prof.name:11} {prof.kind:11} {pad(verb, 40)} {prof.description}")
        return 0
    if not args.name:
        raise UsageError(f"`rgt profiles {args.action} NAME`: which profile?")
    prof = load_profile(args.name, project)
    get_backend(prof.launcher)  # a launcher no backend answers to is refused here, by name
    if args.action == "show":
        if args.json:
            dump({**asdict(prof), "explained": explain(prof, project)})
        else:
            print(explain(prof, project))
        return 0
    text = [n.text for n in prof.danger_clocks]
    if Registry(project).ack(prof.name, "danger_clocks", how="rgt profiles ack", text=text):
        print(f"acknowledged the danger clocks of {prof.name}")
    else:
        print(f"the danger clocks of {prof.name} were already acknowledged")
    return 0


def _profile_row(prof: Any) -> dict[str, Any]:
    return {
        "name": prof.name,
        "kind": prof.kind,
        "meter_stop": prof.meter_stop.verb,
        "irreversible": prof.meter_stop.irreversible,
        "description": prof.description,
        "source": prof.source,
    }


def _param(pair: str) -> tuple[str, Any]:
    key, sep, raw = pair.partition("=")
    if not sep or not key:
        raise UsageError(f"--set {pair!r}: write KEY=VALUE")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


def _up(args: argparse.Namespace, project: Path) -> int:
    from ..machines.profiles import load_profile  # deferred: per command
    from ..run.teardown import provider_for  # deferred: per command
    from ..store.registry import Registry  # deferred: per command

    prof = load_profile(args.profile, project)
    registry = Registry(project)
    if not prof.metered:
        raise UsageError(f"profile {prof.name!r} has no meter: there is nothing to bring up")
    if prof.danger_clocks and not registry.acked(prof.name, "danger_clocks"):
        if not args.ack_clocks:
            clocks = "\n  ".join(n.text for n in prof.danger_clocks)
            raise UsageError(
                f"{prof.platform or prof.name} has danger clocks:\n  {clocks}\n"
                "Acknowledge them with --ack-clocks (recorded once per project)."
            )
        registry.ack(prof.name, "danger_clocks", how="rgt up --ack-clocks")
    if not prof.provider:
        return _up_guided(args, prof, registry)
    params = {**prof.up, **dict(_param(p) for p in args.set)}
    provider, price = _plan(prof, params, project)
    if args.budget is not None:
        if args.budget <= 0:
            raise UsageError(f"--budget {args.budget:g}: give a positive amount in USD")
        hours = (
            f"about {args.budget / price:.1f} h at this price"
            if price
            else ("counted at the price the platform reports once it is up")
        )
        print(
            f"  {'budget':15} ${args.budget:.2f}: {hours}; then its jobs save and stop, "
            "and the meter waits for the gate"
        )
    if not args.yes:
        print(f"Nothing created. `rgt up {prof.name} --yes` creates exactly this plan.")
        return 0
    if provider is None:
        provider = provider_for(prof)  # says which key is missing
    inst = provider.up(params)
    instance_id = f"{inst.provider}:{inst.id}"
    ssh = (
        f"ssh -p {inst.ssh_port} {inst.ssh_user or 'root'}@{inst.ssh_host}" if inst.ssh_host else ""
    )
    registry.add_instance(
        instance_id,
        prof.name,
        inst.provider,
        inst.id,
        args.host,
        inst.state,
        inst.cost_per_hour or price or None,
        {"ssh": ssh, "params": params, "budget_usd": args.budget},
    )
    print(f"up: {instance_id} ({inst.raw_state})" + (f"; {ssh}" if ssh else ""))
    if inst.ssh_host:
        _next_step(
            args, prof.name, inst.ssh_host, int(inst.ssh_port or 22), inst.ssh_user or "root", None
        )
    return 0


def _plan(prof: Any, params: dict[str, Any], project: Path) -> tuple[Any, float | None]:
    """Print what ``rgt up`` would create (the create request the adapter would send, its price,
    each disk's fate at the meter-stop verb, whether the durable dir survives it), creating
    nothing; refuse a plan whose durable dir the profile's own rule refuses. Returns the
    adapter (None without an API key) and the price per hour (None when unknown)."""
    from ..machines.durability import check, surviving_options  # deferred: per command
    from ..machines.providers import ProviderError, provider_class  # deferred: per command
    from ..run.teardown import provider_for  # deferred: per command

    home = "~"
    durable = prof.expand(prof.durable_dir, project, home)
    verdict = check(prof, durable, project, home)
    bucket = str(prof.bucket.get("url", ""))
    if not verdict.ok and bucket:  # the checkpoints also go where the machine cannot take them
        verdict = replace(
            verdict,
            ok=True,
            reason=f"{verdict.reason}; each checkpoint is also "
            f"uploaded to {bucket}, which outlives the machine",
        )
    if not verdict.ok:
        raise UsageError(
            f"`rgt up {prof.name}` would create a machine whose checkpoints do not survive "
            f"{prof.meter_stop.verb}: {verdict.reason}. Put the durable dir on "
            f"{surviving_options(prof, project, home)} (its profile's durable_dir), then run "
            "`rgt up` again; nothing was created"
        )
    provider: Any = None
    why_no_quote = ""
    try:
        provider = provider_for(prof)
    except UsageError as exc:
        why_no_quote = str(exc)
    adapter = provider or provider_class(prof.provider).planner()
    body = adapter.request(params)
    quote: float | None = None
    if provider is not None:
        try:
            quote = provider.quote(body)
        except ProviderError as exc:
            why_no_quote = f"the platform's price could not be read ({exc})"
    if quote is not None:
        price, whose = quote, "the platform's price"
    elif prof.cost_per_hour:
        price, whose = float(prof.cost_per_hour), "the profile's cost_per_hour"
        whose += f"; {why_no_quote}" if why_no_quote else "; the platform's API gives none"
    else:
        price, whose = None, why_no_quote or "the platform's API gives none before create"
    ms = prof.meter_stop
    print(f"Plan for {prof.name} on {prof.platform or prof.provider}:")
    for what, value in adapter.plan_fields(body):
        print(f"  {what:15} {value}")
    shown = f"${price:.2f}/h" if price is not None else "unknown"
    print(f"  {'price':15} {shown} ({whose})")
    print(f"  {'meter stop':15} {ms.verb}" + (" (irreversible)" if ms.irreversible else ""))
    print(f"  {'durable dir':15} {durable}: {verdict.reason}")
    if bucket:
        where = prof.bucket.get("endpoint") or "AWS S3"
        print(
            f"  {'bucket':15} {bucket} at {where}, credentials "
            f"{prof.bucket.get('credentials') or 'default'} (checked at launch)"
        )
    return provider, price


def _next_step(
    args: argparse.Namespace, profile: str, host: str, port: int, user: str, key: str | None
) -> None:
    """The ssh config Host block for the machine (written with ``--ssh-config``, else shown),
    then the commands that come next."""
    from ..transport.ssh.hosts import add_host_block, ssh_config_path  # deferred: per command

    alias = args.host or "ALIAS"
    block = f"Host {alias}\n  HostName {host}\n  Port {port}\n  User {user}\n"
    if key:
        block += f"  IdentityFile {key}\n"
    if args.ssh_config:
        if not args.host:
            raise UsageError("--ssh-config writes a Host block: name it with --host ALIAS")
        path = ssh_config_path()
        add_host_block(path, alias, block)
        print(f"wrote Host {alias} into {path}")
    else:
        shown = "    " + block.rstrip("\n").replace("\n", "\n    ")
        print(f"Add to ~/.ssh/config (or rerun with --host NAME --ssh-config):\n{shown}")
    print(
        f"Then check its key with `rgt trust-host {alias}`, and run with "
        f"--profile {profile} --host {alias}"
    )


def _up_guided(args: argparse.Namespace, prof: Any, registry: Any) -> int:
    if not args.connection:
        print(f"{prof.platform or prof.name} has no usable API: create the machine yourself.")
        print(f"  {prof.guided.get('up', '')}")
        example = prof.guided.get("connection_example", "ssh -p PORT user@host")
        print(f"Then record it: rgt up {prof.name} --connection '{example}' --host ALIAS --yes")
        return 0
    if not args.yes:
        raise UsageError("confirm that you created it (and accept what it bills) with --yes")
    argv = shlex.split(args.connection)
    if argv and argv[0] == "ssh":
        argv = argv[1:]
    port, target, key = "22", "", None
    i = 0
    while i < len(argv):
        if argv[i] == "-p" and i + 1 < len(argv):
            port, i = argv[i + 1], i + 2
        elif argv[i] == "-i" and i + 1 < len(argv):
            key, i = argv[i + 1], i + 2
        elif argv[i].startswith("-"):
            i += 2 if argv[i] in ("-l", "-o") else 1
        else:
            target, i = argv[i], i + 1
    match = _SSH_RE.match(target)
    if not match or not port.isdigit():
        raise UsageError(f"--connection {args.connection!r}: expected like 'ssh -p PORT user@host'")
    platform_id = args.id or f"{match['user'] or 'root'}@{match['host']}:{port}"
    registry.add_instance(
        f"{prof.name}:{platform_id}",
        prof.name,
        "",
        platform_id,
        args.host,
        "running (user-reported)",
        prof.cost_per_hour or None,
        {"ssh": args.connection, "guided": True},
    )
    print(f"recorded {prof.name}:{platform_id}; rgt cannot see its meter: `rgt down` guides you")
    _next_step(args, prof.name, match["host"], int(port), match["user"] or "root", key)
    return 0


def _down(args: argparse.Namespace, project: Path) -> int:
    from ..api import JobGroup, find  # deferred: per command
    from ..run.phases import phases_to  # deferred: per command
    from ..run.teardown import compute_gate  # deferred: per command

    found = find(args.job, project)
    # A seed group runs on one machine: the gate of its first member's is the group's.
    job = found.jobs[0] if isinstance(found, JobGroup) else found
    with phases_to(lambda line: print(f"rgt: {line}", file=sys.stderr, flush=True)):
        gate = compute_gate(job._row, project)
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    # The name the user typed for a group is the one to type again.
    name = found.name if isinstance(found, JobGroup) else job.name
    code = _decide_down(args, name, gate, project, say)
    if args.json:
        dump(
            {
                "gate": {
                    **gate.record(),
                    "reasons": gate.reasons(),
                    "survives": gate.survives,
                    "keeps_billing": gate.keeps_billing,
                },
                "said": said,
            }
        )
    return code


def _decide_down(args: argparse.Namespace, name: str, gate: Any, project: Path, say: Any) -> int:
    from ..run.teardown import confirm_guided, decide, settle_orphan, stop_meter  # deferred: run

    if not args.json:
        say(gate.text())
    if args.confirm_stopped:
        confirm_guided(gate, project, typed=args.override)
        say("recorded: you confirmed the meter is stopped (rgt did not observe it)")
        return 0
    if args.refuse:
        decide(gate, "refuse", project)
        say("recorded: the machine is kept")
        return 0
    if args.override is not None:
        record = decide(gate, "override", project, typed=args.override)
    elif args.yes:
        record = decide(gate, "approve", project)
    else:
        if gate.passed:
            say(f"Nothing done. Approve with: rgt down {name} --yes")
        else:
            say(
                f"Nothing done. To stop the meter anyway, type the instance id: "
                f"rgt down {name} --override {gate.machine.platform_id}"
            )
        return 0 if gate.passed else 1
    outcome = stop_meter(gate, record, project, timeout=args.timeout, on_poll=say)
    say(outcome.message)
    interactive = sys.stdin.isatty() and not args.json
    for orphan in outcome.orphans:
        if interactive:
            print(f"Still billing: {orphan.bills}. Delete it? [y/N] ", end="", flush=True)
            answer = sys.stdin.readline().strip().lower()
            settle_orphan(gate, orphan, answer in ("y", "yes"), project)
        else:
            settle_orphan(gate, orphan, False, project)
            say(
                f"Still billing (kept; delete it in the console or rerun interactively): {orphan.bills}"
            )
    return 0


def _instances(project: Path, as_json: bool = False) -> int:
    from ..run.autostop import read_status  # deferred: per command
    from ..run.billing import check_idle, describe  # deferred: per command
    from ..store.registry import Registry  # deferred: per command

    rows = Registry(project).instances()
    auto = read_status(project)
    listed = []
    for inst in rows:
        warning = check_idle(inst, project) if inst["ended_at"] is None else None
        said = auto.get(inst["id"])
        listed.append({**inst, "line": describe(inst), "idle_warning": warning, "autostop": said})
    if as_json:
        dump({"instances": listed})
        return 0
    if not rows:
        print("no machines brought up with `rgt up` in this project")
    for item in listed:
        print(item["line"])
        if item["idle_warning"]:
            print(f"  WARNING: {item['idle_warning']}")
        if item["autostop"]:
            print(f"  autostop: {item['autostop']['action']}: {item['autostop']['reason']}")
    return 0


def _autostop(args: argparse.Namespace, project: Path) -> int:
    from ..run import autostop  # deferred: per command

    if args.action in ("on", "off") and not args.profile:
        raise UsageError(f"`rgt autostop {args.action} PROFILE`: which profile?")
    if args.action == "on":
        approval = autostop.enable(project, args.profile)
        pid = autostop.spawn(project, args.interval)
        print(f"autostop on for {args.profile}: {approval['text']}")
        print(
            f"recorded your standing approval; the watcher runs as process {pid} "
            f"(its log: {project / '.rgt' / 'autostop.log'}); `rgt autostop off "
            f"{args.profile}` withdraws it"
        )
        return 0
    if args.action == "off":
        if autostop.disable(project, args.profile):
            print(f"autostop off for {args.profile}: its machines are stopped only by `rgt down`")
        else:
            print(f"autostop was not on for {args.profile}")
        return 0
    if args.action == "watch":
        try:
            autostop.watch(project, args.interval)
        except UsageError as exc:
            if "held by" not in str(exc):
                raise
            print(f"another autostop watcher runs for this project ({exc})")
        return 0
    said = autostop.read_status(project)
    if args.json:
        dump({"autostop": said})
        return 0
    if not said:
        print("the autostop watcher has not looked at any machine yet")
    for instance_id, item in said.items():
        print(f"{instance_id}: {item['action']}: {item['reason']}")
    return 0
