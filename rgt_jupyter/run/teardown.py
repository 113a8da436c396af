"""The teardown gate: the only path from a user's decision to a call that stops a meter.

The gate is computed fresh, from artifacts, every time it is shown or acted on; never from logs or
from what a remote claims. For every job of the machine (the latest attempt of each lineage):

1. no job of the machine is still queued or running (from its process and ``exit.json``);
2. every file the job left (listed and hashed now, where it lives) was pulled;
3. every hash matches: the fresh remote hash, the pulled run's manifest, and the pulled bytes
   (re-hashed now, where size, mtime, ctime or inode changed since they were hashed);
4. every pulled checkpoint loads (``weights_only=True`` and an allowlist of plain data types,
   separate time-limited process); one pickled with a class outside it is not loaded: it passes
   verified by sha256 only, said with the gate and kept in every decision (``disclosed``);
5. the code deployed on the machine is the code intended (re-hashed there now);
6. no checkpoint appeared after the pull was verified.

Approving needs all of them, and the approval is refused when, since the gate was computed, a
file appeared or changed on the machine beyond the runs it covered (:func:`drift`: one listing
per job, so a checkpoint written after the verification is never destroyed by an approval of
the gate shown before it). Overriding a failing gate needs the instance id typed. Every
decision (approve, override, refuse) is appended to the registry and to the ``run.json`` of every
run it covers. :func:`stop_meter` is the one function that calls a platform's meter-stop verb,
and it only runs with an approve or override record of a gate of the same machine.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backends import observe
from ..errors import RgtError, UsageError
from ..jobs.spec import JobSpec
from ..machines.profiles import Profile, load_profile
from ..machines.providers import ProviderTimeout, api_base_url, get_provider
from ..store.fsutil import atomic_write_bytes
from ..store.hashcache import HashCache
from ..store.registry import Registry
from ..transport import Transport, get_transport
from .bucket_copy import bucket_copies
from .phases import phase
from .pull import remote_listing
from .pull.formats import PASSING, PICKLED_LINE, disclosures, to_check, verdict
from .pull.loader import load_checkpoints, warm_loader
from .secrets import drop_leftover_secrets

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..machines.providers import Instance, Orphan, Provider

CHECKS = (
    "no job running",
    "every file pulled",
    "every hash matches",
    "every checkpoint loads",
    "deployed == intended",
    "no newer checkpoint",
)
#: An approval acts on a gate at most this old; an older one is computed again first.
GATE_MAX_AGE_S = 60.0


@dataclass(frozen=True)
class Check:
    """One line of the checklist."""

    name: str
    ok: bool
    detail: str
    job_id: str = ""
    #: Lines the user approves with, shown and recorded (files verified by sha256 only).
    disclosed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Machine:
    """The machine whose meter a teardown stops."""

    id: str
    profile: Profile
    platform_id: str
    host: str
    host_alias: str
    provider: str
    cost_per_hour: float | None = None
    created_at: float | None = None

    def label(self) -> str:
        """The machine as named mid-sentence: ``RunPod pod-7 (gpu1)``, ``this machine (vm)``."""
        where = self.host_alias or self.host
        name = self.profile.platform or self.profile.name
        if self.platform_id == where:
            return f"{name} ({where})"
        return f"{name} {self.platform_id} ({where})"


@dataclass
class Gate:
    """The checklist of one machine, as computed at ``computed_at``."""

    machine: Machine
    jobs: list[str]
    runs: dict[str, str]
    checks: list[Check]
    computed_at: float
    destroys: list[str] = field(default_factory=list)
    survives: list[str] = field(default_factory=list)
    keeps_billing: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when every check holds (and there was something to check)."""
        return bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def disclosed(self) -> list[str]:
        """What an approval of this gate accepts as it is: each file verified by sha256 only."""
        return [line for c in self.checks for line in c.disclosed]

    def reasons(self) -> list[str]:
        """Why the gate fails, one line per failing check."""
        return [f"{c.name}: {c.detail}" for c in self.checks if not c.ok]

    def record(self) -> dict[str, Any]:
        """The JSON form kept with every decision."""
        return {
            "machine": self.machine.id,
            "platform_id": self.machine.platform_id,
            "profile": self.machine.profile.name,
            "jobs": self.jobs,
            "runs": self.runs,
            "passed": self.passed,
            "checks": [asdict(c) for c in self.checks],
            "computed_at": self.computed_at,
            "verb": self.machine.profile.meter_stop.verb,
            "destroys": self.destroys,
            "disclosed": self.disclosed,
        }

    def text(self) -> str:
        """The checklist in plain text."""
        ms = self.machine.profile.meter_stop
        lines = [f"Teardown of {self.machine.label()}: {'PASSES' if self.passed else 'REFUSED'}"]
        for c in self.checks:
            lines.append(f"  [{'x' if c.ok else ' '}] {c.name}: {c.detail}")
            lines += [f"      disclosed: {line}" for line in c.disclosed]
        if not self.checks:
            lines.append("  (no job of this project ran on this machine)")
        lines.append(f"Meter-stop verb: {ms.verb}" + (" (irreversible)" if ms.irreversible else ""))
        if self.destroys:
            lines.append("  destroys: " + "; ".join(self.destroys))
        if self.survives:
            lines.append("  keeps: " + "; ".join(self.survives))
        for item in self.keeps_billing:
            lines.append(f"  still bills: {item}")
        return "\n".join(lines)


