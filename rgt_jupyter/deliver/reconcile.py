"""``rgt reconcile PATH... [--evidence E] [--json]``: every copy of an EVIDENCE number in a
README, a paper or notes agrees with the number itself.

EVIDENCE.json gives one authoritative scalar per evidence row with a numeric ``value``; when the
row's ``results_json`` exists, that file's value at ``key`` is the authority, and an EVIDENCE copy
that differs from it is itself a drift. Markdown, LaTeX and plain-text files are scanned for metric
anchors (a metric name or an alias, as whole words) and for the numbers on either side of them in
the same sentence, and for Markdown and LaTeX tables whose header (or row label) names a metric.
A number passes when it equals the authority at the decimals it shows (half-up or half-even), as a
percent of a fraction (``87.3%`` for 0.873), or as the difference of two entries of one metric
and split. ``a ± b`` is a value and its uncertainty, ``n=100`` a sample count; both are compared
with the row the value belongs to. Method aliases, ``exp_id`` and run names pick that row when
several claims share a metric.

Left alone, and listed as ignored: table/figure/section references, years, versions, dates,
identifiers (``ResNet-50``, ``Set5``, ``AP@0.5``), counts of other things (``300 epochs``), code,
URLs, ``{{rgt:...}}`` placeholders, lines marked ``<!-- rgt:ignore -->`` or ``% rgt:ignore``,
numbers on a split EVIDENCE does not hold, and table rows naming no EVIDENCE method once another
row of the table names one. Numbers written as words ("three seeds") are not read. A prior work's
number quoted in a sentence beside a metric name matches nothing and is reported; mark the line.

Output: ``Reconciled N doc(s) against M authoritative scalar(s) in E.``, then ``No drift.`` (exit
0) or one ``doc:line  metric 'm': reported R != authoritative A`` block per drift (exit 1); a load
or usage error exits 2.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import itertools
import json
import math
import os
import re
import sys
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import RgtError, UsageError
from ..project import project_dir

DOC_SUFFIXES = (".md", ".markdown", ".tex", ".txt", ".rst")
_SKIP_DIRS = frozenset({"runs", "results", "checkpoints", "node_modules", "__pycache__", "venv"})
_TIGHT = 40  # characters between a number and its anchor within which integers are checked too
_CONTEXT = 120


class ReconcileError(UsageError):
    """EVIDENCE.json or a document could not be read, or the command was used wrongly."""


# ---------------------------------------------------------------------------------------------
# Report


def _fmt(value: float | int | str | None) -> str:
    if value is None:
        return "(missing)"
    return repr(value) if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Drift:
    """One copy of a number that disagrees with its authority."""

    doc: str
    line: int
    metric: str
    reported: str
    authoritative: float | int | str | None
    claim_id: str | None
    context: str
    kind: str = "value"

    def text(self) -> str:
        """The two-line block of the text report."""
        head = (
            f"{self.doc}:{self.line}  metric '{self.metric}': reported {self.reported} "
            f"!= authoritative {_fmt(self.authoritative)}"
        )
        return f"{head}\n  context: {self.context}"

    def to_dict(self) -> dict[str, Any]:
        """The fields, for JSON."""
        return asdict(self)


@dataclass(frozen=True)
class Checked:
    """One number compared with an authority; ``status`` is ``match``, ``ambiguous`` (several
    rows were possible and one matched), ``derived`` (a difference of two entries), ``other
    metric`` (it equals another metric named beside it) or ``drift``."""

    doc: str
    line: int
    metric: str
    reported: str
    authoritative: float | int | str | None
    claim_id: str | None
    status: str
    kind: str = "value"
    transform: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields, for JSON."""
        return asdict(self)


@dataclass(frozen=True)
class Ignored:
    """A number beside a metric anchor that is not read as a value, with the reason."""

    doc: str
    line: int
    text: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """The fields, for JSON."""
        return asdict(self)


@dataclass
class ReconcileReport:
    """The outcome of :func:`reconcile`: drifts, every number compared, and the ignored ones."""

    evidence: str
    docs: list[str]
    scalars: int
    drifts: list[Drift] = field(default_factory=list)
    checked: list[Checked] = field(default_factory=list)
    ignored: list[Ignored] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing drifted."""
        return not self.drifts

    @property
    def exit_code(self) -> int:
        """0 when clean, 1 when anything drifted."""
        return 0 if self.ok else 1

    def text(self) -> str:
        """The report in the original reconcile.py's text form."""
        lines = [
            f"Reconciled {len(self.docs)} doc(s) against {self.scalars} authoritative "
            f"scalar(s) in {self.evidence}."
        ]
        if self.ok:
            lines.append("No drift.")
        lines.extend(d.text() for d in self.drifts)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "evidence": self.evidence,
            "docs": list(self.docs),
            "scalars": self.scalars,
            "drifts": [d.to_dict() for d in self.drifts],
            "checked": [c.to_dict() for c in self.checked],
            "ignored": [i.to_dict() for i in self.ignored],
        }

    def __repr__(self) -> str:
        return self.text()


class _Log:
    """Collects what a scan compared, what drifted and what it left alone."""

    def __init__(self) -> None:
        self.drifts: list[Drift] = []
        self.checked: list[Checked] = []
        self.ignored: list[Ignored] = []

    def record(
        self,
        where: tuple[str, int, str | None],
        metric: str,
        reported: str,
        authority: float | int | str | None,
        status: str,
        context: str,
        kind: str = "value",
        transform: str | None = None,
    ) -> None:
        """One comparison at ``where`` (doc, line, claim id); a ``drift`` is also a Drift."""
        doc, line, claim = where
        self.checked.append(
            Checked(doc, line, metric, reported, authority, claim, status, kind, transform)
        )
        if status == "drift":
            self.drifts.append(Drift(doc, line, metric, reported, authority, claim, context, kind))


