"""``EVIDENCE.json`` at the project root: the claims and the run values that back each of them.

Schema 1.0 (plain JSON)::

    {"project", "authoritative_source", "schema_version": "1.0",
     "claims": [{"id", "statement", "paper_anchor", "repo_implementation", "disclosure",
                 "evidence": [{"run", "key", "metric", "direction", "split", "n", "value",
                               "results_json", "results_sha256", "figure"?}]}]}

``run`` is the resolved run id and ``key`` the dotted path into its ``results.json``; ``value``,
``results_json`` and ``results_sha256`` are copies that :func:`sync` refreshes from the run.
Values are stored at full precision. Every write replaces the file atomically.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..store.fsutil import atomic_write_bytes
from ..store.project import project_dir
from .refs import CLAIM_REF, Results, resolve, split_ref

SCHEMA_VERSION = "1.0"
FILENAME = "EVIDENCE.json"
_SPLITS = ("train", "val", "validation", "dev", "test")
_ROW_FIELDS = ("metric", "direction", "split", "n", "figure")


@dataclass(frozen=True)
class ClaimRow:
    """Evidence row ``index`` of claim ``claim_id`` (``claim`` and ``row`` as stored)."""

    claim_id: str
    index: int
    claim: dict[str, Any]
    row: dict[str, Any]


@dataclass(frozen=True)
class Change:
    """What :func:`sync` did to one evidence row: ``fields`` maps each updated field to
    ``(old, new)``; ``error`` says why the row could not be resolved (it is kept as it was)."""

    claim_id: str
    index: int
    ref: str
    fields: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    error: str | None = None

    def __str__(self) -> str:
        head = f"{self.claim_id}#{self.index} {self.ref}"
        if self.error is not None:
            return f"{head}: does not resolve, row kept as it was: {self.error}"
        parts = [
            f"{name} {_short(old)} -> {_short(new)}" for name, (old, new) in self.fields.items()
        ]
        return f"{head}: " + "; ".join(parts)


def evidence_path(project: str | os.PathLike[str] | Path | None = None) -> Path:
    """``<project>/EVIDENCE.json``."""
    return project_dir(project) / FILENAME


def stub(project: str | os.PathLike[str] | Path | None = None) -> dict[str, Any]:
    """An EVIDENCE document with no claims."""
    return {
        "project": project_dir(project).name,
        "authoritative_source": "runs/<run-id>/results.json",
        "schema_version": SCHEMA_VERSION,
        "claims": [],
    }


def load(project: str | os.PathLike[str] | Path | None = None) -> dict[str, Any]:
    """The project's EVIDENCE document, checked against schema 1.0."""
    path = evidence_path(project)
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise UsageError(
            f"no {FILENAME} in {path.parent}: add a claim with "
            "rgt_jupyter.deliver.evidence.add_claim(...)"
        ) from None
    except ValueError as exc:
        raise UsageError(f"{path} is not valid JSON ({exc}): fix it by hand") from exc
    _check(data, path)
    document: dict[str, Any] = data
    return document


def save(data: Mapping[str, Any], project: str | os.PathLike[str] | Path | None = None) -> Path:
    """Write ``data`` as EVIDENCE.json (atomically: readers see the old file or the new)."""
    path = evidence_path(project)
    _check(data, path)
    try:
        text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:
        raise UsageError(f"{FILENAME} holds plain JSON only: {exc} (NaN or infinity)") from exc
    atomic_write_bytes(path, (text + "\n").encode())
    return path