# -- which machine, which jobs ------------------------------------------------------------


def machine_of(row: dict[str, Any], project: Path) -> Machine:
    """The machine a job ran on: the instance ``rgt up`` recorded, else its profile and host."""
    spec = JobSpec.from_row(row)
    profile = load_profile(spec.profile, project)
    registry = Registry(project)
    inst = registry.instance(spec.instance_id) if spec.instance_id else None
    if inst is not None:
        return Machine(
            id=inst["id"],
            profile=profile,
            platform_id=inst["platform_id"],
            host=spec.host,
            host_alias=spec.host_alias or "",
            provider=inst["provider"],
            cost_per_hour=inst["cost_per_hour"],
            created_at=inst["created_at"],
        )
    return Machine(
        id=f"{profile.name}:{spec.host}",
        profile=profile,
        platform_id=spec.host,
        host=spec.host,
        host_alias=spec.host_alias or "",
        provider="",
    )


def jobs_of(machine: Machine, project: Path) -> list[dict[str, Any]]:
    """The latest attempt of every lineage that ran on the machine."""
    latest: dict[str, dict[str, Any]] = {}
    for row in Registry(project).jobs():
        spec = JobSpec.from_row(row)
        same = spec.instance_id == machine.id or (
            row["profile"] == machine.profile.name and spec.host == machine.host
        )
        if same:
            latest[row["lineage"]] = row  # rows come oldest first
    return list(latest.values())


# -- the checks ---------------------------------------------------------------------------


