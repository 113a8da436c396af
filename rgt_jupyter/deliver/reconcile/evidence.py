"""EVIDENCE.json for ``rgt reconcile``: one entry per evidence row with a numeric ``value``, its
authority read from the row's results.json when that file exists (a differing copy is a drift)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .report import Log, ReconcileError, fmt

#: The words that name each evaluation split.
SPLIT_TERMS = {
    "val": ("val", "validation", "valid", "dev"),
    "valid": ("val", "validation", "valid", "dev"),
    "validation": ("val", "validation", "valid", "dev"),
    "dev": ("val", "validation", "valid", "dev"),
    "test": ("test", "testing"),
    "train": ("train", "training"),
}
_GENERIC = {
    "val", "valid", "validation", "dev", "test", "testing", "train", "training", "mean", "avg",
    "average", "best", "final", "overall", "score", "metric", "value", "the", "of",
}  # fmt: skip


@dataclass(frozen=True)
class Entry:
    """One authoritative scalar: evidence row ``row`` of claim ``claim_id``, with the terms that
    anchor it in a document (metric, aliases, ids, qualifiers, split words)."""

    index: int
    claim_id: str
    row: int
    metric: str
    value: float
    shown: float | int  # the authority as stored (int stays int)
    metric_terms: frozenset[str]
    alias_terms: frozenset[str]
    id_terms: frozenset[str]
    qualifier_terms: frozenset[str]
    split: str | None
    split_terms: frozenset[str]
    n: int | None
    variance: float | None

    @property
    def anchor_terms(self) -> frozenset[str]:
        """The terms that anchor a number to this entry: its metric and its aliases."""
        return self.metric_terms | self.alias_terms

    @property
    def method_terms(self) -> frozenset[str]:
        """The terms that name the method: its aliases and ids."""
        return self.alias_terms | self.id_terms

    @property
    def group(self) -> tuple[str, str | None]:
        """(metric, split): entries of one group may be differenced."""
        return (self.metric.lower(), self.split)


def term(text: str) -> str:
    """``text`` as a term: lower case, runs of white space as one space."""
    return " ".join(text.lower().split())


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        out = float(value)
    elif isinstance(value, str):
        try:
            out = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return out if math.isfinite(out) else None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def _metric_terms(metric: str) -> tuple[set[str], set[str]]:
    """The anchor terms of a metric key (itself, with ``_`` as spaces, its first word that is not
    generic) and its other words, which tell two metrics with one head apart."""
    words = [w for w in re.split(r"[_\-./\s]+", metric.lower()) if w]
    named = [w for w in words if re.search(r"[a-z]", w) and w not in _GENERIC]
    terms = {term(metric), term(metric.replace("_", " "))}
    if named:
        terms.add(named[0])
    qualifiers = {w for w in named[1:] if len(w) >= 2}
    return terms, qualifiers - terms


def _dig(data: Any, key: str) -> tuple[bool, Any]:
    node = data
    for part in key.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    if isinstance(node, dict) and "value" in node:
        node = node["value"]
    return True, node


def _json_positions(text: str) -> dict[tuple[int, int], int]:
    """(claim index, row index) -> offset of the row's ``"value"`` key (or of the row) in the
    EVIDENCE text, for line numbers of EVIDENCE drifts."""
    out: dict[tuple[int, int], int] = {}
    decoder = json.JSONDecoder()

    def items(start: int) -> Iterator[tuple[int, int]]:
        pos = start + 1
        while True:
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            if pos >= len(text) or text[pos] == "]":
                return
            _, end = decoder.raw_decode(text, pos)
            yield pos, end
            pos = end

    def key_at(start: int, end: int, key: str) -> int | None:
        depth = 0
        pos = start
        in_str = False
        while pos < end:
            ch = text[pos]
            if in_str:
                if ch == "\\":
                    pos += 1
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                if depth == 1 and re.match(rf'"{re.escape(key)}"\s*:', text[pos:end]):
                    return pos
                in_str = True
            elif ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
            pos += 1
        return None

    try:
        top = text.index("{")
        claims_key = key_at(top, len(text), "claims")
        if claims_key is None:
            return out
        arr = text.index("[", claims_key)
        for ci, (cs, ce) in enumerate(items(arr)):
            ev = key_at(cs, ce, "evidence")
            if ev is None:
                continue
            for ri, (rs, re_) in enumerate(items(text.index("[", ev))):
                value_pos = key_at(rs, re_, "value")
                out[(ci, ri)] = value_pos if value_pos is not None else rs
    except ValueError:
        pass
    return out


def _line_at(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def load_evidence(path: Path, project: Path, display: str, log: Log) -> list[Entry]:
    """The entries of EVIDENCE.json at ``path`` (named ``display``); each row's comparison with
    its results.json lands in ``log``. Raises :class:`.ReconcileError` when it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReconcileError(
            f"cannot read {display}: {exc.strerror or exc}; pass --evidence"
        ) from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ReconcileError(f"{display} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("claims"), list):
        raise ReconcileError(f"{display} has no 'claims' list (schema: {{project, claims: [...]}})")
    positions = _json_positions(text)
    entries: list[Entry] = []
    for ci, claim in enumerate(data["claims"]):
        if not isinstance(claim, dict):
            continue
        claim_id = str(claim.get("id", f"claim-{ci + 1}"))
        rows = claim.get("evidence")
        for ri, row in enumerate(rows if isinstance(rows, list) else []):
            if not isinstance(row, dict):
                continue
            metric = row.get("metric") or claim.get("metric")
            value = _number(row.get("value"))
            if value is None or not isinstance(metric, str) or not metric.strip():
                continue
            where = (display, _line_at(text, positions.get((ci, ri), 0)), claim_id)
            raw = row["value"]
            shown = raw if isinstance(raw, (int, float)) else value
            shown = _authority(row, metric, shown, (path.parent, project), where, log)
            entries.append(_entry(len(entries), claim, claim_id, ri, row, metric, shown))
    return entries


def _authority(
    row: dict[str, Any],
    metric: str,
    shown: float | int,
    bases: tuple[Path, Path],
    where: tuple[str, int, str | None],
    log: Log,
) -> float | int:
    """The value of the row's results.json at ``key`` when that file exists (recording a drift
    when EVIDENCE's copy, or the recorded sha256, differs from it), else EVIDENCE's value."""
    rel, key = row.get("results_json"), row.get("key")
    if not isinstance(rel, str) or not rel or not isinstance(key, str) or not key:
        return shown
    given = Path(rel).expanduser()
    found = next((b / given for b in bases if (b / given).is_file()), None)
    if found is None:
        return shown
    try:
        raw = found.read_bytes()
        ok, leaf = _dig(json.loads(raw), key)
    except (OSError, ValueError):
        raw, ok, leaf = b"", False, None
    recorded = row.get("results_sha256")
    actual = hashlib.sha256(raw).hexdigest()
    if isinstance(recorded, str) and recorded.removeprefix("sha256:") != actual:
        context = f"EVIDENCE.results_sha256 != sha256({rel})"
        label = f"{metric} (results_sha256)"
        log.record(where, label, recorded[:16], actual[:16], "drift", context, "results_sha256")
    context = f"EVIDENCE.value != results.json ({rel}:{key})"
    leaf_value = _number(leaf) if ok else None
    if leaf_value is None:
        missing = f"(no number at '{key}' in {rel})"
        log.record(where, metric, fmt(shown), missing, "drift", context, "evidence")
        return shown
    authority = leaf if isinstance(leaf, (int, float)) else leaf_value
    status = "match" if leaf_value == float(shown) else "drift"
    log.record(where, metric, fmt(shown), authority, status, context, "evidence")
    return authority


def _entry(
    index: int,
    claim: dict[str, Any],
    claim_id: str,
    row_index: int,
    row: dict[str, Any],
    metric: str,
    shown: float | int,
) -> Entry:
    metric_terms, qualifiers = _metric_terms(metric)
    aliases = {term(a) for a in _strings(claim.get("aliases")) + _strings(row.get("aliases"))}
    ids = {term(claim_id)} | {
        term(row[k])
        for k in ("exp_id", "run")
        if isinstance(row.get(k), str) and row[k] != "selected"
    }
    split = row["split"].lower() if isinstance(row.get("split"), str) else None
    variance = row.get("variance")
    n = row.get("n")
    return Entry(
        index=index,
        claim_id=claim_id,
        row=row_index,
        metric=metric,
        value=float(shown),
        shown=shown,
        metric_terms=frozenset(t for t in metric_terms if t),
        alias_terms=frozenset(a for a in aliases if a),
        id_terms=frozenset(i for i in ids if i),
        qualifier_terms=frozenset(qualifiers),
        split=split,
        split_terms=frozenset(SPLIT_TERMS.get(split, (split,))) if split else frozenset(),
        n=n if isinstance(n, int) and not isinstance(n, bool) else None,
        variance=_number(variance.get("value") if isinstance(variance, dict) else variance),
    )
