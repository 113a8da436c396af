"""Profiles: where and how jobs run, as data (TOML) validated into a typed model."""

from __future__ import annotations

import difflib
import os
import re
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import tomllib

from .errors import ProfileError

_TRANSPORTS = ("local", "ssh")
_LAUNCHERS = ("detached", "tmux")


@dataclass(frozen=True)
class Profile:
    """A validated profile. Paths may hold ``{project}`` and ``{home}`` placeholders."""

    name: str
    kind: str
    description: str
    transport: str
    launcher: str
    workdir: str
    durable_dir: str
    scratch_dir: str
    python: str = ""
    host: str = ""
    smoke_default: bool = False
    grace_s: float = 30.0
    heartbeat_s: float = 1.0
    meter_stop_verb: str = "none"
    meter_stop_irreversible: bool = False
    verified: str = ""
    source: str = ""

    def expand(self, template: str, project: Path, home: str) -> str:
        """Fill a path template: ``{project}`` (the local project dir), ``{project_name}`` (its
        name, made safe for any path) and ``{home}`` (the home dir where the job runs)."""
        name = re.sub(r"[^A-Za-z0-9._-]", "_", project.name).lstrip(".-") or "project"
        return template.format(project=str(project), project_name=name, home=home)

    def interpreter(self) -> str:
        """The Python that runs the agent and the job: the profile's, else this kernel's
        interpreter for local jobs and ``python3`` (on the remote PATH) elsewhere."""
        if self.python:
            return self.python
        return sys.executable if self.transport == "local" else "python3"


def builtin_dirs() -> list[Path]:
    """Where built-in profile files live: in the wheel, or ``profiles/`` of a source checkout."""
    here = Path(__file__).resolve().parent
    return [p for p in (here / "_profiles", here.parent / "profiles") if p.is_dir()]


def search_dirs(project: Path | None) -> list[Path]:
    """Built-ins first, then ``~/.config/rgt/profiles``, then ``<project>/.rgt/profiles``."""
    dirs = builtin_dirs()
    dirs.append(Path(os.path.expanduser("~/.config/rgt/profiles")))
    if project is not None:
        dirs.append(project / ".rgt" / "profiles")
    return dirs


def available(project: Path | None = None) -> dict[str, Path]:
    """Profile name -> file; later search dirs override earlier ones."""
    found: dict[str, Path] = {}
    for directory in search_dirs(project):
        if directory.is_dir():
            for path in sorted(directory.glob("*.toml")):
                found[path.stem] = path
    return found


def load_profile(name: str, project: Path | None = None) -> Profile:
    """Load and validate profile ``name``; an unknown name suggests the closest known one."""
    files = available(project)
    if name not in files:
        close = difflib.get_close_matches(name, list(files), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ProfileError(
            f"unknown profile {name!r}.{hint} Available: {', '.join(sorted(files))} "
            "(`rgt profiles` lists them)."
        )
    return parse_profile(files[name])


def parse_profile(path: Path) -> Profile:
    """Parse one TOML file into a :class:`Profile`, naming the file and field on any error."""
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: invalid TOML: {exc}") from exc
    known = {f.name: f for f in fields(Profile)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ProfileError(f"{path}: unknown field(s) {', '.join(unknown)}")
    missing = [
        k
        for k in (
            "name",
            "kind",
            "description",
            "transport",
            "launcher",
            "workdir",
            "durable_dir",
            "scratch_dir",
        )
        if k not in data
    ]
    if missing:
        raise ProfileError(f"{path}: missing field(s) {', '.join(missing)}")
    for key, value in data.items():
        expected = known[key].type
        ok = {
            "str": isinstance(value, str),
            "bool": isinstance(value, bool),
            "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        }.get(str(expected), True)
        if not ok:
            raise ProfileError(f"{path}: field {key!r} must be {expected}, got {value!r}")
    if data["transport"] not in _TRANSPORTS:
        raise ProfileError(f"{path}: transport {data['transport']!r} is not one of {_TRANSPORTS}")
    if data["launcher"] not in _LAUNCHERS:
        raise ProfileError(f"{path}: launcher {data['launcher']!r} is not one of {_LAUNCHERS}")
    if data["name"] != path.stem:
        raise ProfileError(f"{path}: name {data['name']!r} must match the file name {path.stem!r}")
    return Profile(source=str(path), **data)
