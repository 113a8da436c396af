"""Run references: ``"<source>:<key.path>"`` resolved to one value of one run's ``results.json``.

The source is a run folder, a run id or a job id/name (its newest pulled run); a seed group is
refused. :func:`resolve` gives the value with the exact bytes it was read from (:class:`Resolved`),
and :class:`Results` one run's results as a read-only mapping. A claim id of EVIDENCE.json
(``"C1"``, ``"C1#k"``; :data:`CLAIM_REF` is its shape) is resolved above this module and
:mod:`.evidence`, by :func:`rgt_jupyter.deliver.numbers.resolve`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from ..errors import UsageError
from ..jobs.lookup import group_rows, resolve_runs
from ..store.project import project_dir
from ..store.registry import Registry

#: A claim id of EVIDENCE.json (``C1``), optionally with an evidence row (``C1#2``); groups
#: ``id``, ``row``.
CLAIM_REF = re.compile(r"^(?P<id>[^:#\s]+?)(?:#(?P<row>\d+))?$")

_R = TypeVar("_R", bound="Results")


@dataclass(frozen=True)
class Resolved:
    """One reference resolved: the value at ``key`` of the run's ``results.json`` as it was read,
    the sha256 of those bytes, and (for a claim reference) the claim's id and row."""

    ref: str
    run_id: str
    run_dir: Path
    results_path: Path
    results_json: str
    sha256: str
    key: str
    value: Any
    claim_id: str | None = None
    claim_row: int | None = None


class Results(Mapping[str, Any]):
    """One run's ``results.json`` as read once: a read-only mapping (nested mappings and lists
    are read-only too) whose values :meth:`resolved` gives with the bytes they were read from
    (:class:`rgt_jupyter.deliver.numbers.Results` adds ``num``)."""

    def __init__(self, source: str, run_dir: Path, project: Path) -> None:
        self.source = source
        self.run_dir = run_dir
        self.run_id = run_dir.name
        self.path, self.results_json, raw = _read_results(run_dir, project)
        self.sha256 = hashlib.sha256(raw).hexdigest()
        self._plain = _parse(raw, self.path)
        if not isinstance(self._plain, dict):
            raise UsageError(
                f"{self.path} holds a {type(self._plain).__name__}, not a JSON object of results"
            )
        self._data = _freeze(self._plain)

    @classmethod
    def of(cls: type[_R], source: str, project: str | os.PathLike[str] | Path | None = None) -> _R:
        """The ``results.json`` of the run ``source`` names (run id, run folder, or job)."""
        proj = project_dir(project)
        return cls(source, run_folder(source, proj), proj)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def value(self, key: str) -> Any:
        """The value at the dotted ``key`` (read-only)."""
        return _freeze(_walk(self._plain, key, self.run_id))

    def located(self, key: str) -> tuple[Any, list[str], Any]:
        """The value at ``key``, the keys walked to it (``AP@0.5`` is one), and the mapping or
        list that holds it (None at the top level); all read-only."""
        value, parts = _locate(self._plain, key, self.run_id)
        parent: Any = None
        if len(parts) > 1:
            parent = self._plain
            for part in parts[:-1]:
                parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        return _freeze(value), parts, _freeze(parent)

    def resolved(self, key: str) -> Resolved:
        """``key`` resolved against these bytes."""
        return Resolved(
            ref=f"{self.run_id}:{key}",
            run_id=self.run_id,
            run_dir=self.run_dir,
            results_path=self.path,
            results_json=self.results_json,
            sha256=self.sha256,
            key=key,
            value=_walk(self._plain, key, self.run_id),
        )

    def __repr__(self) -> str:
        return f"<Results {self.run_id} {self.results_json} sha256={self.sha256[:12]}>"


# -- public functions


def resolve(ref: str, project: str | os.PathLike[str] | Path | None = None) -> Resolved:
    """Resolve the run reference ``"<source>:<key.path>"``.

    The source is a run folder, a run id or a job id/name (its newest pulled run); a seed group
    is refused. Raises :class:`UsageError` saying what to do instead."""
    ref = ref.strip()
    source, key = split_ref(ref)
    resolved = Results.of(source, project).resolved(key)
    return dataclasses.replace(resolved, ref=ref)


