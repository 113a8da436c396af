"""Numbers generated from a run's ``results.json``, each carrying where it came from.

``num("baseline:test.accuracy", ".1%")`` reads the newest pulled run of job ``baseline``, hashes
the exact bytes of its ``results.json``, walks the dotted key and formats the raw value; the
:class:`GeneratedNumber` it returns shows as that text and carries its source in the output's
metadata. :func:`results` gives one run's results as a read-only mapping, and :func:`md` fills a
markdown template with such numbers (see :mod:`rgt_jupyter.deliver` for the reference syntax).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import UsageError
from ..project import project_dir

#: A markdown placeholder ``{{rgt:<ref>|<fmt>}}`` (``|<fmt>`` optional); groups ``ref``, ``fmt``.
PLACEHOLDER = re.compile(r"\{\{\s*rgt:(?P<ref>[^{}|]+?)\s*(?:\|(?P<fmt>[^{}]*))?\}\}")

#: A ``{name}`` or ``{name:spec}`` field of an :func:`md` template.
_FIELD = re.compile(r"\{(?P<name>[A-Za-z_]\w*)(?::(?P<spec>[^{}]*))?\}")
_CLAIM = re.compile(r"^(?P<id>[^:#\s]+?)(?:#(?P<row>\d+))?$")


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


@dataclass(frozen=True)
class GeneratedNumber:
    """A number read from a run's ``results.json``: ``text`` is ``value`` formatted with ``fmt``
    (its ``repr`` when ``fmt`` is None); the other fields say which file, bytes and key."""

    value: Any
    text: str
    ref: str
    run_id: str
    results_json: str
    sha256: str
    key: str
    fmt: str | None
    claim_id: str | None = None

    def source(self) -> dict[str, Any]:
        """The fields as a dict: what output metadata records for this number."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def with_fmt(self, fmt: str | None) -> GeneratedNumber:
        """The same number formatted with ``fmt``."""
        return dataclasses.replace(self, fmt=fmt, text=_format(self.value, fmt, self.ref))

    def __str__(self) -> str:
        return self.text

    def __format__(self, spec: str) -> str:
        # A spec re-formats the raw value, as for a float; only md() records that text.
        return self.text if not spec else _format(self.value, spec, self.ref)

    def __float__(self) -> float:
        return float(self.value)

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None
    ) -> tuple[dict[str, str], dict[str, Any]]:
        data = {"text/plain": self.text, "text/markdown": self.text}
        return data, {"rgt_jupyter": {"generated": [self.source()]}}


@dataclass(frozen=True)
class GeneratedMarkdown:
    """Markdown whose numbers were generated: ``generated`` lists each number's source, in
    order, with ``span`` ``[start, end)`` in ``text``."""

    text: str
    generated: tuple[dict[str, Any], ...]

    def __str__(self) -> str:
        return self.text

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None
    ) -> tuple[dict[str, str], dict[str, Any]]:
        data = {"text/plain": self.text, "text/markdown": self.text}
        return data, {"rgt_jupyter": {"generated": [dict(g) for g in self.generated]}}


class Results(Mapping[str, Any]):
    """One run's ``results.json`` as read once: a read-only mapping (nested mappings and lists
    are read-only too), with :meth:`num` giving :class:`GeneratedNumber` s from those bytes."""

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

    def num(self, key: str, fmt: str | None = None) -> GeneratedNumber:
        """The number at ``key``, formatted with ``fmt``."""
        return _number(self.resolved(key), fmt)

    def __repr__(self) -> str:
        return f"<Results {self.run_id} {self.results_json} sha256={self.sha256[:12]}>"


# -- public functions


def resolve(ref: str, project: str | os.PathLike[str] | Path | None = None) -> Resolved:
    """Resolve ``"<source>:<key.path>"`` or a claim id (``"C1"``, ``"C1#k"``) of EVIDENCE.json.

    The source is a run folder, a run id or a job id/name (its newest pulled run); a seed group
    is refused. Raises :class:`UsageError` saying what to do instead."""
    proj = project_dir(project)
    ref = ref.strip()
    if ":" not in ref:
        return _resolve_claim(ref, proj)
    source, key = split_ref(ref)
    resolved = Results(source, run_folder(source, proj), proj).resolved(key)
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
    from ..verify.report import resolve_runs

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


def num(
    ref: str, fmt: str | None = None, project: str | os.PathLike[str] | Path | None = None
) -> GeneratedNumber:
    """The number ``ref`` names, formatted with ``fmt`` (a format spec such as ``".2f"``,
    ``".1%"``, ``".3g"``; None shows the raw value's repr)."""
    return _number(resolve(ref, project), fmt)


def results(run: str, project: str | os.PathLike[str] | Path | None = None) -> Results:
    """The ``results.json`` of the run ``run`` names (run id, run folder, or job)."""
    proj = project_dir(project)
    return Results(run, run_folder(run, proj), proj)


