"""Rebuild a project's registry from what is on disk: ``rgt jobs --rebuild``.

The damaged file (and its WAL) is kept beside the new one, never deleted. The jobs come back from
their control dirs, found where the project's journal says they are and in the job dirs of every
profile that reaches a machine (this machine's, and those of the SSH hosts named with ``--host``
or in a profile); each job's ``launch.json`` is its spec, the journal adds what its launch and
later actions recorded, and one look at its records gives its state. The runs come back from the
run folders under ``runs/`` (``run.json``, ``verification.json``), the rented machines and their
teardown decisions from the journal. A host that cannot be reached is named in the report and
left for a later rebuild; nothing is guessed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends import observe
from ..errors import RgtError, TransportError
from ..jobs.spec import JobSpec
from ..machines.profiles import Profile, available, load_profile
from ..store import journal
from ..store.project import runs_dir, state_dir
from ..store.registry import Registry
from ..transport import Transport, get_transport

#: How deep under a profile's job dir a control dir may lie (a Slurm array: group/seed/).
DEPTH = 2


@dataclass
class Rebuilt:
    """What a rebuild restored, and what it could not reach."""

    kept: list[Path] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    instances: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def text(self) -> str:
        """What the user reads."""
        lines = [
            f"rebuilt the registry: {len(self.jobs)} job(s), {len(self.runs)} run(s), "
            f"{len(self.instances)} machine(s)"
        ]
        lines += [f"  the damaged file is kept as {p}" for p in self.kept]
        lines += [f"  not reached (rebuild again once it answers): {u}" for u in self.unreachable]
        lines += [f"  skipped: {s}" for s in self.skipped]
        return "\n".join(lines)


def _keep_aside(registry: Path) -> list[Path]:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    kept = []
    for suffix in ("", "-wal", "-shm"):
        src = registry.with_name(registry.name + suffix)
        if src.exists():
            dst = registry.with_name(f"{registry.name}.damaged-{stamp}{suffix}")
            os.replace(src, dst)
            kept.append(dst)
    return kept[:1]


def _specs_under(transport: Transport, root: str, depth: int = DEPTH) -> Iterable[str]:
    """Control dirs (holding ``launch.json``) under ``root``, ``depth`` levels down at most."""
    try:
        names = transport.listdir(root)
    except FileNotFoundError:
        return
    for name in sorted(names):
        if name.startswith("."):
            continue
        path = f"{root}/{name}"
        if transport.stat(f"{path}/launch.json") is not None:
            yield path
        elif depth > 1 and (st := transport.stat(path)) is not None and st.is_dir:
            yield from _specs_under(transport, path, depth - 1)


def _read_spec(transport: Transport, control: str) -> JobSpec | None:
    text = transport.read_text(f"{control}/launch.json")
    try:
        data = json.loads(text or "")
    except ValueError:
        return None
    if not isinstance(data, dict) or not data.get("job_id") or not data.get("name"):
        return None
    return JobSpec.from_dict(data)


@dataclass
class _Place:
    """Where to look on one machine: job dirs of profiles (to list), control dirs (journaled)."""

    dirs: dict[str, Profile] = field(default_factory=dict)
    controls: list[str] = field(default_factory=list)


def _places(
    project: Path, facts: list[dict[str, Any]], hosts: Iterable[str]
) -> dict[tuple[str, str | None], _Place]:
    """(transport kind, host alias) -> where to look for control dirs there."""
    places: dict[tuple[str, str | None], _Place] = {}
    wanted_hosts = {h for h in hosts if h}
    for name in available(project):
        try:
            profile: Profile = load_profile(name, project)
        except RgtError:
            continue
        if profile.transport == "local":
            places.setdefault(("local", None), _Place()).dirs[profile.workdir] = profile
        elif profile.transport == "ssh":
            for host in sorted({profile.host, *wanted_hosts} - {""}):
                places.setdefault(("ssh", host), _Place()).dirs[profile.workdir] = profile
    for fact in facts:
        if fact.get("kind") == "job" and fact.get("control_dir"):
            key = (str(fact.get("transport") or "local"), fact.get("host_alias") or None)
            if key[0] in ("local", "ssh"):
                places.setdefault(key, _Place()).controls.append(str(fact["control_dir"]))
    return places


def rebuild_registry(project: Path, hosts: Iterable[str] = ()) -> Rebuilt:
    """Rebuild ``project``'s registry (see the module docstring); the old file is kept aside."""
    out = Rebuilt()
    path = state_dir(project) / "registry.sqlite3"
    out.kept = _keep_aside(path)
    registry = Registry(project)
    facts = journal.read(project)
    updates: dict[str, dict[str, Any]] = {}
    for fact in facts:
        if fact.get("kind") == "spec" and isinstance(fact.get("fields"), dict):
            updates.setdefault(str(fact.get("job_id")), {}).update(fact["fields"])
    seen: set[str] = set()
    for (kind, host), place in sorted(_places(project, facts, hosts).items(), key=str):
        where = host or "this machine"
        try:
            transport = get_transport(kind, host, project)
            home = transport.home()
        except (TransportError, RgtError, OSError) as exc:
            out.unreachable.append(f"{where} ({exc})")
            continue
        controls = list(place.controls)
        try:
            for template, profile in sorted(place.dirs.items()):
                controls.extend(_specs_under(transport, profile.expand(template, project, home)))
            for control in dict.fromkeys(controls):
                spec = _read_spec(transport, control)
                if spec is None or spec.job_id in seen:
                    continue
                seen.add(spec.job_id)
                known = {
                    k: v
                    for k, v in updates.get(spec.job_id, {}).items()
                    if k in JobSpec.__dataclass_fields__
                }
                spec = spec.replace(**known)
                try:
                    state = observe(transport, spec, log_lines=0).state
                except (TransportError, RgtError, OSError) as exc:
                    state = "lost"
                    out.skipped.append(f"{spec.job_id}: its state could not be read ({exc})")
                registry.add_job(
                    spec.job_id,
                    spec.name,
                    spec.lineage,
                    spec.attempt,
                    spec.profile,
                    spec.host,
                    spec.to_dict(),
                    state=state,
                    created_at=spec.created_at or None,
                )
                registry.event(spec.job_id, "rebuilt", control_dir=control, state=state)
                out.jobs.append(spec.job_id)
        except (TransportError, OSError) as exc:
            out.unreachable.append(f"{where} ({exc})")
    _runs(project, registry, out)
    out.instances = registry.replay_machines(facts)
    return out


def _runs(project: Path, registry: Registry, out: Rebuilt) -> None:
    root = runs_dir(project)
    if not root.is_dir():
        return
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            run = json.loads((folder / "run.json").read_text())
            verification = json.loads((folder / "verification.json").read_text())
        except (OSError, ValueError):
            out.skipped.append(f"{folder}: not a whole run (run.json or verification.json)")
            continue
        if not isinstance(run, dict) or run.get("run_id") != folder.name:
            out.skipped.append(f"{folder}: its run.json names another run")
            continue
        pulled = (run.get("times") or {}).get("pulled")
        registry.add_run(
            folder.name,
            str(run.get("job_id")),
            folder,
            verification.get("verified") is True,
            at=float(pulled) if isinstance(pulled, int | float) else None,
        )
        out.runs.append(folder.name)
