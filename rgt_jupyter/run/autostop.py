"""Autostop: a rented machine's meter stopped once its work is safe, without the user at the
keyboard, by a small process that outlives the kernel (``rgt autostop on PROFILE`` starts it).

A profile opts in with ``autostop = "after-verified-pull"``; ``rgt autostop on`` records the
user's standing approval (who, when, what it allows) and starts the watcher. Each pass
(:func:`tick`), for every live machine of an approved profile whose jobs have all ended (as
observed on the machine: a job that cannot be observed is never taken for ended), each ended
job not yet pulled is pulled and verified, the teardown gate is computed from the artifacts, and
only a passing gate is approved (``by`` names the standing approval) and carried out by the one
place a meter-stop verb is called (:func:`~rgt_jupyter.run.teardown.stop_meter`). A gate that
fails keeps the machine and says why in ``.rgt/autostop.json`` (shown by ``rgt instances`` and
``rgt autostop status``); it is not tried again until the machine's jobs change.

Time is read and waited through a :class:`Clock`, so the time a machine billed idle after its
last job ended (``billed_idle_s`` of each stop) can be measured on a clock a test drives.
"""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..backends import get_backend
from ..errors import RgtError, TransportError, UsageError
from ..jobs.spec import JobSpec
from ..machines.profiles import load_profile
from ..store.fsutil import atomic_write_bytes
from ..store.locks import held, lock_path
from ..store.registry import Registry
from ..transport import get_transport
from .pull import pull
from .teardown import compute_gate, decide, settle_orphan, stop_meter


class Clock:
    """The time as the watcher reads it: ``now()``, ``sleep(s)``, and ``at(ts)``: a time
    stamp of the machines' clock (a job's end) on this clock. Here, the system's."""

    def now(self) -> float:
        """The time now."""
        return time.time()

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        time.sleep(seconds)

    def at(self, stamp: float) -> float:
        """``stamp`` (system time) on this clock."""
        return stamp


MODE = "after-verified-pull"
#: The acknowledgement kind that holds a profile's standing approval.
APPROVAL = "autostop"
#: Seconds between passes of the watcher.
INTERVAL_S = 60.0


def status_path(project: Path) -> Path:
    """Where the watcher says what it did and why (one entry per machine)."""
    return project / ".rgt" / "autostop.json"


