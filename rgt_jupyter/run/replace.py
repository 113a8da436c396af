"""A job continued on a new machine when its rented one is gone (``rgt resume JOB
--new-machine``): the platform must say the instance no longer exists (a machine that merely
does not answer is never replaced: observation failures are not preemptions); the replacement is
created from the same create request through the same adapter, its SSH Host block written and
its host key trusted with the user's consent; the job's code is sent again from the copy kept
at its launch and the job relaunched with ``RGT_RESUME=1``, ``load_latest()`` restoring the
newest complete checkpoint from the bucket.

A replacement that does not boot in time is kept (it is recorded, and may bill) and said so; a
second ``--new-machine`` waits for that one instead of creating another.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import LaunchError, RgtError, SSHError, UsageError
from ..jobs.spec import JobSpec
from ..machines.profiles import Profile, load_profile
from ..machines.providers import Instance, Provider, ProviderError
from ..store.registry import Registry
from ..transport.ssh.hosts import add_host_block, resolve, ssh_config_path
from ..transport.ssh.trust import trust_host
from .launch import launch
from .phases import phase
from .relaunch import relaunch_request
from .teardown import provider_for

log = logging.getLogger(__name__)

#: How an SSH connection fails while the machine's sshd is not up yet.
_NOT_UP_YET = ("connection_refused", "timeout", "transport_unavailable")

#: ``confirm(message) -> bool``: whether the user trusts the host key ``message`` shows.
Confirm = Callable[[str], bool]


@dataclass
class Replacement:
    """The machine a job continues on: its registry id, platform id and SSH alias."""

    instance_id: str
    platform_id: str
    alias: str


def resume_on_new_machine(
    spec: JobSpec,
    project: Path,
    confirm: Confirm,
    alias: str | None = None,
    boot_timeout_s: float = 600.0,
    interval_s: float = 5.0,
    pinned: str | None = None,
) -> dict[str, Any]:
    """Continue ``spec``'s job on a replacement for its machine, which the platform reports
    gone; return the new job's registry row. ``confirm`` decides on the new host's key, or
    ``pinned`` (the key the machine's image carries) does, without asking."""
    registry = Registry(project)
    old = _machine_of(registry, spec)
    profile = load_profile(old["profile"], project)
    provider = provider_for(profile)
    if not spec.bucket:
        raise UsageError(
            f"job {spec.name}'s checkpoints were on its machine's own disks ({spec.ckpt_dir}): "
            "a new machine would start it from zero. Give its profile a [bucket] (or launch "
            "with --bucket s3://...) so checkpoints outlive the machine; `rgt run` starts it anew"
        )
    if old["ended_at"] is None:
        gone = _confirm_gone(provider, old)
        registry.set_instance_state(old["id"], f"gone ({gone.raw_state})", ended=True)
        registry.event(spec.job_id, "machine_gone", instance=old["id"], seen=gone.raw_state)
    registry.set_state(spec.job_id, "lost", reason=f"its machine {old['id']} is gone")
    new = _replacement(registry, provider, old, spec, alias)
    inst = _wait_booted(registry, provider, new, boot_timeout_s, interval_s)
    _host_block(new.alias, spec.host_alias, inst)
    _trust(new.alias, project, confirm, boot_timeout_s, interval_s, pinned)
    req = relaunch_request(spec, host=new.alias, resend_code=True)
    with phase(f"relaunching {spec.name} on {new.alias} from its newest checkpoint in the bucket"):
        return launch(req, project)


def _machine_of(registry: Registry, spec: JobSpec) -> dict[str, Any]:
    """The machine (brought up by ``rgt up``) the job ran on; refused without one."""
    row = registry.instance(spec.instance_id) if spec.instance_id else None
    if row is None or not row["provider"]:
        raise UsageError(
            f"job {spec.name} did not run on a machine `rgt up` created through a platform's "
            "API, so no replacement can be created for it: bring one up, then `rgt resume "
            f"{spec.name} --host ALIAS`"
        )
    return row


def _confirm_gone(provider: Provider, old: dict[str, Any]) -> Instance:
    """The platform's word that the machine no longer exists; refused on any other answer."""
    try:
        seen = provider.status(old["platform_id"])
    except ProviderError as exc:
        raise UsageError(
            f"could not ask {provider.name} about {old['id']} ({exc}). A machine that cannot "
            "be observed is not a lost one: nothing was created or relaunched. Try again once "
            "the platform answers."
        ) from exc
    if seen.state != "gone":
        raise UsageError(
            f"{provider.name} says {old['id']} is {seen.state} ({seen.raw_state}), not gone: the "
            "job is not moved to another machine. Once it answers, `rgt resume` continues it "
            "there; `rgt down` stops it behind the teardown gate."
        )
    return seen


def _replacement(
    registry: Registry,
    provider: Provider,
    old: dict[str, Any],
    spec: JobSpec,
    alias: str | None,
) -> Replacement:
    """The replacement created earlier for ``old`` and still live, else a new one from the
    same create request."""
    for row in registry.instances(live_only=True):
        if row["data"].get("replaces") == old["id"]:
            return Replacement(row["id"], row["platform_id"], row["host_alias"])
    params = old["data"].get("params")
    if not isinstance(params, dict):
        raise UsageError(f"{old['id']} has no recorded create request to make a replacement from")
    name = alias or _free_alias(spec.host_alias or spec.name)
    with phase(f"creating a replacement for {old['id']} on {provider.name} (same plan)"):
        inst = provider.up(params)
    instance_id = f"{inst.provider}:{inst.id}"
    registry.add_instance(
        instance_id,
        old["profile"],
        inst.provider,
        inst.id,
        name,
        inst.state,
        inst.cost_per_hour or old["cost_per_hour"],
        {
            "params": params,
            "replaces": old["id"],
            "for_job": spec.name,
            "budget_usd": old["data"].get("budget_usd"),
        },
    )
    return Replacement(instance_id, inst.id, name)


def _free_alias(base: str) -> str:
    """``base-2`` (or the next number) that no Host line of the SSH config names yet."""
    path = ssh_config_path()
    text = path.read_text() if path.exists() else ""
    taken = {
        word
        for line in text.splitlines()
        for word in line.split()[1:]
        if line.split()[:1] and line.split()[0].lower() == "host"
    }
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def _wait_booted(
    registry: Registry, provider: Provider, new: Replacement, timeout: float, interval: float
) -> Instance:
    """Poll the replacement until it runs with an SSH address; a passing poll failure is
    retried, and one that does not boot in time is kept and said so."""
    deadline = time.monotonic() + timeout
    seen: Instance | None = None
    with phase(f"waiting for {new.instance_id} to boot"):
        while True:
            try:
                seen = provider.status(new.platform_id)
            except ProviderError:
                seen = None
            if seen is not None and seen.state == "running" and seen.ssh_host:
                registry.set_instance_state(new.instance_id, seen.state)
                return seen
            if seen is not None and seen.state == "gone":
                registry.set_instance_state(new.instance_id, "gone", ended=True)
                raise LaunchError(f"the replacement {new.instance_id} is gone before it booted")
            if time.monotonic() >= deadline:
                break
            time.sleep(interval)
    state = f"{seen.state} ({seen.raw_state})" if seen is not None else "not readable"
    if seen is not None:
        registry.set_instance_state(new.instance_id, seen.state)
    raise LaunchError(
        f"the replacement {new.instance_id} did not boot within {timeout:g} s (last seen "
        f"{state}). It is kept, and may bill: `rgt instances` lists it. `rgt resume JOB "
        f"--new-machine` again waits for this one (no other is created); or stop it in "
        f"{provider.console_url or 'the console'}"
    )


def _host_block(alias: str, old_alias: str | None, inst: Instance) -> None:
    """The replacement's Host block (written once), with the old machine's user and keys."""
    path = ssh_config_path()
    if path.exists() and any(
        line.split()[:1] and line.split()[0].lower() == "host" and alias in line.split()[1:]
        for line in path.read_text().splitlines()
    ):
        return
    old = resolve(old_alias) if old_alias else None
    user = inst.ssh_user or (old.user if old else None) or "root"
    block = (
        f"Host {alias}\n  HostName {inst.ssh_host}\n  Port {inst.ssh_port or 22}\n  User {user}\n"
    )
    for key in old.identity_files if old else []:
        block += f"  IdentityFile {key}\n"
    add_host_block(path, alias, block)


def _trust(
    alias: str,
    project: Path,
    confirm: Confirm,
    timeout: float,
    interval: float,
    pinned: str | None = None,
) -> None:
    """Trust the replacement's host key with the user's consent (or its pinned key), once its
    sshd answers."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            trust_host(alias, project, confirm, pinned)
            return
        except SSHError as exc:
            if exc.kind not in _NOT_UP_YET or time.monotonic() >= deadline:
                raise
        time.sleep(interval)


def pinned_host_key(profile: Profile) -> str | None:
    """The host key a profile's machines present (``[up] host_key``: a public key file, as a
    key baked into the image is), for the automatic mode; None when it names none."""
    path = profile.up.get("host_key")
    if not path:
        return None
    try:
        line = Path(str(path)).expanduser().read_text().strip().splitlines()[0]
    except (OSError, IndexError) as exc:
        raise UsageError(f"[up] host_key {str(path)!r} cannot be read: {exc}") from exc
    if len(line.split()) < 2:
        raise UsageError(f"[up] host_key {str(path)!r} is not an OpenSSH public key line")
    return line


def wants_new_machine(spec: JobSpec, project: Path) -> bool:
    """Whether the job's profile asks for the automatic new machine."""
    if not spec.instance_id:
        return False
    try:
        return load_profile(spec.profile, project).up.get("new_machine") == "auto"
    except RgtError:
        return False