def split_ref(ref: str) -> tuple[str, str]:
    """``"<source>:<key.path>"`` as (source, key), split at the last ':'."""
    source, sep, key = ref.strip().rpartition(":")
    if not sep or not source.strip() or not key.strip():
        raise UsageError(
            f"reference {ref!r}: write <run id, run folder or job>:<key.path>, e.g. "
            "'baseline:test.accuracy', or a claim id of EVIDENCE.json such as 'C1'"
        )
    return source.strip(), key.strip()


def run_folder(source: str, project: Path) -> Path:
    """The one run folder ``source`` names: a run folder, a run id, or a job id or name (its
    newest pulled run). A seed group names several runs and is refused."""
    direct = Path(source).expanduser()
    if not direct.is_absolute():
        direct = project / direct
    if (
        not (direct / "run.json").is_file()
        and not (project / "runs" / source / "run.json").is_file()
    ):
        _refuse_group(source, project)
    try:
        paths = resolve_runs([source], project)
    except UsageError as exc:
        raise UsageError(str(exc).removeprefix("%verify: ")) from exc
    if len(paths) != 1:
        raise UsageError(f"{source!r} names {len(paths)} runs: name one run id")
    return paths[0]


# -- helpers


def _read_results(run_dir: Path, project: Path) -> tuple[Path, str, bytes]:
    """The results.json path, its name as recorded (project-relative where it can be), and its
    bytes."""
    path = run_dir / "results.json"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(
            f"run {run_dir.name} has no results.json: its job wrote none "
            f"(see {run_dir / 'outputs'}); name another run"
        ) from None
    try:
        shown = path.resolve().relative_to(project.resolve()).as_posix()
    except ValueError:
        shown = str(path.resolve())
    return path, shown, raw


def _parse(raw: bytes, path: Path) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise UsageError(
            f"{path} is not valid JSON ({exc}): the run's results are unreadable"
        ) from exc


def _segments(key: str) -> list[str]:
    parts = key.split(".")
    if any(not p.strip() for p in parts):
        raise UsageError(f"the key {key!r} has an empty part; write e.g. test.accuracy")
    return [p.strip() for p in parts]


def _walk(data: Any, key: str, run_id: str) -> Any:
    """The value at dotted ``key``: list items by index, and a mapping key that itself holds
    dots (``AP@0.5``) is matched whole."""
    return _locate(data, key, run_id)[0]


def _locate(data: Any, key: str, run_id: str) -> tuple[Any, list[str]]:
    """The value at dotted ``key`` and the keys walked to reach it."""
    parts = _segments(key)
    node = data
    done: list[str] = []
    while parts:
        here = ".".join(done) or "the top level"
        if isinstance(node, Mapping):
            for take in range(1, len(parts) + 1):
                name = ".".join(parts[:take])
                if name in node:
                    node = node[name]
                    done.append(name)
                    parts = parts[take:]
                    break
            else:
                keys = ", ".join(str(k) for k in node) or "(none: it is empty)"
                raise UsageError(
                    f"run {run_id}: results.json has no key {key!r} ({parts[0]!r} is not at "
                    f"{here}); the keys at {here} are: {keys}"
                )
        elif isinstance(node, Sequence) and not isinstance(node, str):
            part = parts[0]
            if not re.fullmatch(r"-?\d+", part) or not -len(node) <= int(part) < len(node):
                raise UsageError(
                    f"run {run_id}: results.json key {key!r}: {here} is a list of {len(node)} "
                    f"items; {part!r} is not an index 0..{len(node) - 1}"
                )
            node = node[int(part)]
            done.append(part)
            parts = parts[1:]
        else:
            raise UsageError(
                f"run {run_id}: results.json key {key!r}: {here} is {node!r}, which has no "
                f"key {parts[0]!r}; end the key at {'.'.join(done)}"
            )
    return node, done


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _refuse_group(source: str, project: Path) -> None:
    members = group_rows(Registry(project), source)
    if not members:
        return
    names = ", ".join(r["name"] for r in members)
    raise UsageError(
        f"{source!r} is a seed group ({names}): a generated number comes from one run. Name the "
        f"run of one seed (e.g. '{members[0]['name']}:<key>'), or report each seed's number"
    )