def claim_row(claim_ref: str, project: str | os.PathLike[str] | Path | None = None) -> ClaimRow:
    """The evidence row ``claim_ref`` names: ``"C1"`` (its first row) or ``"C1#k"`` (row k)."""
    claim_id, index = _parse_claim_ref(claim_ref)
    path = evidence_path(project)
    if not path.exists():
        raise UsageError(
            f"{claim_ref!r} is neither <run>:<key.path> nor a claim id: there is no {FILENAME} "
            f"in {path.parent} (add claims with rgt_jupyter.deliver.evidence.add_claim)"
        )
    data = load(project)
    claims = {str(c.get("id")): c for c in data["claims"]}
    claim = claims.get(claim_id)
    if claim is None:
        raise UsageError(
            f"{claim_ref!r} is neither <run>:<key.path> nor a claim of {path}; its claims are: "
            + (", ".join(claims) or "(none)")
        )
    rows = claim["evidence"]
    if not 0 <= index < len(rows):
        raise UsageError(
            f"claim {claim_id} has {len(rows)} evidence row(s): use {claim_id}#0"
            + (f" to {claim_id}#{len(rows) - 1}" if len(rows) > 1 else "")
        )
    return ClaimRow(claim_id, index, claim, rows[index])


def add_claim(
    claim_id: str,
    statement: str,
    evidence: Sequence[str | Mapping[str, Any]],
    *,
    paper_anchor: str | None = None,
    repo_implementation: str | None = None,
    disclosure: str | None = None,
    replace: bool = False,
    project: str | os.PathLike[str] | Path | None = None,
) -> dict[str, Any]:
    """Add claim ``claim_id`` and return it as stored.

    Each item of ``evidence`` is a reference ``"<run>:<key.path>"`` or a mapping with ``ref``
    and any of ``metric``, ``direction``, ``split``, ``n``, ``figure``; what is not given is
    read next to the value (``n``, ``direction``, ``split`` beside it, the metric from the key).
    The row records the resolved run id, so a later pull does not change what it names."""
    if not CLAIM_REF.match(claim_id) or "#" in claim_id:
        raise UsageError(f"claim id {claim_id!r}: use letters, digits, '-', '_' (e.g. 'C1')")
    if not evidence:
        raise UsageError(f"claim {claim_id}: name at least one '<run>:<key.path>' as evidence")
    proj = project_dir(project)
    data = load(proj) if evidence_path(proj).exists() else stub(proj)
    rows = [_row(item, proj) for item in evidence]
    existing = [i for i, c in enumerate(data["claims"]) if c.get("id") == claim_id]
    if existing and not replace:
        raise UsageError(f"claim {claim_id} is already in {FILENAME}: pass replace=True")
    claim = {
        "id": claim_id,
        "statement": statement,
        "evidence": rows,
        "paper_anchor": paper_anchor,
        "repo_implementation": repo_implementation,
        "disclosure": disclosure,
    }
    if existing:
        data["claims"][existing[0]] = claim
    else:
        data["claims"].append(claim)
    save(data, proj)
    return claim


def sync(project: str | os.PathLike[str] | Path | None = None, write: bool = True) -> list[Change]:
    """Re-resolve every evidence row's ``run:key``; refresh ``value``, ``results_json`` and
    ``results_sha256`` where they changed (and write EVIDENCE.json when ``write``). Returns a
    :class:`Change` per updated row and per row that no longer resolves (kept as it was)."""
    proj = project_dir(project)
    data = load(proj)
    changes: list[Change] = []
    for claim in data["claims"]:
        for index, row in enumerate(claim["evidence"]):
            ref = f"{row.get('run')}:{row.get('key')}"
            claim_id = str(claim.get("id"))
            if not row.get("run") or not row.get("key"):
                changes.append(Change(claim_id, index, ref, error="the row has no run or key"))
                continue
            try:
                resolved = resolve(ref, proj)
                _check_value(resolved.value, ref)
            except UsageError as exc:
                changes.append(Change(claim_id, index, ref, error=str(exc)))
                continue
            new = {
                "value": resolved.value,
                "results_json": resolved.results_json,
                "results_sha256": resolved.sha256,
            }
            fields = {k: (row.get(k), v) for k, v in new.items() if _differs(row.get(k), v)}
            if fields:
                row.update(new)
                changes.append(Change(claim_id, index, ref, fields))
    if write and any(c.fields for c in changes):
        save(data, proj)
    return changes


# -- helpers


def _parse_claim_ref(ref: str) -> tuple[str, int]:
    claim_id, sep, index = ref.strip().rpartition("#")
    if sep and index.isdigit() and claim_id:
        return claim_id, int(index)
    return ref.strip(), 0