def replace_if_gone(spec: JobSpec, project: Path) -> dict[str, Any] | str | None:
    """The automatic ``--new-machine`` (a profile's ``[up] new_machine = "auto"``): for a job
    that cannot be observed, or was lost, on a machine ``rgt up`` made, ask the platform; only
    when it says the machine is gone is the job continued on a replacement, whose host key must
    be the profile's pinned one (``[up] host_key``; without one nothing is trusted, so nothing
    is done). Returns the new job's row; ``"refused"`` when it cannot be done (said in the log
    and the job's events); None while the machine is not reported gone (or the profile does
    not ask for it)."""
    if not wants_new_machine(spec, project):
        return None
    profile = load_profile(spec.profile, project)
    registry = Registry(project)
    try:
        pinned = pinned_host_key(profile)
        if pinned is None:
            raise UsageError(
                f'[up] new_machine = "auto" in profile {profile.name!r} needs [up] host_key: '
                "the public host key its machines' image carries, so a replacement's key is "
                "checked without asking; without it, `rgt resume NAME --new-machine` asks you"
            )
        old = _machine_of(registry, spec)
        if old["ended_at"] is None:
            try:
                _confirm_gone(provider_for(profile), old)
            except UsageError:
                return None  # it is there, or the platform did not say: the job stays
        return resume_on_new_machine(spec, project, lambda _text: False, pinned=pinned)
    except RgtError as exc:
        registry.event(spec.job_id, "auto_new_machine_refused", why=str(exc)[:500])
        log.warning("no automatic new machine for %s: %s", spec.job_id, exc)
        return "refused"
