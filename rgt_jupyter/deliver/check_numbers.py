"""``rgt check-numbers``: which numbers of a notebook were typed rather than generated.

Static pass only (the notebook is not executed). Every number of the markdown and raw cells, of
the code cells' numeric literals and of their saved outputs is found (:mod:`.numtokens`) and
classified:

* ``generated``: a ``{{rgt:<ref>|<fmt>}}`` placeholder, or a number of an output whose
  ``metadata["rgt_jupyter"]["generated"]`` records that text (``stale`` when the recorded sha256
  is no longer the results file's);
* ``ignored``: years, dates, versions, section and figure numbers, identifiers (ResNet-50),
  code-like text, execution noise, safe code literals (figsize, ``range()``), configuration
  literals in code (lr, epochs, seeds) and pragmas, each with its reason;
* ``ambiguous``: too small to judge (unanchored 0–10, fewer than 2 significant digits), or a
  number in an untagged output that the static pass cannot tell from a typed one;
* ``typed``: the rest. A typed number equal to a results.json value at its display rounding
  gets the match and a placeholder to use instead.

Disclose mode exits 0; ``--strict`` exits 1 while a typed or stale number remains.

    python -m rgt_jupyter.deliver.check_numbers NOTEBOOK [--json] [--strict] [--project DIR]
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import html
import importlib
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .numtokens import (
    METRIC_WORDS,
    MULTIPLIER,
    CodeScanner,
    TextScanner,
    Token,
    metric_named,
    source_numbers,
)

SCHEMA = "rgt/numbers-audit/v1"
STATUSES = ("typed", "generated", "ignored", "ambiguous")
_PLACEHOLDER = re.compile(r"\{\{\s*rgt:([^{}|]*?)\s*(?:\|\s*([^{}]*?)\s*)?\}\}")
_KEY_SPLIT = re.compile(r"[^a-z0-9]+")
_KEY_STOP = frozenset(
    """value values mean std count total avg min max final last config results result metrics
    metric data eval time seconds num per class all the and for with from""".split()
)
_MIME_ORDER = ("text/markdown", "text/html", "text/latex", "text/plain")
_WIDGET = "application/vnd.jupyter.widget-view+json"


# -- results.json index


@dataclass(frozen=True, slots=True)
class Leaf:
    """One numeric leaf of one run's results.json."""

    run_id: str
    file: str
    sha256: str
    key: str
    raw: float | int
    words: frozenset[str]


