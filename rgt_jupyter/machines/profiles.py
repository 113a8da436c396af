"""Profiles: where and how jobs run, and what a platform keeps and loses, as data (TOML)
validated into typed models.

Built-ins live in ``profiles/`` (shipped in the wheel); the user's profiles
(``$XDG_CONFIG_HOME/rgt/profiles/``, by default ``~/.config/rgt/profiles/``) and
``<project>/.rgt/profiles/`` override them by name, and may ``extends = "NAME"`` another
profile: tables merge key by key, arrays and scalars replace. Every platform fact carries the
month it was last verified (the file's ``verified`` unless the fact has its own); :func:`stale_facts` names those older than six months. Secrets are referenced by
env var or file name, never stored: a key that looks like one is refused.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import tomllib

from ..errors import ProfileError
from .platforms import PLATFORMS
from .profile_dirs import profile_files
from .profile_schema import REQUIRED_FACTS, SUB, TOP, Spec

_TRANSPORTS = ("local", "ssh", "kubernetes")
_AUTOSTOP = ("", "after-verified-pull")
_KINDS = (
    "workstation",
    "ssh",
    "ssh-rental",
    "cloud-api",
    "slurm",
    "kubernetes",
    "ray",
    "notebook",
)
_EFFECTS = ("none", "stop", "destroy")
_PROVIDERS = ("", *PLATFORMS)
_SECRET_WORDS = re.compile(r"(^|_)(api_key|apikey|token|password|passwd|secret)$")
_MONTH = re.compile(r"\d{4}-(0[1-9]|1[0-2])")
STALE_AFTER_MONTHS = 6


@dataclass(frozen=True)
class Fact:
    """One machine-readable platform fact and the month it was last checked."""

    value: Any
    verified: str


@dataclass(frozen=True)
class Note:
    """A billing trap or a danger clock, in plain words."""

    text: str
    verified: str


@dataclass(frozen=True)
class MeterStop:
    """The action that stops a platform's meter and what it does to disks (``effect``)."""

    verb: str
    irreversible: bool
    effect: str
    console: str = ""
    keeps_billing: tuple[str, ...] = ()
    other_verbs: tuple[str, ...] = ()
    verified: str = ""


@dataclass(frozen=True)
class Tier:
    """A storage location and whether it survives the platform's stop and destroy."""

    path: str
    label: str
    survives_stop: bool
    survives_destroy: bool
    needs: str = ""
    note: str = ""
    verified: str = ""

    def survives(self, effect: str) -> bool:
        """Whether data here outlives a verb with this effect (none, stop, destroy)."""
        return {"none": True, "stop": self.survives_stop, "destroy": self.survives_destroy}[effect]