# ---------------------------------------------------------------------------------------------
# EVIDENCE.json

_SPLIT_TERMS = {
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


_SPLIT_WORDS = re.compile(
    r"(?<![A-Za-z0-9_])(val|validation|dev|test|testing)(?![A-Za-z0-9_])", re.I
)


_SPLIT_CANON = {"valid": "val", "validation": "val", "dev": "val", "testing": "test"}


def _splits(text: str) -> set[str]:
    """The evaluation splits a sentence or table header names (``val`` or ``test``)."""
    return {
        "test" if m.group(1).lower().startswith("test") else "val"
        for m in _SPLIT_WORDS.finditer(text)
    }


@dataclass(frozen=True)
class _Entry:
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
        return self.metric_terms | self.alias_terms

    @property
    def method_terms(self) -> frozenset[str]:
        return self.alias_terms | self.id_terms

    @property
    def group(self) -> tuple[str, str | None]:
        return (self.metric.lower(), self.split)


def _term(text: str) -> str:
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
    terms = {_term(metric), _term(metric.replace("_", " "))}
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


def _load_evidence(path: Path, project: Path, display: str, log: _Log) -> list[_Entry]:
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
    entries: list[_Entry] = []
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
    log: _Log,
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
        log.record(where, metric, _fmt(shown), missing, "drift", context, "evidence")
        return shown
    authority = leaf if isinstance(leaf, (int, float)) else leaf_value
    status = "match" if leaf_value == float(shown) else "drift"
    log.record(where, metric, _fmt(shown), authority, status, context, "evidence")
    return authority


def _entry(
    index: int,
    claim: dict[str, Any],
    claim_id: str,
    row_index: int,
    row: dict[str, Any],
    metric: str,
    shown: float | int,
) -> _Entry:
    metric_terms, qualifiers = _metric_terms(metric)
    aliases = {_term(a) for a in _strings(claim.get("aliases")) + _strings(row.get("aliases"))}
    ids = {_term(claim_id)} | {
        _term(row[k])
        for k in ("exp_id", "run")
        if isinstance(row.get(k), str) and row[k] != "selected"
    }
    split = row["split"].lower() if isinstance(row.get("split"), str) else None
    variance = row.get("variance")
    n = row.get("n")
    return _Entry(
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
        split_terms=frozenset(_SPLIT_TERMS.get(split, (split,))) if split else frozenset(),
        n=n if isinstance(n, int) and not isinstance(n, bool) else None,
        variance=_number(variance.get("value") if isinstance(variance, dict) else variance),
    )


# ---------------------------------------------------------------------------------------------
# Numbers

_NUM = re.compile(r"[+-]?(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+)(?:[eE][+-]?\d+)?")
_UNITS = {"db", "ms", "s", "sec", "px", "pp", "dbs", "points", "pts"}
_FUNCTION_WORDS = {
    "on", "in", "at", "for", "and", "or", "vs", "versus", "with", "while", "to", "from", "of",
    "than", "by", "over", "compared", "against", "the", "a", "an", "is", "are", "was", "were",
    "which", "that", "when", "as", "but", "after", "under", "across", "respectively", "higher",
    "lower", "better", "worse", "mean", "average", "overall", "only", "also", "i", "e",
}  # fmt: skip
_OTHER_QUANTITY = {
    "hours", "hour", "hrs", "hr", "h", "days", "day", "minutes", "minute", "mins", "min", "weeks",
    "epochs", "epoch", "steps", "step", "iterations", "iteration", "iters", "iter", "samples",
    "images", "examples", "params", "parameters", "layers", "gpus", "gpu", "seeds", "seed",
    "runs", "times", "heads", "tokens", "batches", "nodes", "cores", "classes", "frames",
    "folds", "k", "m", "b", "g", "gb", "mb", "kb", "tb", "million", "billion", "thousand", "x",
    "flops", "gflops", "tflops", "bytes", "bits",
}  # fmt: skip
_STRUCT = re.compile(
    r"(?:^|[^A-Za-z])(?:tables?|tab|figs?|figures?|sec|sections?|§|eqs?|equations?|appendix|app"
    r"|steps?|chapters?|ch|lines?|alg|algorithms?|rows?|columns?|cols?|stages?|phases?|parts?"
    r"|theorems?|lemmas?|defs?|definitions?|props?|propositions?|exps?|experiments?|versions?"
    r"|ver|python|torch|pytorch|cuda|cudnn|numpy|jax|tensorflow|epochs?|iterations?|iters?"
    r"|layers?|items?|no|seeds?|rank|batch|gpus?|ids?|#)\.?\s*$",
    re.I,
)
_KEY_EQ = re.compile(r"(?:^|[^\w.])([^\W\d][\w.\-]*)\s*=\s*$")
_N_KEY = re.compile(r"(?:^|[^\w])[nN]\s*[=:]\s*$")
_STD_KEY = re.compile(r"(?:^|[^\w])(?:std|sd|stdev|sigma|σ)\s*[=:]?\s*$", re.I)


@dataclass
class _Tok:
    start: int
    end: int
    text: str
    mantissa: Decimal
    decimals: int
    exp: int
    factor: int = 1  # 100 after %, 1000 after ‰
    role: str = "value"  # value | uncertainty | n | ignored
    reason: str = ""
    attached: list[_Tok] = field(default_factory=list)

    @property
    def int_like(self) -> bool:
        return self.decimals == 0 and self.exp == 0

    @property
    def shown(self) -> float:
        return float(self.mantissa) * 10.0**self.exp

    @property
    def sig_digits(self) -> int:
        digits = self.mantissa.as_tuple().digits
        return len("".join(map(str, digits)).lstrip("0")) or 1

    def matches(self, target: float, *, absolute: bool = False) -> bool:
        """True when ``target`` shows as this text at its decimals (half-up or half-even)."""
        shown = abs(self.shown) if absolute else self.shown
        tol = 0.5 * 10.0 ** (self.exp - self.decimals) + 1e-9 * max(1.0, abs(target))
        return abs(shown - target) <= tol


def _tokens(text: str, anchor_words: frozenset[str]) -> list[_Tok]:
    """Every number of ``text`` with its role; ``ignored`` ones carry the reason."""
    out: list[_Tok] = []
    for m in _NUM.finditer(text):
        start, end, raw = m.start(), m.end(), m.group()
        before = text[start - 1] if start > 0 else " "
        glued = raw[0] in "+-" and not (before.isspace() or before in "([=:,/±")
        if glued:  # a hyphen or a plus inside a word, not a sign
            start, raw = start + 1, raw[1:]
        body = raw.lstrip("+-")
        mant, _, exp_text = body.replace(",", "").lower().partition("e")
        try:
            mantissa = Decimal(("-" if raw.startswith("-") else "") + mant)
        except InvalidOperation:
            continue
        tok = _Tok(start, end, raw, mantissa, len(mant.partition(".")[2]), int(exp_text or 0))
        prefix, rest = text[max(0, start - 80) : start], text[end : end + 80]
        pre1 = text[start - 1] if start > 0 else " "
        if glued:
            range_end = before.isdigit() and text[start - 1] == "-"
            tok.role, tok.reason = "ignored", "range" if range_end else "identifier"
        elif pre1.isalnum() or pre1 in "_.@#^'\\":
            tok.role, tok.reason = "ignored", "identifier"
        elif pre1 == "×":
            tok.role, tok.reason = "ignored", "scale factor"
        elif re.match(r"\.\d", rest):
            tok.role, tok.reason = "ignored", "version"
        elif re.match(r"(?:-|\s*–\s*)\d", rest):
            tok.role, tok.reason = "ignored", "range"
        suffix = re.match(r"\s?(%|‰)|([A-Za-z]+)|\s*×", rest)
        if tok.role == "value" and suffix:
            if suffix.group(1) == "%":
                tok.factor, tok.end = 100, end + suffix.end()
                tok.text += "%"
            elif suffix.group(1) == "‰":
                tok.factor, tok.end = 1000, end + suffix.end()
                tok.text += "‰"
            elif suffix.group(2) is not None:
                if suffix.group(2).lower() not in _UNITS:
                    tok.role, tok.reason = "ignored", "identifier or other quantity"
            else:
                tok.role, tok.reason = "ignored", "scale factor"
        if tok.role == "value":
            _classify(tok, prefix, text[tok.end :], anchor_words)
        out.append(tok)
    return out


def _classify(tok: _Tok, prefix: str, rest: str, anchor_words: frozenset[str]) -> None:
    key = _KEY_EQ.search(prefix)
    if re.search(r"±\s*$", prefix):
        tok.role = "uncertainty"
    elif _N_KEY.search(prefix):
        tok.role = "n"
        if re.match(r"\s*(?:seeds?|runs?)\b", rest, re.I):
            tok.role, tok.reason = "ignored", "seed count"
    elif _STD_KEY.search(prefix):
        tok.role = "uncertainty"
    elif key and _term(key.group(1)) not in anchor_words:
        tok.role, tok.reason = "ignored", f"setting {key.group(1)}="
    elif re.search(r"(?:^|\W)v\s*$|(?:python|torch|pytorch|cuda|cudnn)\s*$|==\s*$", prefix, re.I):
        tok.role, tok.reason = "ignored", "version"
    elif _STRUCT.search(prefix):
        tok.role, tok.reason = "ignored", "reference to a table, figure or section"
    elif (
        tok.int_like
        and tok.factor == 1
        and not tok.text.startswith(("+", "-"))
        and 1900 <= tok.mantissa <= 2099
    ):
        tok.role, tok.reason = "ignored", "year"
    else:
        word = re.match(r"\s+([A-Za-z][A-Za-z\-]*)", rest)
        if word:
            w = word.group(1).lower()
            if w in _OTHER_QUANTITY:
                tok.role, tok.reason = "ignored", f"a count of {w}"
            elif tok.int_like and not (
                w in _UNITS or w in _FUNCTION_WORDS or w in anchor_words or w in _SPLIT_TERMS
            ):
                tok.role, tok.reason = "ignored", f"a count of {w}"


def _attach(toks: list[_Tok]) -> list[_Tok]:
    """Hang each ``± b`` and ``n=`` on the value before it; returns the values."""
    values: list[_Tok] = []
    last: _Tok | None = None
    for tok in toks:
        if tok.role == "value":
            values.append(tok)
            last = tok
        elif tok.role in ("uncertainty", "n"):
            if last is None:
                tok.role, tok.reason = "ignored", f"{tok.role} without a value"
                continue
            last.attached.append(tok)
            if tok.role == "uncertainty" and tok.factor != 1 and last.factor == 1:
                last.factor = tok.factor
    return values


# ---------------------------------------------------------------------------------------------
# Text clean-up

_BLANKS = [
    re.compile(r"\x1b\[[0-9;?]*[A-Za-z]"),
    re.compile(r"(?<![\d.])\d{1,3}%\|[\u2580-\u259f#\s]*\|.*"),
    re.compile(r"\{\{rgt:[^}]*\}\}"),
    re.compile(r"https?://\S+|www\.\S+|\S+@\S+\.\w+"),
    re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ][\d:.\-]+Z?)?(?:-[0-9a-f]{4,})?\b"),
    re.compile(r"\b(?:19|20)\d{2}-(?:0[1-9]|1[0-2])\b(?!-)"),
    re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?\b(?!\.\d)"),
    re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
    re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,}\b", re.I),
    re.compile(r"(?:\.{0,2}/)?[\w.-]*[A-Za-z_][\w.-]*/(?:[\w.-]+/)*[\w-]+\.[A-Za-z]\w*"),
    re.compile(r"\[\^?\d+(?:\s*[,–-]\s*\d+)*\]"),
    re.compile(r"\(\d{1,2}\)"),
]
_EXP10 = re.compile(r"\s*(?:\\times|×|\\cdot)\s*10\s*\^\s*\{?\s*([+-]?\d+)\s*\}?")