class ResultsIndex:
    """Numeric leaves of results.json files, sorted by value (and by 100·v, 1000·v for
    fractions) so a shown number finds its candidates by bisection."""

    def __init__(self, leaves: list[Leaf], files: list[dict[str, str]]) -> None:
        self.leaves = leaves
        self.files = files
        self._scaled: dict[int, tuple[list[float], list[int]]] = {}
        for scale in (1, 100, 1000):
            pairs = sorted(
                (float(leaf.raw) * scale, i)
                for i, leaf in enumerate(leaves)
                if scale == 1 or 0 <= leaf.raw <= 1
            )
            self._scaled[scale] = ([p[0] for p in pairs], [p[1] for p in pairs])
        words: set[str] = set()
        names: set[str] = set()
        for leaf in leaves:
            words |= leaf.words
            last = leaf.key.rsplit(".", 1)[-1].lower()
            if len(last) >= 3 and last not in _KEY_STOP and not last.isdigit():
                names.add(last)
        self.key_words = frozenset(words)
        self.leaf_names = frozenset(names)

    @classmethod
    def load(cls, run_folders: Iterable[Path], project: Path | None = None) -> ResultsIndex:
        """Index ``results.json`` (or ``outputs/results.json``) of each run folder; a path to a
        results.json file is taken as is."""
        leaves: list[Leaf] = []
        files: list[dict[str, str]] = []
        for folder in run_folders:
            path = folder if folder.is_file() else folder / "results.json"
            if not path.is_file() and folder.is_dir():
                path = folder / "outputs" / "results.json"
            if not path.is_file():
                continue
            run_id = (folder.parent if folder.is_file() else folder).name
            data = path.read_bytes()
            try:
                doc = json.loads(data)
            except ValueError:
                continue
            sha = hashlib.sha256(data).hexdigest()
            shown = _display_path(path, project)
            files.append({"path": shown, "sha256": sha, "run_id": run_id})
            for key, raw in _numeric_leaves(doc, ""):
                words = frozenset(
                    w
                    for w in _KEY_SPLIT.split(key.lower())
                    if len(w) >= 3 and not w.isdigit() and w not in _KEY_STOP
                )
                leaves.append(Leaf(run_id, shown, sha, key, raw, words))
        return cls(leaves, files)

    def lookup(self, tok: Token, anchored: bool) -> tuple[Leaf, int, int] | None:
        """The best leaf that ``tok`` shows at its display rounding (half-up or half-even at
        its decimals), the scale (1, or 100/1000 for ``%``/``‰`` of a fraction) and how many
        leaves it matched; None when none does."""
        if tok.value is None or tok.decimals is None or tok.sig == 0 or not self.leaves:
            return None
        value = tok.value
        unit = 10.0 ** (tok.exponent + MULTIPLIER.get(tok.suffix, 0))
        tol = 0.5 * 10.0 ** (-tok.decimals) * unit + 1e-9 * max(1.0, abs(value))
        scales = {"%": (100, 1), "pp": (100, 1), "‰": (1000, 1)}.get(tok.suffix, (1,))
        int_shown = tok.decimals == 0 and unit == 1.0
        found: list[tuple[int, float, int, int]] = []
        for rank, scale in enumerate(scales):
            vals, ids = self._scaled[scale]
            lo = bisect.bisect_left(vals, value - tol)
            hi = bisect.bisect_right(vals, value + tol)
            for j in range(lo, hi):
                leaf = self.leaves[ids[j]]
                raw = leaf.raw
                if int_shown and scale == 1 and not anchored:
                    if isinstance(raw, float) and not raw.is_integer():
                        continue
                overlap = len(tok.words & leaf.words)
                found.append((-overlap, abs(vals[j] - value), rank, ids[j]))
        if not found:
            return None
        best = min(found)
        scale = scales[best[2]]
        return self.leaves[best[3]], scale, len({f[3] for f in found})


def _numeric_leaves(value: Any, prefix: str) -> Iterable[tuple[str, float | int]]:
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        if isinstance(value, int) or math.isfinite(value):
            if not isinstance(value, int) or abs(value) < 1 << 1000:
                yield prefix, value
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _numeric_leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _numeric_leaves(v, f"{prefix}.{i}" if prefix else str(i))


def _display_path(path: Path, project: Path | None) -> str:
    if project is not None:
        try:
            return path.resolve().relative_to(project.resolve()).as_posix()
        except ValueError:
            pass
    return str(path)


def _fmt_for(tok: Token, leaf: Leaf, scale: int) -> tuple[str, str] | None:
    """The format spec that shows ``leaf.raw`` the way ``tok`` shows it, and the text that
    stays after the placeholder (``%`` when results.json stores the percent itself); None when
    no format spec reproduces it (K/M/B suffixes, per mille, points of a fraction)."""
    d = tok.decimals or 0
    if tok.suffix in MULTIPLIER or scale == 1000 or (tok.suffix == "pp" and scale == 100):
        return None
    sign = "+" if tok.text.startswith("+") else ""
    if tok.exponent:
        return f"{sign}.{d}e", ""
    if tok.suffix == "%" and scale == 100:
        return f"{sign}.{d}%", ""
    comma = "," if tok.thousands else ""
    after = tok.text[len(_core(tok)) :]
    if d == 0 and isinstance(leaf.raw, int):
        return f"{sign}{comma}d", after
    return f"{sign}{comma}.{d}f", after


# -- report