def _job_checks(
    row: dict[str, Any],
    transport: Transport,
    project: Path,
    runs: dict[str, str],
    metered: bool = True,
) -> list[Check]:

    spec, jid = JobSpec.from_row(row), row["id"]
    out: list[Check] = []
    snap = observe(transport, spec, log_lines=0)
    drop_leftover_secrets(transport, spec, snap, Registry(project))
    running = not snap.terminal
    out.append(
        Check(
            CHECKS[0],
            not running,
            f"{jid} is {snap.state}" + (": wait for it or stop it" if running else ""),
            jid,
        )
    )
    if running:
        return out
    if not metered:
        out.append(
            Check(
                CHECKS[1],
                True,
                f"{jid}'s files stay where they were written: this machine is not metered and "
                "its meter-stop verb destroys nothing",
                jid,
            )
        )
        return out
    listing = remote_listing(transport, spec)["files"]
    pulled_runs = Registry(project).runs(jid)
    if not pulled_runs:
        if not listing:
            out.append(Check(CHECKS[1], True, f"{jid} left no files: nothing to lose", jid))
            return out
        out.append(Check(CHECKS[1], False, f"{jid} was never pulled: `rgt pull {jid}` first", jid))
        return out
    run_dir = Path(pulled_runs[-1]["path"])
    runs[jid] = str(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    verification = json.loads((run_dir / "verification.json").read_text())
    verified_at = float(verification["checked_at"])
    pulled = {e["path"]: e for e in manifest["files"]}

    missing, newer, differ = [], [], []
    for rel, entry in sorted(listing.items()):
        stat = entry.get("stat")
        if rel not in pulled:
            written = stat[1] / 1e9 if stat else time.time()
            if rel.startswith("checkpoints/") and written > verified_at:
                newer.append(f"{rel} (written {time.ctime(written)})")
            else:
                missing.append(rel)
        elif pulled[rel]["sha256"] != entry["sha256"]:
            differ.append(f"{rel}: {entry['sha256'][:12]} there, {pulled[rel]['sha256'][:12]} here")
    local_bad = []
    with HashCache() as cache:  # re-hashed only where size, mtime, ctime or inode changed
        for rel, entry in sorted(pulled.items()):
            path = run_dir / rel
            if not path.is_file():
                local_bad.append(f"{rel}: the pulled copy is gone")
            elif cache.sha256(path) != entry["sha256"]:
                local_bad.append(f"{rel}: the pulled copy changed since the pull")
    n = len(listing)
    out.append(
        Check(
            CHECKS[1],
            not missing,
            f"not pulled: {', '.join(missing[:5])}"
            if missing
            else f"{n - len(newer)} files of {jid} pulled",
            jid,
        )
    )
    bad = differ + local_bad + [f"{m['path']}: {m['reason']}" for m in manifest["unverified"]]
    out.append(
        Check(
            CHECKS[2],
            not bad,
            "; ".join(bad[:5]) if bad else f"sha256 of {len(pulled)} pulled files re-checked",
            jid,
        )
    )
    ckpts = [run_dir / rel for rel in to_check(pulled) if (run_dir / rel).is_file()]
    loads = load_checkpoints(ckpts)
    report = [{**v, "path": str(Path(k).relative_to(run_dir))} for k, v in sorted(loads.items())]
    failed = [
        f"{r['path']}: {r.get('why') or r['detail']}" for r in report if verdict(r) not in PASSING
    ]
    shown = disclosures(report)
    loaded = f"{sum(verdict(r) == 'loaded' for r in report)} checkpoint(s) loaded just now"
    pickled = f", {len(shown)} {PICKLED_LINE} (disclosed below)" if shown else ""
    out.append(
        Check(CHECKS[3], not failed, "; ".join(failed[:3]) or loaded + pickled, jid, tuple(shown))
    )
    out.append(_deployed_check(row, transport))
    out.append(
        Check(
            CHECKS[5],
            not newer,
            f"after the pull was verified: {', '.join(newer[:3])}: pull again"
            if newer
            else "none since the pull was verified",
            jid,
        )
    )
    return out


def _deployed_check(row: dict[str, Any], transport: Transport) -> Check:
    spec, jid = JobSpec.from_row(row), row["id"]
    argv = [
        spec.python,
        f"{spec.control_dir}/agent.py",
        "manifest",
        f"code={spec.code_dir}",
        f"inputs={spec.inputs_dir}",
        f"lib={spec.lib_dir}",
    ]
    there = json.loads(transport.exec(argv, timeout=3600).check().stdout)["files"]
    wrong = [
        rel for rel, sha in sorted(spec.deployed.items()) if there.get(rel, {}).get("sha256") != sha
    ]
    return Check(
        CHECKS[4],
        not wrong,
        f"differs from what was launched: {', '.join(wrong[:5])}"
        if wrong
        else f"{len(spec.deployed)} deployed files re-hashed on the machine",
        jid,
    )


def compute_gate(row: dict[str, Any], project: Path) -> Gate:
    """The gate of the machine ``row``'s job ran on, computed now from artifacts."""
    machine = machine_of(row, project)
    runs: dict[str, str] = {}
    checks: list[Check] = []
    # A machine without a meter (this one, a workstation) stops nothing: its gate is about the
    # job asked for (every member, for a seed group's), not every job that ever ran there.
    jobs = jobs_of(machine, project)
    if not machine.profile.metered:
        group = (JobSpec.from_row(row).group or {}).get("id")
        jobs = [
            j
            for j in jobs
            if j["lineage"] == row["lineage"]
            or (group and (JobSpec.from_row(j).group or {}).get("id") == group)
        ] or [row]
    transports: dict[tuple[str, str], Transport] = {}
    checking = phase(f"checking {len(jobs)} job(s) on {machine.label()} for the teardown gate")
    with checking, warm_loader():  # one checkpoint loader (one torch import) for every job
        for job in jobs:
            spec = JobSpec.from_row(job)
            key = (spec.transport, spec.host_alias or "")
            try:
                if key not in transports:
                    transports[key] = get_transport(spec.transport, spec.host_alias, project)
                checks += _job_checks(
                    job, transports[key], project, runs, metered=machine.profile.metered
                )
            except RgtError as exc:
                checks.append(Check("machine reachable", False, f"{job['id']}: {exc}", job["id"]))
    ms = machine.profile.meter_stop
    destroys: list[str] = []
    survives: list[str] = []
    for tier in machine.profile.tiers_in_effect():  # ``~``: the home dir there, for the user
        text = f"{tier.label} ({machine.profile.expand(tier.path, project, '~')})"
        (survives if tier.survives(ms.effect) else destroys).append(text)
    survives += bucket_copies(jobs, transports)  # what the bucket holds outlives the machine
    return Gate(
        machine=machine,
        jobs=[j["id"] for j in jobs],
        runs=runs,
        checks=checks,
        computed_at=time.time(),
        destroys=destroys,
        survives=survives,
        keeps_billing=list(ms.keeps_billing),
    )


def drift(gate: Gate, project: Path) -> dict[str, list[str]]:
    """What no longer holds of a passing ``gate``: each file that appeared or changed on the
    machine beyond the run the gate covered for its job (by the name of the job to pull again),
    and under ``""`` a job pulled since, jobs that came since, a machine that cannot be listed.
    Cheap enough to run before every approval: one agent listing per job (end-of-job hashes
    are reused for files untouched since), no checkpoint load."""

    jobs = jobs_of(gate.machine, project)
    if sorted(j["id"] for j in jobs) != sorted(gate.jobs):
        new = sorted({j["id"] for j in jobs} - set(gate.jobs))
        came = f": {', '.join(new)} came" if new else ""
        return {"": [f"the machine's jobs changed since the gate was computed{came}"]}
    if not gate.machine.profile.metered:
        return {}  # the gate does not cover files here: its meter-stop verb destroys nothing
    registry = Registry(project)
    out: dict[str, list[str]] = {}
    transports: dict[tuple[str, str], Transport] = {}
    for job in jobs:
        spec, jid, name = JobSpec.from_row(job), job["id"], job["name"]
        runs = registry.runs(jid)
        covered = gate.runs.get(jid)
        if covered is not None and (not runs or runs[-1]["path"] != covered):
            out.setdefault("", []).append(f"{name} was pulled again since the gate was computed")
            continue
        key = (spec.transport, spec.host_alias or "")
        try:
            if key not in transports:
                transports[key] = get_transport(spec.transport, spec.host_alias, project)
            listing = remote_listing(transports[key], spec)["files"]
        except RgtError as exc:
            out.setdefault("", []).append(f"the machine could not be listed for {name} ({exc})")
            continue
        pulled: dict[str, Any] = {}
        if covered is not None:
            manifest = json.loads((Path(covered) / "manifest.json").read_text())
            pulled = {e["path"]: e["sha256"] for e in manifest["files"]}
        since = f"after the pull of {name} was verified" if covered else f"({name} had left none)"
        for rel, entry in sorted(listing.items()):
            if rel not in pulled:
                out.setdefault(name, []).append(f"{rel} appeared on the machine {since}")
            elif pulled[rel] != entry["sha256"]:
                out.setdefault(name, []).append(f"{rel} of {name} changed since it was pulled")
    return out


# -- decisions ----------------------------------------------------------------------------


def _append_to_runs(gate: Gate, record: dict[str, Any]) -> None:
    """Add the decision to the ``teardown`` list of every covered run's ``run.json``."""
    for run_dir in gate.runs.values():
        path = Path(run_dir) / "run.json"
        data = json.loads(path.read_text())
        data.setdefault("teardown", []).append(record)
        atomic_write_bytes(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


def decide(
    gate: Gate, decision: str, project: Path, typed: str = "", by: str = "cli"
) -> dict[str, Any]:
    """Record ``approve`` (the gate must pass), ``override`` (``typed`` must be the instance
    id) or ``refuse``; returns the record written to the registry and ``run.json``."""
    if decision not in ("approve", "override", "refuse"):
        raise UsageError(f"unknown decision {decision!r}")
    if decision == "approve" and not gate.passed:
        raise UsageError(
            "the gate refuses teardown:\n  "
            + "\n  ".join(gate.reasons())
            + f"\nFix these, or override by typing the instance id ({gate.machine.platform_id})"
        )
    if decision == "approve":
        changed = drift(gate, project)
        if changed:
            said = [line for lines in changed.values() for line in lines]
            pulls = ", ".join(f"`rgt pull {name}`" for name in sorted(changed) if name)
            raise UsageError(
                "the gate no longer holds: "
                + "; ".join(said[:6])
                + (f" ({len(said) - 6} more)" if len(said) > 6 else "")
                + (f". Pull again ({pulls}), then" if pulls else ". Then")
                + " decide on the gate computed anew."
            )
    if decision == "override" and typed.strip() != gate.machine.platform_id:
        raise UsageError(
            f"to override a failing gate, type the instance id exactly: {gate.machine.platform_id}"
        )
    registry = Registry(project)
    record = registry.decide(
        gate.machine.id,
        decision,
        by=by,
        verb=gate.machine.profile.meter_stop.verb,
        gate=gate.record(),
    )
    _append_to_runs(gate, record)
    for jid in gate.jobs:
        registry.event(jid, f"teardown_{decision}", machine=gate.machine.id, by=by)
    return record


@dataclass
class Outcome:
    """What happened after an approved decision."""

    machine: str
    guided: bool
    confirmed_down: bool
    final_state: str
    message: str
    orphans: list[Orphan] = field(default_factory=list)


def provider_for(profile: Profile) -> Provider:
    """The platform API client of a profile, with the key read from the env var or file the
    profile names (never stored)."""

    key = os.environ.get(profile.api_key_env, "") if profile.api_key_env else ""
    if not key and profile.api_key_file:
        path = Path(os.path.expanduser(profile.api_key_file))
        key = path.read_text().strip() if path.is_file() else ""
    if not key:
        where = profile.api_key_env or profile.api_key_file
        raise UsageError(
            f"no API key for {profile.platform or profile.name}: set {where} (the profile names "
            "it; the key itself is never stored)"
        )
    return get_provider(profile.provider, key, api_base_url(profile.provider, profile.api_url))


def stop_meter(
    gate: Gate,
    record: dict[str, Any],
    project: Path,
    timeout: float = 600.0,
    interval: float = 5.0,
    on_poll: Callable[[str], None] | None = None,
) -> Outcome:
    """Carry out an approved decision: the one place a meter-stop verb is called.

    Guided platforms: nothing is called; the exact console action is returned and the meter is
    not claimed stopped until the user confirms (:func:`confirm_guided`). API platforms: the verb
    is called (bounded by the client timeout), then the platform is polled until it confirms,
    then what still bills is listed.
    """
    registry = Registry(project)
    machine = gate.machine
    if (
        record.get("decision") not in ("approve", "override")
        or record.get("instance_id") != machine.id
    ):
        raise UsageError("stopping a meter needs an approve or override decision for this machine")
    if record.get("gate", {}).get("computed_at") != gate.computed_at:
        raise UsageError("the decision was made on another computation of the gate")
    ms = machine.profile.meter_stop
    if not machine.profile.metered:
        registry.decide(machine.id, "no_meter", verb=ms.verb)
        return Outcome(
            machine=machine.id,
            guided=False,
            confirmed_down=True,
            final_state="unchanged (nothing to stop)",
            message=(ms.console or "Nothing to stop: this machine is not metered.")
            + " (The decision is recorded.)",
        )
    if not machine.provider:
        registry.decide(machine.id, "guided_action_shown", console=ms.console, verb=ms.verb)
        return Outcome(
            machine=machine.id,
            guided=True,
            confirmed_down=False,
            final_state="running (rgt cannot see this platform's meter)",
            message=(
                f"Now stop the meter yourself: {ms.console or ms.verb}\n"
                "rgt cannot reach this platform and does not claim the meter stopped. Once you "
                f"did it, confirm with `rgt down {_job_ref(gate)} --confirm-stopped` (or the "
                "button)."
            ),
        )

    provider = provider_for(machine.profile)
    try:
        provider.down(machine.platform_id)
        registry.decide(machine.id, "verb_called", verb=ms.verb)
    except ProviderTimeout as exc:
        registry.decide(machine.id, "verb_timed_out", verb=ms.verb, error=str(exc))
        if on_poll:
            on_poll(f"{ms.verb} did not answer in time; polling the platform")

    def poll(inst: Instance) -> None:
        if on_poll:
            on_poll(f"{inst.id}: {inst.raw_state}")

    final = provider.wait_down(
        machine.platform_id, timeout=timeout, interval=interval, on_poll=poll
    )
    registry.set_instance_state(machine.id, final.state, ended=True)
    registry.decide(machine.id, "confirmed_down", state=final.state, raw_state=final.raw_state)
    orphans = provider.orphans()
    registry.decide(machine.id, "orphans_listed", orphans=[asdict(o) for o in orphans])
    return Outcome(
        machine=machine.id,
        guided=False,
        confirmed_down=True,
        final_state=final.state,
        message=f"{machine.label()}: {ms.verb} confirmed by the platform ({final.raw_state})",
        orphans=orphans,
    )


def _job_ref(gate: Gate) -> str:
    """A job of the gate's machine, to name in a command the user is told to type."""
    return gate.jobs[-1] if gate.jobs else "JOB"


def confirm_guided(
    gate: Gate, project: Path, by: str = "cli", typed: str | None = None
) -> dict[str, Any]:
    """Record the user's word that they did the console action (only after an approval). While
    the gate fails (work not yet safe), the machine's instance id must be typed, as for an
    override: a confirmation is no way around the gate."""
    if not gate.passed and typed != gate.machine.platform_id:
        raise UsageError(
            f"the gate of {gate.machine.platform_id} fails, so nothing was recorded: "
            + "; ".join(c.detail for c in gate.checks if not c.ok)[:600]
            + ". To record the meter as stopped anyway, type the instance id: "
            f"--confirm-stopped --override {gate.machine.platform_id}"
        )
    registry = Registry(project)
    approved = [
        d for d in registry.decisions(gate.machine.id) if d["decision"] in ("approve", "override")
    ]
    if not approved:
        raise UsageError(
            f"nothing to confirm: approve the teardown first (`rgt down {_job_ref(gate)} --yes`)"
        )
    registry.set_instance_state(gate.machine.id, "stopped by the user", ended=True)
    return registry.decide(
        gate.machine.id,
        "user_confirmed_meter_stop",
        by=by,
        verb=gate.machine.profile.meter_stop.verb,
        note="the user's confirmation; rgt did not observe the platform's meter",
    )


def settle_orphan(
    gate: Gate, orphan: Orphan, delete: bool, project: Path, by: str = "cli"
) -> dict[str, Any]:
    """The user's answer for one thing that still bills: delete it (through the API) or keep it."""
    registry = Registry(project)
    if not delete:
        return registry.decide(gate.machine.id, "orphan_kept", orphan=asdict(orphan), by=by)
    record = registry.decide(gate.machine.id, "orphan_delete", orphan=asdict(orphan), by=by)
    provider_for(gate.machine.profile).delete_orphan(orphan)
    return record
