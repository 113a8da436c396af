"""Numbers generated from a run's ``results.json``, each carrying where it came from.

``num("baseline:test.accuracy", ".1%")`` reads the newest pulled run of job ``baseline``, hashes
the exact bytes of its ``results.json``, walks the dotted key and formats the raw value; the
:class:`GeneratedNumber` it returns shows as that text and carries its source in the output's
metadata. :func:`results` gives one run's results as a read-only mapping, and :func:`md` fills a
markdown template with such numbers (see :mod:`rgt_jupyter.deliver` for the reference syntax).
A run reference is resolved by :mod:`.refs`, a claim id through EVIDENCE.json (:mod:`.evidence`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..store.project import project_dir
from . import refs
from .evidence import claim_row
from .refs import CLAIM_REF, Resolved

#: A markdown placeholder ``{{rgt:<ref>|<fmt>}}`` (``|<fmt>`` optional); groups ``ref``, ``fmt``.
PLACEHOLDER = re.compile(r"\{\{\s*rgt:(?P<ref>[^{}|]+?)\s*(?:\|(?P<fmt>[^{}]*))?\}\}")

#: A ``{name}`` or ``{name:spec}`` field of an :func:`md` template.
_FIELD = re.compile(r"\{(?P<name>[A-Za-z_]\w*)(?::(?P<spec>[^{}]*))?\}")


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


class Results(refs.Results):
    """One run's ``results.json`` as read once (:class:`rgt_jupyter.deliver.refs.Results`: a
    read-only mapping), with :meth:`num` giving :class:`GeneratedNumber` s from those bytes."""

    def num(self, key: str, fmt: str | None = None) -> GeneratedNumber:
        """The number at ``key``, formatted with ``fmt``."""
        return _number(self.resolved(key), fmt)


# -- public functions


def resolve(ref: str, project: str | os.PathLike[str] | Path | None = None) -> Resolved:
    """Resolve ``"<source>:<key.path>"`` or a claim id (``"C1"``, ``"C1#k"``) of EVIDENCE.json.

    The source is a run folder, a run id or a job id/name (its newest pulled run); a seed group
    is refused. Raises :class:`UsageError` saying what to do instead."""
    ref = ref.strip()
    if ":" not in ref:
        return _resolve_claim(ref, project_dir(project))
    return refs.resolve(ref, project)


def num(
    ref: str, fmt: str | None = None, project: str | os.PathLike[str] | Path | None = None
) -> GeneratedNumber:
    """The number ``ref`` names, formatted with ``fmt`` (a format spec such as ``".2f"``,
    ``".1%"``, ``".3g"``; None shows the raw value's repr)."""
    return _number(resolve(ref, project), fmt)


def results(run: str, project: str | os.PathLike[str] | Path | None = None) -> Results:
    """The ``results.json`` of the run ``run`` names (run id, run folder, or job)."""
    return Results.of(run, project)


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


def _resolve_claim(ref: str, project: Path) -> Resolved:
    if not CLAIM_REF.match(ref):
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