@dataclass(frozen=True)
class Profile:
    """A validated profile. Path templates may hold ``{project}``, ``{project_name}`` and
    ``{home}`` placeholders."""

    name: str
    kind: str
    description: str
    transport: str
    launcher: str
    workdir: str
    durable_dir: str
    scratch_dir: str
    meter_stop: MeterStop
    tiers: tuple[Tier, ...]
    verified: str
    platform: str = ""
    python: str = ""
    host: str = ""
    smoke_default: bool = False
    grace_s: float = 30.0
    heartbeat_s: float = 1.0
    provider: str = ""
    api_key_env: str = ""
    api_key_file: str = ""
    api_url: str = ""
    features: tuple[str, ...] = ()
    pull_before_teardown: bool = False
    cost_per_hour: float = 0.0
    idle_warn_minutes: float = 30.0
    detach: dict[str, Any] = field(default_factory=dict)
    spot: dict[str, Any] = field(default_factory=dict)
    ssh: dict[str, Any] = field(default_factory=dict)
    network: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Fact] = field(default_factory=dict)
    billing_traps: tuple[Note, ...] = ()
    danger_clocks: tuple[Note, ...] = ()
    guided: dict[str, str] = field(default_factory=dict)
    up: dict[str, Any] = field(default_factory=dict)
    sbatch: dict[str, Any] = field(default_factory=dict)
    kubernetes: dict[str, Any] = field(default_factory=dict)
    #: A Ray cluster's Jobs API (``address``, a token by name, entrypoint resources): see
    #: :mod:`rgt_jupyter.backends.ray`.
    ray: dict[str, Any] = field(default_factory=dict)
    #: Checkpoints also in an S3-compatible bucket (``url``, ``endpoint``, ``credentials`` by
    #: name, ``region``): see :mod:`rgt_jupyter.transport.bucket`.
    bucket: dict[str, Any] = field(default_factory=dict)
    #: ``after-verified-pull``: ``rgt autostop`` stops the meter once every job of the machine
    #: ended and was pulled and verified, the gate passing (a standing approval).
    autostop: str = ""
    source: str = ""
    extends: str = ""

    @property
    def meter_stop_verb(self) -> str:
        """The platform's word for stopping the meter."""
        return self.meter_stop.verb

    @property
    def meter_stop_irreversible(self) -> bool:
        """Whether stopping the meter destroys the machine."""
        return self.meter_stop.irreversible

    @property
    def is_guided(self) -> bool:
        """No usable API: ``up`` and ``down`` are steps the user takes in the console."""
        return not self.provider

    @property
    def metered(self) -> bool:
        """Whether there is a meter to stop at all."""
        return self.meter_stop.effect != "none"

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

    def tiers_in_effect(self) -> list[Tier]:
        """The tiers that apply: those without a ``needs`` and those whose feature is declared."""
        return [t for t in self.tiers if not t.needs or t.needs in self.features]

    def dated_facts(self) -> list[tuple[str, str]]:
        """(fact name, verified month) for every platform fact of the profile."""
        out = [("meter_stop", self.meter_stop.verified)]
        out += [(f"tier {t.path} ({t.label})", t.verified) for t in self.tiers]
        for table in ("detach", "spot", "ssh", "network"):
            if getattr(self, table):
                out.append((table, str(getattr(self, table).get("verified", self.verified))))
        out += [(f"facts.{k}", f.verified) for k, f in self.facts.items()]
        out += [(f"billing trap: {n.text[:40]}", n.verified) for n in self.billing_traps]
        out += [(f"danger clock: {n.text[:40]}", n.verified) for n in self.danger_clocks]
        return out


# -- the schema ---------------------------------------------------------------------------