@dataclass(slots=True)
class NumberItem:
    """One number of the notebook and its status."""

    cell_index: int
    cell_id: str
    cell_type: str
    where: str  # markdown | code_source | output
    line: int
    col: int
    text: str
    value: float | None
    decimals: int | None
    status: str  # typed | generated | ignored | ambiguous
    reason: str | None = None
    match: dict[str, Any] | None = None
    suggestion: str | None = None
    output_index: int | None = None
    mime: str | None = None
    stale: bool = False
    role: str = "value"
    context: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (all fields)."""
        return asdict(self)


@dataclass
class NumbersReport:
    """Every number of one notebook, classified; ``text()`` lists the typed ones."""

    notebook: Path
    notebook_sha256: str
    items: list[NumberItem] = field(default_factory=list)
    evidence_files: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def summary(self) -> dict[str, int]:
        """Counts by status, plus ``total``, ``stale``, ``matched`` (typed with a results.json
        match) and ``pragmas``."""
        counts = dict.fromkeys(STATUSES, 0)
        stale = matched = pragmas = 0
        for item in self.items:
            counts[item.status] += 1
            stale += item.stale
            matched += item.status == "typed" and item.match is not None
            pragmas += bool(item.reason and item.reason.startswith("pragma"))
        return {
            **counts,
            "total": len(self.items),
            "stale": stale,
            "matched": matched,
            "pragmas": pragmas,
        }

    @property
    def typed(self) -> list[NumberItem]:
        """The typed numbers."""
        return [i for i in self.items if i.status == "typed"]

    @property
    def stale(self) -> list[NumberItem]:
        """Generated numbers whose results file changed since."""
        return [i for i in self.items if i.stale]

    def to_dict(self) -> dict[str, Any]:
        """``{"schema", "notebook", "notebook_sha256", "summary", "findings", ...}``."""
        return {
            "schema": SCHEMA,
            "notebook": str(self.notebook),
            "notebook_sha256": self.notebook_sha256,
            "summary": self.summary,
            "evidence_files": self.evidence_files,
            "warnings": self.warnings,
            "findings": [i.to_dict() for i in self.items],
        }

    def _where(self, item: NumberItem) -> str:
        return f"{self.notebook.name}#{item.cell_id}:{item.line}"

    def _line(self, item: NumberItem) -> str:
        place = {"markdown": "markdown", "code_source": "code"}.get(item.where, "output")
        if item.output_index is not None:
            place = f"output {item.output_index}"
        if item.stale:
            m = item.match or {}
            return f"{self._where(item)} stale {item.text} ({place}; {m.get('file')} changed)"
        if item.match:
            m = item.match
            what = f"matches {m['run_id']}:{m['key_path']} = {m['raw']!r}"
        else:
            what = "no results.json value matches"
        line = f"{self._where(item)} typed {item.text} ({place}; {what})"
        return f"{line} → {item.suggestion}" if item.suggestion else line

    def text(self) -> str:
        """A summary line, then one line per typed (and stale) number."""
        s = self.summary
        head = (
            f"{self.notebook.name}: {s['typed']} typed, {s['generated']} generated "
            f"({s['stale']} stale), {s['ignored']} ignored, {s['ambiguous']} ambiguous"
        )
        lines = [head] + [self._line(i) for i in self.items if i.status == "typed" or i.stale]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None, **kwargs: Any
    ) -> dict[str, str]:
        rows = "".join(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>".format(
                html.escape(self._where(i)),
                html.escape(i.text),
                "stale" if i.stale else i.status,
                html.escape(i.suggestion or ""),
            )
            for i in self.items
            if i.status == "typed" or i.stale
        )
        s = self.summary
        head = html.escape(
            f"{s['typed']} typed, {s['generated']} generated ({s['stale']} stale), "
            f"{s['ignored']} ignored, {s['ambiguous']} ambiguous"
        )
        table = (
            "<table><tr><th>where</th><th>number</th><th>status</th><th>suggestion</th></tr>"
            f"{rows}</table>"
            if rows
            else ""
        )
        return {
            "text/plain": self.text(),
            "text/html": f"<p><b>{html.escape(self.notebook.name)}</b>: {head}</p>{table}",
        }


# -- the pass


class _Checker:
    def __init__(self, notebook: Path, project: Path | None, index: ResultsIndex) -> None:
        self.notebook = notebook
        self.project = project
        self.index = index
        self.text = TextScanner(METRIC_WORDS | index.key_words)
        self.code = CodeScanner()
        self.items: list[NumberItem] = []
        self.warnings: list[str] = []
        self._sha_cache: dict[Path, str | None] = {}

    def cell(self, index: int, cell: dict[str, Any]) -> None:
        cell_type = str(cell.get("cell_type", ""))
        cell_id = str(cell.get("id") or f"cell-{index}")
        meta = cell.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        tags = meta.get("tags")
        pragma = isinstance(tags, list) and "rgt:ignore-numbers" in tags
        source = _text(cell.get("source", ""))
        base = (index, cell_id, cell_type)
        if cell_type in ("markdown", "raw"):
            records = _records(meta)
            for tok in self.text.markdown(source):
                self._text_item(base, "markdown", tok, pragma, records, None, None, None)
            return
        if cell_type != "code":
            return
        toks, error = self.code.scan(source)
        if error:
            self.warnings.append(f"cell {index} ({cell_id}): {error}")
        for tok in toks:
            self._code_item(base, tok, pragma)
        echoes: frozenset[str] | None = None
        for k, output in enumerate(cell.get("outputs") or []):
            picked = _output_text(output)
            if picked is None:
                continue
            mime, text, records = picked
            if not text or not any(ch.isdigit() for ch in text):
                continue
            if mime == "text/markdown":
                toks = self.text.markdown(text)
            elif mime == "text/html":
                toks = self.text.html(text)
            else:
                toks = self.text.output_text(text)
            if records is None and echoes is None:
                echoes = source_numbers(source)
            for tok in toks:
                self._text_item(base, "output", tok, pragma, records, k, mime, echoes)

    def _item(
        self, base: tuple[int, str, str], where: str, tok: Token, status: str, reason: str | None
    ) -> NumberItem:
        item = NumberItem(
            cell_index=base[0],
            cell_id=base[1],
            cell_type=base[2],
            where=where,
            line=tok.line,
            col=tok.col,
            text=tok.text,
            value=tok.value,
            decimals=tok.decimals,
            status=status,
            reason=reason,
            role=tok.role,
            context=f"[{tok.header}] {tok.context}" if tok.header else tok.context,
        )
        self.items.append(item)
        return item

    def _text_item(
        self,
        base: tuple[int, str, str],
        where: str,
        tok: Token,
        pragma: bool,
        records: dict[str, dict[str, Any]] | None,
        output_index: int | None,
        mime: str | None,
        echoes: frozenset[str] | None,
    ) -> None:
        if tok.kind == "placeholder":
            item = self._item(base, where, tok, "generated", "placeholder")
            pm = _PLACEHOLDER.fullmatch(tok.text)
            if pm:
                item.match = {"ref": pm.group(1), "fmt": pm.group(2)}
        elif pragma:
            item = self._item(base, where, tok, "ignored", "pragma: rgt:ignore-numbers")
        elif tok.reason is not None:
            item = self._item(base, where, tok, "ignored", tok.reason)
        else:
            record = _record_for(tok, records) if records else None
            if record is not None:
                holder = "output" if where == "output" else "cell"
                item = self._item(
                    base, where, tok, "generated", f"recorded in the {holder} metadata"
                )
                self._generated(item, record)
            else:
                item = self._judge(base, where, tok, tagged=records is not None, echoes=echoes)
        item.output_index = output_index
        item.mime = mime

    def _judge(
        self,
        base: tuple[int, str, str],
        where: str,
        tok: Token,
        *,
        tagged: bool,
        echoes: frozenset[str] | None,
    ) -> NumberItem:
        found = self.index.lookup(tok, tok.anchored)
        value = abs(tok.value or 0.0)
        if tok.sig < 2:
            status, reason = "ambiguous", "fewer than 2 significant digits"
        elif tok.year_like and found is None:
            status, reason = "ambiguous", "year-like number near a metric word"
        elif not tok.anchored and value <= 10 and not (found and tok.sig >= 3):
            status, reason = "ambiguous", "unanchored number between 0 and 10"
        elif where == "output" and not tagged:
            words = tok.text.lstrip("+-± ").split()
            body = words[0].rstrip("%‰×xkKMBG") if words else ""
            if echoes is not None and body in echoes:
                status, reason = "typed", "the output repeats a number typed in the cell source"
            else:
                status, reason = "ambiguous", "untagged output (generated or typed: run-time check)"
        elif where == "output":
            status, reason = "typed", "not among the output's recorded generated values"
        else:
            status, reason = "typed", None
        item = self._item(base, where, tok, status, reason)
        if found is not None:
            self._matched(item, tok, *found)
        return item

    def _matched(self, item: NumberItem, tok: Token, leaf: Leaf, scale: int, count: int) -> None:
        item.match = {
            "run_id": leaf.run_id,
            "file": leaf.file,
            "sha256": leaf.sha256,
            "key_path": leaf.key,
            "raw": leaf.raw,
            "scale": scale,
            "transform": f"x{scale}" if scale != 1 else None,
            "ambiguous": count > 1,
            "candidates": count,
        }
        if item.status != "typed":
            return
        if item.where == "code_source":
            item.suggestion = f'read "{leaf.run_id}:{leaf.key}" from results.json, not a literal'
            return
        shown = _fmt_for(tok, leaf, scale)
        if shown is not None:
            fmt, after = shown
            item.suggestion = f"use {{{{rgt:{leaf.run_id}:{leaf.key}|{fmt}}}}}{after}"

    def _code_item(self, base: tuple[int, str, str], tok: Token, pragma: bool) -> None:
        where = "code_source"
        if pragma:
            self._item(base, where, tok, "ignored", "pragma: rgt:ignore-numbers")
            return
        if tok.reason is not None:
            self._item(base, where, tok, "ignored", tok.reason)
            return
        named = bool(tok.name) and metric_named(tok.name, self.index.leaf_names)
        found = self.index.lookup(tok, named)
        if named and tok.sig >= 2:
            item = self._item(base, where, tok, "typed", f"metric value hardcoded ({tok.name})")
        elif found is not None and tok.sig >= 3:
            item = self._item(base, where, tok, "typed", "literal equal to a results.json value")
        else:
            item = self._item(base, where, tok, "ambiguous", "code literal")
        if found is not None:
            self._matched(item, tok, *found)

    def _generated(self, item: NumberItem, record: dict[str, Any]) -> None:
        item.match = {
            "ref": record.get("ref"),
            "run_id": record.get("run_id"),
            "file": record.get("results_json"),
            "sha256": record.get("sha256"),
            "key_path": record.get("key"),
            "raw": record.get("value"),
            "fmt": record.get("fmt"),
            "claim_id": record.get("claim_id"),
        }
        recorded = record.get("sha256")
        path = record.get("results_json")
        if not recorded or not path:
            return
        current = self._current_sha(str(path))
        if current is not None and current != recorded:
            item.stale = True
            item.reason = f"stale: {path} changed since this output was generated"

    def _current_sha(self, name: str) -> str | None:
        path = Path(name)
        candidates = [path] if path.is_absolute() else []
        if not path.is_absolute():
            if self.project is not None:
                candidates.append(self.project / path)
            candidates.append(self.notebook.parent / path)
        for candidate in candidates:
            if candidate in self._sha_cache:
                return self._sha_cache[candidate]
            if candidate.is_file():
                sha = hashlib.sha256(candidate.read_bytes()).hexdigest()
                self._sha_cache[candidate] = sha
                return sha
        return None


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return str(value or "")


def _records(meta: Any) -> dict[str, dict[str, Any]] | None:
    """The generated records of an output's (or a cell's) metadata, by the number texts they
    show (full token text and without its suffix); None when it carries none."""
    if not isinstance(meta, dict):
        return None
    rgt = meta.get("rgt_jupyter")
    generated = rgt.get("generated") if isinstance(rgt, dict) else None
    if not isinstance(generated, list):
        return None
    scanner = _RECORD_SCANNER
    out: dict[str, dict[str, Any]] = {}
    for record in generated:
        if not isinstance(record, dict):
            continue
        shown = str(record.get("text", "")).strip()
        if not shown:
            continue
        out.setdefault(shown, record)
        for tok in scanner.output_text(shown):
            if tok.kind == "number":
                out.setdefault(tok.text, record)
                out.setdefault(_core(tok), record)
    return out


_RECORD_SCANNER = TextScanner(frozenset())


def _core(tok: Token) -> str:
    if tok.suffix and tok.text.endswith(tok.suffix):
        return tok.text[: -len(tok.suffix)].strip()
    return tok.text


def _record_for(tok: Token, records: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    return records.get(tok.text) or records.get(_core(tok))


def _output_text(
    output: dict[str, Any],
) -> tuple[str, str, dict[str, dict[str, Any]] | None] | None:
    """(mime, text, generated records) of one output; None for errors, stderr, images and
    widgets."""
    if not isinstance(output, dict):
        return None
    kind = output.get("output_type")
    if kind == "stream":
        if output.get("name") != "stdout":
            return None
        return "stream", _text(output.get("text")), None
    if kind not in ("display_data", "execute_result", "update_display_data"):
        return None
    data = output.get("data")
    if not isinstance(data, dict) or _WIDGET in data:
        return None
    for mime in _MIME_ORDER:
        if mime in data:
            meta = output.get("metadata")
            meta = meta if isinstance(meta, dict) else {}
            records = _records(meta)
            if records is None and isinstance(meta.get(mime), dict):
                records = _records(meta[mime])
            return mime, _text(data[mime]), records
    return None


def _read_notebook(path: Path) -> tuple[Any, str]:
    raw = path.read_bytes()
    text = raw.decode("utf-8")
    nb = json.loads(text)
    # A v4 notebook is read as its JSON (multi-line strings may be lists; cells keep their
    # ``id``): importing nbformat costs seconds here (its validator's jsonschema), and the
    # schema validation a tenth of a second per thousand cells. Other versions go through
    # nbformat's conversion to v4.
    if not isinstance(nb, dict) or nb.get("nbformat") != 4:
        reader = importlib.import_module("nbformat.reader")
        nb = importlib.import_module("nbformat").convert(reader.reads(text), 4)
    return nb, hashlib.sha256(raw).hexdigest()


def _default_project(notebook: Path) -> Path:
    from ..project import project_dir

    found = project_dir(notebook.parent)
    if (found / ".rgt").is_dir() or (found / "runs").is_dir():
        return found
    env = os.environ.get("RGT_PROJECT")
    return Path(env).expanduser().resolve() if env else found


def check_numbers(
    notebook_path: str | os.PathLike[str],
    project: str | os.PathLike[str] | None = None,
    runs: Sequence[str | os.PathLike[str]] | None = None,
) -> NumbersReport:
    """Classify every number of the notebook (static pass).

    ``project``: where ``runs/*/results.json`` are indexed (default: the notebook's project,
    else ``$RGT_PROJECT``). ``runs``: index these run folders (or results.json files) instead.
    """
    nb_path = Path(notebook_path)
    nb, sha = _read_notebook(nb_path)
    proj = Path(project) if project is not None else _default_project(nb_path.resolve())
    if runs is not None:
        folders = [Path(r) for r in runs]
    else:
        root = proj / "runs"
        folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    index = ResultsIndex.load(folders, proj)
    checker = _Checker(nb_path, proj, index)
    cells = nb.get("cells")
    for i, cell in enumerate(cells if isinstance(cells, list) else []):
        if isinstance(cell, dict):
            checker.cell(i, cell)
    order = {"markdown": 0, "code_source": 0, "output": 1}
    checker.items.sort(
        key=lambda it: (
            it.cell_index,
            order[it.where],
            -1 if it.output_index is None else it.output_index,
            it.line,
            it.col,
        )
    )
    return NumbersReport(nb_path, sha, checker.items, index.files, checker.warnings)


def main(argv: Sequence[str] | None = None) -> int:
    """``rgt check-numbers NOTEBOOK [--json] [--strict] [--project DIR] [--run DIR ...]``."""
    parser = argparse.ArgumentParser(
        prog="rgt check-numbers",
        description="List the numbers of a notebook that were typed rather than generated "
        "from results.json.",
    )
    parser.add_argument("notebook", help="the .ipynb file")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 while a typed or stale number remains"
    )
    parser.add_argument("--project", help="project whose runs/*/results.json are indexed")
    parser.add_argument(
        "--run", action="append", dest="runs", help="index this run folder instead (repeatable)"
    )
    args = parser.parse_args(argv)
    try:
        report = check_numbers(args.notebook, args.project, args.runs)
    except OSError as exc:
        print(f"rgt check-numbers: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"rgt check-numbers: {args.notebook} is not a notebook ({exc})", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        print(report.text())
    if args.strict and (report.typed or report.stale):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