def md(
    template: str, project: str | os.PathLike[str] | Path | None = None, **values: Any
) -> GeneratedMarkdown:
    """Markdown from ``template``: each ``{{rgt:<ref>|<fmt>}}`` is resolved and formatted, and
    each ``{name}`` / ``{name:spec}`` is filled with the keyword argument ``name`` (a
    :class:`GeneratedNumber`, or a str for words). Other braces (LaTeX) stay as written; a
    keyword argument the template does not use is an error (a misspelt field)."""
    proj = project_dir(project)
    token = re.compile(f"{PLACEHOLDER.pattern}|{_FIELD.pattern}")
    out: list[str] = []
    generated: list[dict[str, Any]] = []
    used: set[str] = set()
    pos = 0
    length = 0
    for match in token.finditer(template):
        piece: str | GeneratedNumber
        if match.group("ref") is not None:
            piece = num(match.group("ref"), _fmt(match.group("fmt")), proj)
        elif match.group("name") in values:
            name = match.group("name")
            used.add(name)
            piece = _field(name, values[name], match.group("spec"))
        else:
            continue
        literal = template[pos : match.start()]
        out.append(literal)
        length += len(literal)
        if isinstance(piece, GeneratedNumber):
            generated.append({**piece.source(), "span": [length, length + len(piece.text)]})
            piece = piece.text
        out.append(piece)
        length += len(piece)
        pos = match.end()
    out.append(template[pos:])
    unused = sorted(set(values) - used)
    if unused:
        raise UsageError(
            f"md(): {', '.join(unused)} passed but not used in the template: write "
            + ", ".join("{" + u + "}" for u in unused)
            + " where each should appear"
        )
    return GeneratedMarkdown("".join(out), tuple(generated))


# -- helpers


def _fmt(fmt: str | None) -> str | None:
    """A placeholder's format spec: None when absent or empty."""
    if fmt is None:
        return None
    return fmt.strip() or None


def _field(name: str, value: Any, spec: str | None) -> str | GeneratedNumber:
    if isinstance(value, GeneratedNumber):
        return value.with_fmt(spec) if spec else value
    if isinstance(value, GeneratedMarkdown):
        raise UsageError(f"md(): {{{name}}} is generated markdown: pass its numbers, or join texts")
    if isinstance(value, str):
        return format(value, spec) if spec else value
    raise UsageError(
        f"md(): {{{name}}} is a {type(value).__name__}, not a generated number: pass "
        f"{name}=rgt.num('<run>:<key>') so the number carries where it came from"
    )


def _number(resolved: Resolved, fmt: str | None) -> GeneratedNumber:
    value = resolved.value
    where = f"{resolved.ref!r} ({resolved.results_json})"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, Mapping):
            raise UsageError(
                f"{where} is a mapping, not a number: name one of its keys: "
                + ", ".join(f"{resolved.key}.{k}" for k in value)
            )
        raise UsageError(f"{where} is {value!r} ({type(value).__name__}), not a number")
    return GeneratedNumber(
        value=value,
        text=_format(value, fmt, resolved.ref),
        ref=resolved.ref,
        run_id=resolved.run_id,
        results_json=resolved.results_json,
        sha256=resolved.sha256,
        key=resolved.key,
        fmt=fmt,
        claim_id=resolved.claim_id,
    )


def _format(value: Any, fmt: str | None, ref: str) -> str:
    if fmt is None:
        return repr(value)
    try:
        return format(value, fmt)
    except (ValueError, TypeError) as exc:
        raise UsageError(
            f"{ref!r}: format {fmt!r} does not apply to {value!r} ({exc}); use a spec such as "
            "'.2f', '.1%' or '.3g'"
        ) from exc


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
    from ..group import JobGroup

    group = JobGroup.find(source, project)
    if group is None:
        return
    names = ", ".join(j.name for j in group.jobs)
    raise UsageError(
        f"{source!r} is a seed group ({names}): a generated number comes from one run. Name the "
        f"run of one seed (e.g. '{group.jobs[0].name}:<key>'), or report each seed's number"
    )


def _resolve_claim(ref: str, project: Path) -> Resolved:
    from .evidence import claim_row

    if not _CLAIM.match(ref):
        raise UsageError(
            f"reference {ref!r}: write <run id, run folder or job>:<key.path>, or a claim id of "
            "EVIDENCE.json ('C1', or 'C1#k' for its row k)"
        )
    row = claim_row(ref, project)
    run, key = row.row.get("run"), row.row.get("key")
    if not isinstance(run, str) or not isinstance(key, str) or not run or not key:
        raise UsageError(
            f"EVIDENCE.json {row.claim_id}#{row.index} has no run and key: set both "
            "(e.g. with rgt_jupyter.deliver.evidence.add_claim)"
        )
    resolved = resolve(f"{run}:{key}", project)
    recorded = row.row.get("results_sha256")
    if recorded and recorded != resolved.sha256:
        warnings.warn(
            f"EVIDENCE.json {row.claim_id}#{row.index} was recorded from other bytes of "
            f"{resolved.results_json} (sha256 {str(recorded)[:12]}, now {resolved.sha256[:12]}): "
            "the number shown is the current one; run `rgt evidence` to update EVIDENCE.json",
            stacklevel=3,
        )
    return dataclasses.replace(resolved, ref=ref, claim_id=row.claim_id, claim_row=row.index)