def _spaces(m: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", m.group())


def _normalize(line: str) -> str:
    line = unicodedata.normalize("NFKC", line).replace("\u2212", "-")
    return line.replace("+/-", "±").replace("+-", "±").replace("\t", " ")


def _blank(line: str) -> str:
    for pattern in _BLANKS:
        line = pattern.sub(_spaces, line)
    return line


def _same_length(m: re.Match[str], new: str) -> str:
    return new.ljust(len(m.group()))


def _clean_md(line: str) -> str:
    """Markdown line -> text with code, links, markup and math commands blanked, same length."""
    line = re.sub(r"`+[^`]*`+", _spaces, line)
    line = re.sub(r"<[^<>\n]{1,200}>", _spaces, line)
    line = re.sub(r"(!?)\[([^\]]*)\]\(([^)]*)\)", lambda m: _same_length(m, " " + m.group(2)), line)
    line = _blank(line)
    line = _EXP10.sub(lambda m: _same_length(m, "e" + m.group(1)), line)
    line = line.replace("\\pm", " ± ").replace("\\%", " %").replace("\\|", "¦¦")
    line = re.sub(r"\\[A-Za-z]+|\\[,;:! ]", _spaces, line)
    line = re.sub(r"[*{}$]|~~", _spaces, line)
    line = re.sub(
        r"^(\s{0,3}#{1,6}\s+)([\d.]+)", lambda m: m.group(1) + " " * len(m.group(2)), line
    )
    line = re.sub(r"^(\s*>?\s*)(\d{1,3}[.)])(\s)", lambda m: m.group(1) + "  " + m.group(3), line)
    return re.sub(r"^(\s*)>", r"\1 ", line)


_TEX_DROP = re.compile(
    r"\\(?:cite[a-zA-Z]*|ref|eqref|autoref|[cC]ref|label|url|includegraphics|input|include"
    r"|footnote|footnotemark|thanks|textsuperscript|bibliography\w*|usepackage|documentclass"
    r"|begin|end|hspace|vspace|setlength|renewcommand|newcommand|multicolumn|multirow)\*?"
    r"(?:\s*(?:\[[^\]]*\]|\{[^{}]*\}))*"
)
_TEX_RULES = re.compile(
    r"\\(?:hline|toprule|midrule|bottomrule|cmidrule(?:\([^)]*\))?\s*\{[^}]*\}|cline\s*\{[^}]*\}"
    r"|addlinespace(?:\[[^\]]*\])?|morecmidrules|specialrule\{[^}]*\}\{[^}]*\}\{[^}]*\})"
)


def _clean_tex(text: str) -> str:
    """LaTeX fragment -> plain text: commands dropped, their text arguments kept."""
    text = text.replace("\\href", "\\url")
    text = _EXP10.sub(r"e\1", text)
    text = text.replace("\\pm", " ± ").replace("\\%", "%").replace("\\&", " and ")
    text = text.replace("\\$", " ").replace("\\_", "_").replace("\\times", "×")
    text = _TEX_RULES.sub(" ", text)
    text = _TEX_DROP.sub(" ", text)
    text = re.sub(r"\^\{[^{}]*\}|\^\S", " ", text).replace("_{", " {")
    text = re.sub(r"\\[A-Za-z]+\*?|\\[,;:! ]|\\\\", " ", text)
    text = re.sub(r"[{}$~]", " ", text)
    return _blank(text)


# ---------------------------------------------------------------------------------------------
# Documents -> prose blocks and tables


class _Cell(NamedTuple):
    text: str
    line: int
    span: int


_MD_DELIM = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?\s*$")
_MD_BREAK = re.compile(r"^\s{0,3}#{1,6}\s|^\s*(?:[-*+]|\d{1,3}[.)])\s+")
_Unit = tuple[str, list[tuple[int, str]], list[list[_Cell]]]


def _md_cells(line: str, lineno: int) -> list[_Cell]:
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") else body
    return [_Cell(c.replace("¦¦", "|").strip(), lineno, 1) for c in body.split("|")]


def _uncomment(line: str, in_comment: bool) -> tuple[str, bool]:
    """Blank HTML comments (which may span lines) keeping the length."""
    chars = list(line)
    pos = 0
    while pos < len(line):
        if not in_comment:
            opening = line.find("<!--", pos)
            if opening < 0:
                break
            in_comment, pos = True, opening
        close = line.find("-->", pos)
        stop = len(line) if close < 0 else close + 3
        chars[pos:stop] = " " * (stop - pos)
        in_comment, pos = close < 0, stop
    return "".join(chars), in_comment


def _markdown(raw_lines: list[str]) -> Iterator[_Unit]:
    """Prose blocks (list of (line number, text)) and tables (rows of cells, header first) of a
    Markdown or plain-text file. Fenced code and lines with an ``rgt:ignore`` pragma drop out."""
    cleaned: list[str] = []
    breaks: list[bool] = []
    fence: str | None = None
    in_comment = False
    for raw in raw_lines:
        line = _normalize(raw)
        mark = re.match(r"^\s*(`{3,}|~{3,})", line)
        if mark and fence is None:
            fence = mark.group(1)[0]
        elif mark and mark.group(1)[0] == fence:
            fence = None
        elif fence is None:
            text, in_comment = _uncomment(line, in_comment)
            cleaned.append("" if "rgt:ignore" in line else _clean_md(text))
            breaks.append(bool(_MD_BREAK.match(line)))
            continue
        cleaned.append("")
        breaks.append(True)
    block: list[tuple[int, str]] = []
    i = 0
    while i < len(cleaned):
        line = cleaned[i]
        if "|" in line and i + 1 < len(cleaned) and _MD_DELIM.match(cleaned[i + 1]):
            if block:
                yield "prose", block, []
                block = []
            rows = [_md_cells(line, i + 1)]
            i += 2
            while i < len(cleaned) and "|" in cleaned[i] and cleaned[i].strip():
                rows.append(_md_cells(cleaned[i], i + 1))
                i += 1
            yield "md-table", [], rows
            continue
        if (not line.strip() or breaks[i]) and block:
            yield "prose", block, []
            block = []
        if line.strip():
            block.append((i + 1, line))
        i += 1
    if block:
        yield "prose", block, []


_TAB_BEGIN = re.compile(r"\\begin\{(tabular\*?|tabularx|tabulary|longtable|array)\}")
_VERBATIM = re.compile(r"\\begin\{(verbatim|lstlisting|minted|comment)\}.*?\\end\{\1\}", re.S)


def _skip_group(text: str, pos: int, opening: str, closing: str) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos >= len(text) or text[pos] != opening:
        return pos
    depth = 0
    for j in range(pos, len(text)):
        if text[j] == opening:
            depth += 1
        elif text[j] == closing:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def _tex_cell(raw: str, line: int) -> _Cell:
    span = 1
    m = re.match(r"\s*\\multicolumn\s*\{(\d+)\}\s*\{[^{}]*\}\s*\{(.*)\}\s*$", raw, re.S)
    if m:
        span, raw = int(m.group(1)), m.group(2)
    m = re.match(
        r"\s*\\multirow\s*\{[^{}]*\}\s*(?:\[[^\]]*\])?\s*\{[^{}]*\}\s*\{(.*)\}\s*$", raw, re.S
    )
    if m:
        raw = m.group(1)
    return _Cell(" ".join(_clean_tex(raw).split()), line, span)


def _latex(raw_lines: list[str]) -> Iterator[_Unit]:
    lines = []
    for raw in raw_lines:
        line = _normalize(raw)
        ignored = re.search(r"(?<!\\)%\s*rgt:\s*ignore", line)
        lines.append("" if ignored else re.sub(r"(?<!\\)%.*", "", line))
    full = "\n".join(lines)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def lineno(offset: int) -> int:
        return bisect.bisect_right(starts, offset)

    doc = re.search(r"\\begin\{document\}", full)
    if doc:
        full = re.sub(r"[^\n]", " ", full[: doc.end()]) + full[doc.end() :]
    full = _VERBATIM.sub(_spaces, full)
    chars = list(full)
    for m in _TAB_BEGIN.finditer(full):
        env = m.group(1)
        pos = _skip_group(full, m.end(), "[", "]")
        for _ in range(2 if env in ("tabular*", "tabularx", "tabulary") else 1):
            pos = _skip_group(full, pos, "{", "}")
        end = full.find(f"\\end{{{env}}}", pos)
        end = len(full) if end < 0 else end
        rows: list[list[_Cell]] = []
        row_start = pos
        for row_m in re.finditer(r"\\\\(?:\s*\[[^\]]*\])?|$", full[pos:end]):
            row_text = full[row_start : pos + row_m.start()]
            cells: list[_Cell] = []
            cell_start = row_start
            for cell_m in re.finditer(r"(?<!\\)&|$", row_text):
                raw = _TEX_RULES.sub(_spaces, row_text[cell_start - row_start : cell_m.start()])
                lead = len(raw) - len(raw.lstrip())
                cells.append(_tex_cell(raw, lineno(cell_start + lead)))
                cell_start = row_start + cell_m.end()
                if cell_m.group() == "":
                    break
            if any(c.text for c in cells):
                rows.append(cells)
            row_start = pos + row_m.end()
            if row_m.group() == "":
                break
        yield "table", [], rows
        stop = min(len(full), end + len(env) + 6)
        for j in range(m.start(), stop):
            if chars[j] != "\n":
                chars[j] = " "
    block: list[tuple[int, str]] = []
    for i, line in enumerate("".join(chars).split("\n")):
        text = _clean_tex(line)
        if not text.strip() or re.match(
            r"\s*\\(?:item|section|subsection|paragraph|caption)", line
        ):
            if block:
                yield "prose", block, []
                block = []
        if text.strip():
            block.append((i + 1, text))
    if block:
        yield "prose", block, []


# ---------------------------------------------------------------------------------------------
# Matching


class _Occ(NamedTuple):
    start: int
    end: int
    term: str


def _term_pattern(term: str) -> str:
    return r"\s+".join(re.escape(part) for part in term.split())


def _gap(occ: _Occ, tok: _Tok | None) -> float:
    if tok is None:
        return 0.0
    if occ.end <= tok.start:
        return float(tok.start - occ.end)
    if occ.start >= tok.end:
        return occ.start - tok.end + 0.5  # a name before the number wins a tie
    return 0.0


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[\"']|$)")


class _Scanner:
    """Checks the documents against the entries; everything lands in ``log``."""

    def __init__(self, entries: list[_Entry], log: _Log) -> None:
        self.entries = entries
        self.log = log
        terms: set[str] = set()
        for e in entries:
            terms |= e.anchor_terms | e.method_terms | e.qualifier_terms | e.split_terms
        self.anchor_words = frozenset(w for e in entries for t in e.anchor_terms for w in t.split())
        alternation = "|".join(_term_pattern(t) for t in sorted(terms, key=len, reverse=True))
        self.regex = re.compile(rf"(?<![A-Za-z0-9_])(?:{alternation})(?![A-Za-z0-9_])", re.I)
        self.doc = ""
        self.context_lines: list[str] = []

    def occurrences(self, text: str) -> list[_Occ]:
        if not self.entries:
            return []
        return [_Occ(m.start(), m.end(), _term(m.group())) for m in self.regex.finditer(text)]

    def scan(self, doc: str, raw_lines: list[str], units: Iterator[_Unit]) -> None:
        self.doc = doc
        self.context_lines = [" ".join(_normalize(line).split()) for line in raw_lines]
        for kind, block, rows in units:
            if kind == "prose":
                self._prose(block)
            else:
                self._table(rows, 1 if kind == "md-table" else None)

    def _context(self, line: int, text: str) -> str:
        full = self.context_lines[line - 1] if 0 < line <= len(self.context_lines) else ""
        if len(full) <= _CONTEXT:
            return full
        at = max(0, full.find(text.lstrip("+")) - _CONTEXT // 3)
        return full[at : at + _CONTEXT]

    def _ignore(self, line: int, toks: list[_Tok], reason: str | None = None) -> None:
        for tok in toks:
            if reason is not None or tok.role == "ignored":
                self.log.ignored.append(Ignored(self.doc, line, tok.text, reason or tok.reason))

    # -- prose ----------------------------------------------------------------------------------

    def _prose(self, block: list[tuple[int, str]]) -> None:
        text = "\n".join(t for _, t in block)
        starts = list(itertools.accumulate((len(t) + 1 for _, t in block), initial=0))

        def line_of(offset: int) -> int:
            return block[bisect.bisect_right(starts, offset) - 1][0]

        toks = _tokens(text, self.anchor_words)
        occs = self.occurrences(text)
        bounds = [0] + [m.end() for m in _SENTENCE_END.finditer(text)] + [len(text) + 1]
        for s, e in itertools.pairwise(bounds):
            s_occs = [o for o in occs if s <= o.start < e]
            anchored = [x for x in self.entries if any(o.term in x.anchor_terms for o in s_occs)]
            if not anchored:
                continue
            s_toks = [t for t in toks if s <= t.start < e]
            for tok in s_toks:
                self._ignore(line_of(tok.start), [tok] if tok.role == "ignored" else [])
            for tok in _attach(s_toks):
                cands = self._nearest_metric(tok, text, s_toks, s_occs, anchored)
                gap = min(
                    (_gap(o, tok) for o in s_occs if any(o.term in x.anchor_terms for x in cands)),
                    default=math.inf,
                )
                if gap > _TIGHT and (tok.int_like or tok.sig_digits < 2):
                    self._ignore(line_of(tok.start), [tok], "far from the metric and short")
                    continue
                others = [x for x in anchored if x not in cands]
                self._judge(tok, cands, others, s_occs, tok, line_of, 1, _splits(text[s:e]))

    def _nearest_metric(
        self, tok: _Tok, text: str, toks: list[_Tok], occs: list[_Occ], anchored: list[_Entry]
    ) -> list[_Entry]:
        """The entries of the metric named nearest to the number (or at its place in a
        ``PSNR/SSIM ... a/b`` list); the alias-anchored entries when no metric is named."""
        metric_terms = {t for x in anchored for t in x.metric_terms}
        metric_occs = [o for o in occs if o.term in metric_terms]
        if not metric_occs:
            return anchored
        chosen = _paired(tok, toks, metric_occs, text) or min(
            metric_occs, key=lambda o: _gap(o, tok)
        )
        return [x for x in self.entries if chosen.term in x.metric_terms]

    # -- tables ---------------------------------------------------------------------------------

    def _table(self, rows: list[list[_Cell]], header_rows: int | None) -> None:
        """Each number cell is checked against the metric of its column header (or, in a
        transposed table, of its row label) and the method its row label or header names. When
        some row names an EVIDENCE method, rows that name none (other work) are left alone."""
        toks = {id(c): _tokens(c.text, self.anchor_words) for row in rows for c in row}
        has_value = {key: any(t.role != "ignored" for t in ts) for key, ts in toks.items()}
        first_data = next(
            (i for i, row in enumerate(rows) if any(has_value[id(c)] for c in row)), len(rows)
        )
        n_header = header_rows or max(1, first_data)
        grid = [[c for c in row for _ in range(max(1, c.span))] for row in rows]
        width = max(len(r) for r in grid)
        headers = [
            " ".join(grid[h][col].text for h in range(n_header) if col < len(grid[h]))
            for col in range(width)
        ]
        jobs: list[tuple[_Cell, list[list[_Entry]], list[_Occ], int, bool, set[str]]] = []
        for r in range(n_header, len(rows)):
            label = " ".join(c.text for c in rows[r] if not has_value[id(c)])
            label_occs = self.occurrences(label)
            seen: set[int] = set()
            for col, cell in enumerate(grid[r]):
                if id(cell) in seen or not has_value[id(cell)]:
                    continue
                seen.add(id(cell))
                header = headers[col]
                groups = self._groups(self.occurrences(header)) or self._groups(label_occs)
                if not groups:
                    continue
                ctx_occs = self.occurrences(f"{label} | {header}")
                named = any(o.term in x.method_terms for o in ctx_occs for g in groups for x in g)
                factor = 100 if "%" in header or "%" in label else 1
                jobs.append((cell, groups, ctx_occs, factor, named, _splits(f"{label} {header}")))
        table_names_methods = any(job[4] for job in jobs)
        for cell, groups, ctx_occs, factor, named, split_words in jobs:
            cell_toks = toks[id(cell)]
            self._ignore(cell.line, cell_toks)
            values = _attach(cell_toks)
            if table_names_methods and not named:
                self._ignore(cell.line, values, "its row names no EVIDENCE method")
                continue
            flat = list({x.index: x for g in groups for x in g}.values())
            for i, tok in enumerate(values):
                cands = groups[i] if len(groups) == len(values) > 1 else flat
                line_of = _constant(cell.line)
                self._judge(tok, cands, [], ctx_occs, None, line_of, factor, split_words)

    def _groups(self, occs: list[_Occ]) -> list[list[_Entry]]:
        """The entries of each metric named in a header or row label, in order."""
        groups: list[list[_Entry]] = []
        seen: set[str] = set()
        for occ in occs:
            group = [x for x in self.entries if occ.term in x.metric_terms]
            if group and occ.term not in seen:
                seen.add(occ.term)
                groups.append(group)
        return groups

    # -- one number -----------------------------------------------------------------------------

    def _judge(
        self,
        tok: _Tok,
        cands: list[_Entry],
        others: list[_Entry],
        occs: list[_Occ],
        near: _Tok | None,
        line_of: Callable[[int], int],
        default_factor: int,
        split_words: set[str],
    ) -> None:
        """Compare one number with the entry its context picks; then with candidates its
        context does not name, differences of two entries, and other metrics named beside it."""
        factor = tok.factor if tok.factor != 1 else default_factor
        line = line_of(tok.start)
        splits = {_SPLIT_CANON.get(x.split or "", x.split) for x in cands}
        if split_words and None not in splits and not split_words & splits:
            reason = f"on the {'/'.join(sorted(split_words))} split, which EVIDENCE does not hold"
            self._ignore(line, [tok], reason)
            return
        picked, unnamed = _pick(cands, occs, near)
        status = "match" if len(picked) == 1 else "ambiguous"
        hit = _match(tok, picked, factor)
        if hit is None and unnamed and near is not None:
            # a sentence may name one method and quote another's number; a table row may not
            hit, status = _match(tok, unnamed, factor), "ambiguous"
        if hit is None:
            derived = self._derived(tok, cands + others, factor)
            if derived is not None:
                entry, label = derived
                where = (self.doc, line, entry.claim_id)
                self.log.record(
                    where, entry.metric, tok.text, entry.shown, "derived", "", "value", label
                )
                return
        if hit is None and others:
            hit, status = _match(tok, others, factor), "other metric"
        if hit is None:
            entry = min(
                picked, key=lambda x: min(abs(tok.shown - t) for t, _ in _targets(x.value, factor))
            )
            scales = [s for _, s in _targets(entry.value, factor)]
            status, transform = "drift", None
        else:
            entry, scale = hit
            scales, transform = [scale], ("x100" if scale == 100 else None)
        context = self._context(line, tok.text)
        where = (self.doc, line, entry.claim_id)
        self.log.record(
            where, entry.metric, tok.text, entry.shown, status, context, "value", transform
        )
        for att in tok.attached:
            self._attached(att, entry, scales, line_of(att.start))

    def _attached(self, att: _Tok, entry: _Entry, scales: list[float], line: int) -> None:
        """``± b`` against the row's variance, ``n=`` against its n (when the row has them)."""
        if att.role == "uncertainty" and entry.variance is not None:
            ok = any(att.matches(entry.variance * s) for s in scales)
            label, expected, kind = f"{entry.metric} (±)", entry.variance, "uncertainty"
        elif att.role == "n" and entry.n is not None:
            ok = att.int_like and int(att.shown) == entry.n
            label, expected, kind = f"{entry.metric} (n)", entry.n, "n"
        else:
            return
        where = (self.doc, line, entry.claim_id)
        context = self._context(line, att.text)
        self.log.record(where, label, att.text, expected, "match" if ok else "drift", context, kind)

    def _derived(self, tok: _Tok, cands: list[_Entry], factor: int) -> tuple[_Entry, str] | None:
        """An entry pair of one metric and split whose difference (or, shown as a percent,
        relative difference) shows as this number."""
        groups = {x.group for x in cands}
        pool = [x for x in self.entries if x.group in groups]
        for i, a in enumerate(pool):
            for b in pool[i + 1 :]:
                if a.group != b.group or a.value == b.value:
                    continue
                diff = abs(a.value - b.value)
                targets = [diff]
                if factor != 1:
                    if abs(a.value) <= 1 and abs(b.value) <= 1:
                        targets.append(diff * factor)
                    targets += [diff / abs(v) * factor for v in (a.value, b.value) if v]
                if any(tok.matches(t, absolute=True) for t in targets):
                    return a, f"{a.claim_id}#{a.row} - {b.claim_id}#{b.row}"
        return None


def _constant(line: int) -> Callable[[int], int]:
    return lambda _offset: line


def _paired(tok: _Tok, toks: list[_Tok], metric_occs: list[_Occ], text: str) -> _Occ | None:
    """``PSNR/SSIM ... 31.42/0.912``: the metric at this number's place in a slash list."""
    spans = [(t.start, t.end) for t in toks if t.role == "value"]
    for chain in _slash_chains(spans, text):
        if (tok.start, tok.end) in chain and len(chain) > 1:
            index = chain.index((tok.start, tok.end))
            for names in _slash_chains([(o.start, o.end) for o in metric_occs], text):
                if len(names) == len(chain):
                    return next(o for o in metric_occs if (o.start, o.end) == names[index])
    return None


def _slash_chains(spans: list[tuple[int, int]], text: str) -> list[list[tuple[int, int]]]:
    chains: list[list[tuple[int, int]]] = []
    for span in sorted(spans):
        if chains and re.fullmatch(r"\s*/\s*", text[chains[-1][-1][1] : span[0]]):
            chains[-1].append(span)
        else:
            chains.append([span])
    return chains


def _pick(
    cands: list[_Entry], occs: list[_Occ], near: _Tok | None
) -> tuple[list[_Entry], list[_Entry]]:
    """The candidates whose method names (then metric qualifiers, then split words) stand
    nearest to the number, and the candidates none of whose method names appear at all."""
    picked = cands
    unmentioned: list[_Entry] = []
    stages: tuple[Callable[[_Entry], frozenset[str]], ...] = (
        lambda x: x.method_terms,
        lambda x: x.qualifier_terms,
        lambda x: x.split_terms,
    )
    for stage, terms_of in enumerate(stages):
        dist: dict[int, float] = {}
        for x in picked:
            gaps = [_gap(o, near) for o in occs if o.term in terms_of(x)]
            if gaps:
                dist[x.index] = min(gaps)
        if not dist:
            continue
        if stage == 0:
            unmentioned = [x for x in cands if x.index not in dist]
        best = min(dist.values())
        picked = [x for x in picked if dist.get(x.index) == best]
    return picked, unmentioned


def _targets(value: float, factor: int) -> list[tuple[float, float]]:
    out = [(value, 1.0)]
    if factor != 1 and abs(value) <= 1:
        out.append((value * factor, float(factor)))
    return out


def _match(tok: _Tok, entries: list[_Entry], factor: int) -> tuple[_Entry, float] | None:
    for entry in entries:
        for target, scale in _targets(entry.value, factor):
            if tok.matches(target):
                return entry, scale
    return None


# ---------------------------------------------------------------------------------------------
# Entry points


def _documents(paths: Sequence[str | os.PathLike[str]]) -> list[tuple[str, Path]]:
    docs: list[tuple[str, Path]] = []
    for given in paths:
        path = Path(given).expanduser()
        if path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and p.suffix.lower() in DOC_SUFFIXES
                and not any(
                    part.startswith(".") or part in _SKIP_DIRS
                    for part in p.relative_to(path).parts[:-1]
                )
            )
            if not found:
                raise ReconcileError(f"{given}: no .md, .tex or text document in this folder")
            docs.extend((str(p), p) for p in found)
        elif path.is_file():
            docs.append((str(given), path))
        else:
            raise ReconcileError(f"{given}: no such file or folder")
    return docs


def reconcile(
    paths: Sequence[str | os.PathLike[str]],
    evidence_path: str | os.PathLike[str] | None = None,
    project: str | os.PathLike[str] | None = None,
) -> ReconcileReport:
    """Compare every anchored number of the documents at ``paths`` (files or folders) with
    EVIDENCE.json (default ``<project>/EVIDENCE.json``); raises :class:`ReconcileError` when the
    evidence or a document cannot be read."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise ReconcileError("no documents given: rgt reconcile README.md paper/ ...")
    root = project_dir(project)
    evidence = Path(evidence_path).expanduser() if evidence_path else root / "EVIDENCE.json"
    display = str(evidence_path) if evidence_path else str(evidence)
    log = _Log()
    entries = _load_evidence(evidence, root, display, log)
    docs = _documents(paths)
    scanner = _Scanner(entries, log)
    for name, path in docs:
        try:
            raw_lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as exc:
            raise ReconcileError(f"cannot read {name}: {exc.strerror or exc}") from exc
        units = _latex(raw_lines) if path.suffix.lower() == ".tex" else _markdown(raw_lines)
        scanner.scan(name, raw_lines, units)
    order = {name: i for i, (name, _) in enumerate(docs)}
    log.drifts.sort(key=lambda d: (order.get(d.doc, -1), d.line))
    log.checked.sort(key=lambda c: (order.get(c.doc, -1), c.line))
    return ReconcileReport(
        evidence=display,
        docs=[name for name, _ in docs],
        scalars=len(entries),
        drifts=log.drifts,
        checked=log.checked,
        ignored=log.ignored,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``rgt reconcile`` (shared by this module's ``main`` and the CLI)."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="documents or folders to scan")
    parser.add_argument(
        "--evidence",
        default=None,
        metavar="E",
        help="EVIDENCE.json (default: <project>/EVIDENCE.json)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")


def run_args(args: argparse.Namespace, project: str | os.PathLike[str] | None = None) -> int:
    """Run ``rgt reconcile`` from parsed arguments; prints the report, returns the exit code."""
    try:
        report = reconcile(args.paths, args.evidence, project=project)
    except RgtError as exc:
        print(f"rgt reconcile: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.text())
    return report.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """``rgt reconcile PATH... [--evidence E] [--json] [--project DIR]``: 0 no drift, 1 drift,
    2 a load or usage error."""
    parser = argparse.ArgumentParser(
        prog="rgt reconcile",
        description="Check every number next to a metric name in README, paper and notes "
        "against EVIDENCE.json (and EVIDENCE.json against results.json).",
    )
    add_arguments(parser)
    parser.add_argument("--project", default=None, metavar="DIR", help="project root")
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    return run_args(args, args.project)


if __name__ == "__main__":
    sys.exit(main())