def _check(data: Any, path: Path) -> None:
    if not isinstance(data, Mapping):
        raise UsageError(f"{path}: the top level must be a JSON object")
    if "schema_version" not in data and "schema" in data:
        raise UsageError(f"{path}: rename the key 'schema' to 'schema_version'")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise UsageError(
            f"{path}: schema_version is {data.get('schema_version')!r}; this rgt reads "
            f"{SCHEMA_VERSION!r}"
        )
    claims = data.get("claims")
    if not isinstance(claims, list):
        raise UsageError(f"{path}: 'claims' must be a list")
    for i, claim in enumerate(claims):
        if not isinstance(claim, Mapping) or not isinstance(claim.get("id"), str):
            raise UsageError(f"{path}: claim {i} has no string 'id'")
        rows = claim.get("evidence")
        if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
            raise UsageError(f"{path}: claim {claim['id']}: 'evidence' must be a list of objects")


def _check_value(value: Any, ref: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{ref} is {value!r}, not a number: point the row at a numeric key")
    if not math.isfinite(value):
        raise UsageError(f"{ref} is {value!r}: {FILENAME} holds finite numbers only")


def _row(item: str | Mapping[str, Any], project: Path) -> dict[str, Any]:
    given: dict[str, Any] = {"ref": item} if isinstance(item, str) else dict(item)
    ref = given.get("ref")
    if not isinstance(ref, str):
        raise UsageError(f"evidence {item!r}: give 'ref': '<run>:<key.path>'")
    unknown = set(given) - {"ref", *_ROW_FIELDS}
    if unknown:
        raise UsageError(f"evidence {ref}: unknown fields {sorted(unknown)}; use {_ROW_FIELDS}")
    source, key = split_ref(ref)
    run = Results.of(source, project)
    resolved = run.resolved(key)
    _check_value(resolved.value, ref)
    _, parts, parent = run.located(key)
    found = _described(parts, parent, run.run_dir)
    row: dict[str, Any] = {"run": resolved.run_id, "key": key}
    for name in ("metric", "direction", "split", "n"):
        row[name] = given.get(name, found.get(name))
    row.update(
        value=resolved.value,
        results_json=resolved.results_json,
        results_sha256=resolved.sha256,
    )
    if "figure" in given:
        row["figure"] = given["figure"]
    return row


def _described(parts: list[str], parent: Any, run_dir: Path) -> dict[str, Any]:
    """metric, split, direction and n as results.json (``parts``: the keys walked to the value,
    ``parent``: what holds it) and the run's declared metric tell them."""
    found: dict[str, Any] = {}
    if isinstance(parent, Mapping):
        if isinstance(parent.get("n"), int) and not isinstance(parent.get("n"), bool):
            found["n"] = parent["n"]
        if parent.get("direction") in ("max", "min"):
            found["direction"] = parent["direction"]
        if isinstance(parent.get("split"), str):
            found["split"] = parent["split"]
    splits = [p for p in parts if p in _SPLITS]
    if splits and "split" not in found:
        found["split"] = splits[-1]
    names = [p for p in parts if p not in _SPLITS and p not in ("metrics", "value", "mean")]
    if parts[0] == "metrics" and len(parts) > 1:
        found["metric"] = parts[1]
    elif names:
        found["metric"] = names[-1]
    declared = _json_or_none(run_dir / "outputs" / "verify" / "metric.json")
    if isinstance(declared, Mapping) and declared.get("name") == found.get("metric"):
        if declared.get("direction") in ("max", "min"):
            found.setdefault("direction", declared["direction"])
        if isinstance(declared.get("split"), str):
            found.setdefault("split", declared["split"])
    return found


def _json_or_none(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def _differs(old: Any, new: Any) -> bool:
    return json.dumps(old, sort_keys=True, default=str) != json.dumps(new, sort_keys=True)


def _short(value: Any) -> str:
    if isinstance(value, str) and len(value) == 64:
        return value[:12]
    return repr(value)