class _Source:
    """The text of a profile file, to point errors at a line."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def line_of(self, table: str, index: int | None, key: str | None) -> int | None:
        """1-based line of ``key`` in ``[table]`` (the ``index``-th ``[[table]]``), or of the
        table header when ``key`` is None; top level when ``table`` is empty."""
        current, seen = "", -1
        header_line: int | None = None
        for n, raw in enumerate(self.lines, 1):
            line = raw.strip()
            m = re.fullmatch(r"\[\[\s*([A-Za-z0-9_.-]+)\s*\]\].*", line) or re.fullmatch(
                r"\[\s*([A-Za-z0-9_.-]+)\s*\].*", line
            )
            if m:
                current = m.group(1)
                if current == table:
                    seen += 1
                    if (index is None or seen == index) and key is None:
                        return n
                    header_line = n if index is None or seen == index else header_line
                continue
            in_scope = current == table and (index is None or seen == index)
            if key is not None and in_scope and re.match(rf"{re.escape(key)}\s*=", line):
                return n
            if key is not None and not table and not current and re.match(rf"{key}\s*=", line):
                return n
        return header_line

    def error(self, problem: str, table: str = "", index: int | None = None, key: str = "") -> str:
        line = self.line_of(table, index, key or None)
        where = f"{self.path}:{line}" if line else str(self.path)
        dotted = ".".join(
            p for p in (table + (f"[{index}]" if index is not None else ""), key) if p
        )
        return f"{where}: field {dotted!r}: {problem}" if dotted else f"{where}: {problem}"


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "month":
        return isinstance(value, str) and bool(_MONTH.fullmatch(value))
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "strlist":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "table":
        return isinstance(value, dict)
    if kind == "tables":
        return isinstance(value, list) and all(isinstance(v, dict) for v in value)
    return True


_TYPE_WORDS = {
    "str": "a string",
    "month": 'a month "YYYY-MM"',
    "bool": "true or false",
    "float": "a number",
    "int": "a whole number",
    "strlist": "a list of strings",
    "table": "a table",
    "tables": "an array of tables ([[...]])",
}


def _check_keys(
    data: dict[str, Any],
    spec: Spec,
    src: _Source,
    table: str = "",
    index: int | None = None,
    partial: bool = False,
) -> None:
    for key, value in data.items():
        if key not in spec:
            close = difflib.get_close_matches(key, list(spec), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ProfileError(src.error(f"unknown field{hint}", table, index, key))
        kind = spec[key][0]
        if not _type_ok(kind, value):
            raise ProfileError(
                src.error(f"must be {_TYPE_WORDS[kind]}, got {value!r}", table, index, key)
            )
    if not partial:
        for key, (_kind, required) in spec.items():
            if required and key not in data:
                where = table + (f"[{index}]" if index is not None else "")
                raise ProfileError(
                    src.error(f"missing required field {key!r}" + (f" in {where}" if where else ""))
                )


def _scan_secrets(data: Any, src: _Source, table: str = "") -> None:
    """Refuse a key that looks like a secret anywhere (also in free-form tables like ``up``)."""
    if isinstance(data, list):
        for item in data:
            _scan_secrets(item, src, table)
    elif isinstance(data, dict):
        for key, value in data.items():
            if _SECRET_WORDS.search(key.lower()):
                raise ProfileError(
                    src.error(
                        "profiles never hold secrets: name the env var (api_key_env) or the "
                        "file (api_key_file) that holds it",
                        table,
                        None,
                        key,
                    )
                )
            _scan_secrets(value, src, table or key)


def _validate(data: dict[str, Any], src: _Source, partial: bool = False) -> None:
    _scan_secrets({k: v for k, v in data.items() if k not in ("api_key_env", "api_key_file")}, src)
    _check_keys(data, TOP, src, partial=partial)
    for table, spec in SUB.items():
        if table not in data:
            continue
        value = data[table]
        if isinstance(value, list):
            for i, item in enumerate(value):
                _check_keys(item, spec, src, table, i, partial)
        else:
            _check_keys(value, spec, src, table, None, partial)
    for key, fact in data.get("facts", {}).items():
        if not isinstance(fact, dict) or "value" not in fact or set(fact) - {"value", "verified"}:
            raise ProfileError(
                src.error(
                    'must be an inline table { value = ..., verified = "YYYY-MM" }',
                    "facts",
                    None,
                    key,
                )
            )
        if "verified" in fact and not _type_ok("month", fact["verified"]):
            raise ProfileError(src.error('verified must be "YYYY-MM"', "facts", None, key))


def _check_values(data: dict[str, Any], src: _Source) -> None:
    choices = {
        "kind": _KINDS,
        "transport": _TRANSPORTS,
        "provider": _PROVIDERS,
    }
    for key, allowed in choices.items():
        if data.get(key, "") not in allowed:
            raise ProfileError(src.error(f"{data[key]!r} is not one of {allowed}", key=key))
    effect = data["meter_stop"]["effect"]
    if effect not in _EFFECTS:
        raise ProfileError(
            src.error(f"{effect!r} is not one of {_EFFECTS}", "meter_stop", None, "effect")
        )
    if not data["tiers"]:
        raise ProfileError(src.error("at least one storage tier is needed", key="tiers"))
    for i, tier in enumerate(data["tiers"]):
        if not (tier["path"].startswith("/") or tier["path"].startswith("{")):
            raise ProfileError(src.error("must be an absolute path", "tiers", i, "path"))
    if data["kind"] != "workstation":
        missing = [k for k in REQUIRED_FACTS if k not in data.get("facts", {})]
        if missing:
            raise ProfileError(src.error(f"missing platform fact(s) {', '.join(missing)}", "facts"))
    if data.get("autostop", "") not in _AUTOSTOP:
        raise ProfileError(
            src.error(f"{data['autostop']!r} is not one of {_AUTOSTOP}", key="autostop")
        )
    url = data.get("bucket", {}).get("url")
    if url is not None and not re.fullmatch(r"s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?", url):
        raise ProfileError(
            src.error(f"{url!r} is not a bucket URL like s3://BUCKET/PREFIX", "bucket", None, "url")
        )
    if data.get("provider") and not (data.get("api_key_env") or data.get("api_key_file")):
        raise ProfileError(
            src.error("a provider needs api_key_env or api_key_file", key="provider")
        )


def _build(data: dict[str, Any], source: str) -> Profile:
    month = data["verified"]

    def notes(key: str) -> tuple[Note, ...]:
        return tuple(Note(n["text"], n.get("verified", month)) for n in data.get(key, []))

    ms = data["meter_stop"]
    simple = {k: v for k, v in data.items() if TOP[k][0] not in ("table", "tables")}
    simple.pop("features", None)
    return Profile(
        **simple,
        features=tuple(data.get("features", [])),
        meter_stop=MeterStop(
            verb=ms["verb"],
            irreversible=ms["irreversible"],
            effect=ms["effect"],
            console=ms.get("console", ""),
            keeps_billing=tuple(ms.get("keeps_billing", [])),
            other_verbs=tuple(ms.get("other_verbs", [])),
            verified=ms.get("verified", month),
        ),
        tiers=tuple(
            Tier(
                path=t["path"],
                label=t["label"],
                survives_stop=t["survives_stop"],
                survives_destroy=t["survives_destroy"],
                needs=t.get("needs", ""),
                note=t.get("note", ""),
                verified=t.get("verified", month),
            )
            for t in data["tiers"]
        ),
        detach=dict(data.get("detach", {})),
        spot=dict(data.get("spot", {})),
        ssh=dict(data.get("ssh", {})),
        network=dict(data.get("network", {})),
        facts={
            k: Fact(v["value"], v.get("verified", month)) for k, v in data.get("facts", {}).items()
        },
        billing_traps=notes("billing_traps"),
        danger_clocks=notes("danger_clocks"),
        guided=dict(data.get("guided", {})),
        up=dict(data.get("up", {})),
        sbatch=dict(data.get("sbatch", {})),
        kubernetes=dict(data.get("kubernetes", {})),
        ray=dict(data.get("ray", {})),
        bucket=dict(data.get("bucket", {})),
        source=source,
    )


# -- finding and loading ------------------------------------------------------------------


def available(project: Path | None = None) -> dict[str, Path]:
    """Profile name -> file; later search dirs override earlier ones."""
    return {name: paths[-1] for name, paths in profile_files(project).items()}


def load_profile(name: str, project: Path | None = None) -> Profile:
    """Load and validate profile ``name``; an unknown name suggests the closest known one."""
    files = profile_files(project)
    if name not in files:
        close = difflib.get_close_matches(name, list(files), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ProfileError(
            f"unknown profile {name!r}.{hint} Available: {', '.join(sorted(files))} "
            "(`rgt profiles` lists them)."
        )
    return parse_profile(files[name][-1], project)


def _read(path: Path) -> tuple[dict[str, Any], _Source]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read it ({exc})") from exc
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: invalid TOML: {exc}") from exc
    return data, _Source(path, text)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _resolve(
    data: dict[str, Any], src: _Source, project: Path | None, depth: int = 0
) -> dict[str, Any]:
    """A file's raw ``data`` with its ``extends`` chain merged in (base first)."""
    path = src.path
    _validate(data, src, partial="extends" in data)
    if "name" in data and data["name"] != path.stem:
        raise ProfileError(
            src.error(f"{data['name']!r} must match the file name {path.stem!r}", key="name")
        )
    base_name = data.get("extends", "")
    if not base_name:
        return data
    if depth > 8:
        raise ProfileError(src.error("extends chain is too deep (a cycle?)", key="extends"))
    files = profile_files(project)
    candidates = [p for p in files.get(base_name, []) if p.resolve() != path.resolve()]
    if base_name == path.stem:  # extending the built-in (or user) profile of the same name
        own = files.get(base_name, [])
        idx = next((i for i, p in enumerate(own) if p.resolve() == path.resolve()), len(own))
        candidates = own[:idx]
    if not candidates:
        raise ProfileError(src.error(f"no profile {base_name!r} to extend", key="extends"))
    merged = _merge(_resolve(*_read(candidates[-1]), project, depth + 1), data)
    merged["name"] = path.stem
    merged.pop("extends", None)
    return merged


def parse_profile(path: Path, project: Path | None = None) -> Profile:
    """Parse one TOML file (resolving ``extends``) into a :class:`Profile`; any error names
    the file, the line and the field."""
    raw, src = _read(path)
    extends = raw.get("extends", "")
    data = _resolve(raw, src, project)
    if extends:
        _validate(data, src)  # the merged whole; errors point at the user's file
    _check_values(data, src)
    return replace(_build(data, str(path)), extends=extends)


def months_old(month: str, today: _dt.date | None = None) -> int:
    """Whole months between ``YYYY-MM`` and ``today``."""
    today = today or _dt.date.today()
    year, mon = (int(x) for x in month.split("-"))
    return (today.year * 12 + today.month) - (year * 12 + mon)


def stale_facts(profile: Profile, today: _dt.date | None = None) -> list[str]:
    """Facts last verified more than six months ago, in plain words."""
    out = []
    for what, month in profile.dated_facts():
        age = months_old(month, today)
        if age > STALE_AFTER_MONTHS:
            out.append(
                f"{profile.name}: {what} was last verified {month} ({age} months ago): check "
                f"{profile.platform or profile.name}'s documentation before relying on it"
            )
    return out