def read_status(project: Path) -> dict[str, Any]:
    """The watcher's last word on each machine (``{instance_id: {...}}``)."""
    try:
        data = json.loads(status_path(project).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def enable(project: Path, profile_name: str) -> dict[str, Any]:
    """Record the standing approval for ``profile_name`` (its profile must opt in)."""
    profile = load_profile(profile_name, project)
    if profile.autostop != MODE:
        raise UsageError(
            f"profile {profile.name!r} does not opt in to autostop: add "
            f'autostop = "{MODE}" to it (its machines are then stopped only after every job '
            "on them was pulled and verified and the teardown gate passed), then run this again"
        )
    text = (
        f"stop the meter ({profile.meter_stop.verb}) of {profile.name} machines once every job "
        "on them ended, was pulled and verified, and the teardown gate passed"
    )
    registry = Registry(project)
    registry.ack(profile.name, APPROVAL, by=getpass.getuser(), how="rgt autostop on", text=text)
    return registry.acked(profile.name, APPROVAL) or {}


def disable(project: Path, profile_name: str) -> bool:
    """Withdraw the standing approval; False when there was none."""
    return Registry(project).unack(profile_name, APPROVAL)


def tick(
    project: Path, clock: Clock | None = None, seen: dict[str, Any] | None = None
) -> dict[str, dict[str, Any]]:
    """One pass over the live machines; returns (and writes) what was done for each.
    ``seen`` carries, between passes, the jobs a kept machine was judged on."""
    clock = clock or Clock()
    registry = Registry(project)
    memo = seen if seen is not None else {}
    status = read_status(project)
    for inst in registry.instances(live_only=True):
        try:
            profile = load_profile(inst["profile"], project)
        except RgtError as exc:
            status[inst["id"]] = _said("error", f"its profile cannot be read: {exc}", clock)
            continue
        approval = registry.acked(profile.name, APPROVAL)
        if profile.autostop != MODE or approval is None:
            continue
        rows = _jobs_on(registry, inst["id"])
        if not rows:
            status[inst["id"]] = _said("waiting", "no job has run on it yet", clock)
            continue
        key = sorted(r["id"] for r in rows)
        if memo.get(inst["id"]) == key:
            continue  # kept on these very jobs: judged again only once they change
        outcome = _settle(project, registry, inst, rows, approval, clock)
        if outcome["action"] == "kept":
            memo[inst["id"]] = key
        status[inst["id"]] = outcome
    atomic_write_bytes(status_path(project), json.dumps(status, indent=1).encode())
    return status


def _said(action: str, reason: str, clock: Clock, **more: Any) -> dict[str, Any]:
    return {"action": action, "reason": reason, "at": clock.now(), **more}


def _jobs_on(registry: Registry, instance_id: str) -> list[dict[str, Any]]:
    """The latest attempt of each lineage launched on the machine."""
    latest: dict[str, dict[str, Any]] = {}
    for row in registry.jobs():
        if JobSpec.from_row(row).instance_id == instance_id:
            latest[row["lineage"]] = row
    return list(latest.values())


def _settle(
    project: Path,
    registry: Registry,
    inst: dict[str, Any],
    rows: list[dict[str, Any]],
    approval: dict[str, Any],
    clock: Clock,
) -> dict[str, Any]:
    """Observe, pull, gate and (gate passing) stop one machine."""
    ended: list[float] = []
    for row in rows:
        spec = JobSpec.from_row(row)
        try:
            transport = get_transport(spec.transport, spec.host_alias, project)
            snap = get_backend(spec.launcher).observe(transport, spec, log_lines=0)
        except TransportError as exc:
            return _said("unobservable", f"{spec.name} cannot be observed ({exc})", clock)
        if not snap.terminal:
            return _said("waiting", f"{spec.name} is {snap.state}", clock)
        registry.set_state(spec.job_id, snap.state, exit_code=snap.exit_code)
        ended.append(clock.at(snap.ended_at or snap.observed_at))
    for row in rows:
        spec = JobSpec.from_row(row)
        if any(r["verified"] for r in registry.runs(spec.job_id)):
            continue
        try:
            pull(spec, project)
        except RgtError as exc:
            return _kept(registry, rows, f"the pull of {spec.name} failed: {exc}", clock)
        if not any(r["verified"] for r in registry.runs(spec.job_id)):
            return _kept(registry, rows, f"the pull of {spec.name} did not verify", clock)
    gate = compute_gate(rows[-1], project)
    if not gate.passed:
        return _kept(registry, rows, "the teardown gate fails: " + "; ".join(gate.reasons()), clock)
    by = f"autostop, standing approval by {approval.get('by', '?')} at {approval['at']:.0f}"
    try:
        record = decide(gate, "approve", project, by=by)
        outcome = stop_meter(gate, record, project)
    except RgtError as exc:
        return _kept(registry, rows, f"the meter could not be stopped: {exc}", clock)
    idle = max(0.0, clock.now() - max(ended))
    for orphan in outcome.orphans:  # deleting what bills on is the user's call, never made here
        settle_orphan(gate, orphan, False, project)
    billing = [orphan.bills for orphan in outcome.orphans]
    return _said("stopped", outcome.message, clock, billed_idle_s=idle, still_billing=billing)


def _kept(
    registry: Registry, rows: list[dict[str, Any]], reason: str, clock: Clock
) -> dict[str, Any]:
    """Keep the machine, and tell each of its jobs why."""
    for row in rows:
        registry.event(row["id"], "autostop_kept", reason=reason)
    return _said("kept", f"the machine is kept: {reason}", clock)


def live_approved(project: Path) -> list[str]:
    """The live machines an approved autostop watches."""
    registry = Registry(project)
    out = []
    for inst in registry.instances(live_only=True):
        try:
            profile = load_profile(inst["profile"], project)
        except RgtError:
            continue
        if profile.autostop == MODE and registry.acked(profile.name, APPROVAL):
            out.append(inst["id"])
    return out


def watch(project: Path, interval_s: float = INTERVAL_S, clock: Clock | None = None) -> None:
    """Pass after pass until no live machine is left to watch; one watcher per project."""
    clock = clock or Clock()
    with held(lock_path(project, "autostop", "watcher"), "the autostop watcher", wait_s=0.5):
        seen: dict[str, Any] = {}
        while True:
            tick(project, clock, seen)
            if not [i for i in live_approved(project) if i not in seen]:
                return
            clock.sleep(interval_s)


def spawn(project: Path, interval_s: float = INTERVAL_S) -> int:
    """Start the watcher as a detached process (its own session: it outlives the kernel and
    the terminal); return its pid. Its output goes to ``.rgt/autostop.log``."""
    log = project / ".rgt" / "autostop.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "rgt_jupyter", "--project", str(project), "autostop", "watch"]
    argv += ["--interval", str(interval_s)]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            cwd=project,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    return proc.pid
