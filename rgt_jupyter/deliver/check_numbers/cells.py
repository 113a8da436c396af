"""The static pass of ``rgt check-numbers``: each number of each cell found and classified,
with the text of a cell or output that is read and the generated numbers its metadata records."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from ...verify.model import open_problems
from ..numtokens import (
    METRIC_WORDS,
    MULTIPLIER,
    RESULT_WORDS,
    CodeScanner,
    TextScanner,
    Token,
    metric_named,
)
from .index import Leaf, ResultsIndex, core, fmt_for
from .report import NumberItem

# -- the text of cells and outputs, and the generated numbers their metadata records

_MIME_ORDER = ("text/markdown", "text/html", "text/latex", "text/plain")
_WIDGET = "application/vnd.jupyter.widget-view+json"
_OWN_MIME = "application/vnd.rgt."


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
                out.setdefault(core(tok), record)
    return out


_RECORD_SCANNER = TextScanner(frozenset())


def _record_for(tok: Token, records: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    return records.get(tok.text) or records.get(core(tok))


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
    if any(str(k).startswith(_OWN_MIME) for k in data):
        return None  # rgt's own report or view (delivery, verify, results): not the paper's
    for mime in _MIME_ORDER:
        if mime in data:
            meta = output.get("metadata")
            meta = meta if isinstance(meta, dict) else {}
            records = _records(meta)
            if records is None and isinstance(meta.get(mime), dict):
                records = _records(meta[mime])
            return mime, _text(data[mime]), records
    return None


# -- the pass

#: Words that say a number is derived from two results (a gain, a ratio).
_DERIVED_CUES = frozenset(
    """points pts pp faster slower speedup times improvement improves improved gain gains
    better worse higher lower drop reduction""".split()
)

#: Where a code cell's shown text is: a string that reaches a print, display or figure, or a
#: comment.
_CODE_TEXT = frozenset({"code_string", "code_comment", "figure_text"})


def _body(text: str) -> str:
    """The digits of a token's text (``93.4`` of ``93.4%``)."""
    words = text.lstrip("+-± ").split()
    return words[0].rstrip("%‰×xkKMBG") if words else ""


_PLACEHOLDER = re.compile(r"\{\{\s*rgt:([^{}|]*?)\s*(?:\|\s*([^{}]*?)\s*)?\}\}")


class Checker:
    """Finds and classifies the numbers of one notebook, cell by cell (:meth:`cell`); what it
    found lands in ``items``, what it could not read in ``warnings``."""

    def __init__(self, notebook: Path, project: Path | None, index: ResultsIndex) -> None:
        self.notebook = notebook
        self.project = project
        self.index = index
        self.text = TextScanner(METRIC_WORDS | RESULT_WORDS | index.key_words)
        self.code = CodeScanner()
        self.items: list[NumberItem] = []
        self.warnings: list[str] = []
        self._sha_cache: dict[Path, str | None] = {}
        #: Each run's open %verify problems, disclosed beside the numbers that cite it.
        self.problems = open_problems(project) if project is not None else {}

    def cell(self, index: int, cell: dict[str, Any]) -> None:
        """Classify the numbers of notebook cell ``index``: its text or code, and its outputs."""
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
        # What an output may repeat of the source: literals that are not safe or configuration
        # ones, and the numbers of the texts it shows (strings that reach a sink, comments).
        shown_numbers = {_body(t.text) for t in toks if t.reason is None and t.sig >= 2}
        for shown in self.code.shown:
            for tok in self.text.output_text(shown.text):
                if tok.line == 1:
                    tok.col += shown.col - 1
                tok.line += shown.line - 1
                self._text_item(base, shown.where, tok, pragma, None, None, None, None)
                if tok.kind == "number" and tok.reason is None and tok.sig >= 2:
                    shown_numbers.add(_body(tok.text))
        echoes: frozenset[str] | None = frozenset(shown_numbers)
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
            for tok in toks:
                self._text_item(base, "output", tok, pragma, records, k, mime, echoes)

    def figures(self, cells: list[Any]) -> None:
        """The numbers drawn on the figures this notebook exported with ``rgt.figure`` (their
        sidecars record the texts), each under the cell that drew it: found by the code's
        sha256 the sidecar records, else by the figure id written in a code cell."""
        root = self.project / "figures" if self.project is not None else None
        if root is None or not root.is_dir():
            return
        code = [
            (i, c, _text(c.get("source", "")))
            for i, c in enumerate(cells)
            if isinstance(c, dict) and c.get("cell_type") == "code"
        ]
        digests = {hashlib.sha256(src.encode()).hexdigest(): i for i, _c, src in code}
        for folder in sorted(p for p in root.iterdir() if p.is_dir()):
            sidecars = sorted(folder.glob("*.provenance"))
            if not sidecars:
                continue
            try:
                record = json.loads(sidecars[0].read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                self.warnings.append(f"figure {folder.name}: sidecar not read ({exc})")
                continue
            if not isinstance(record, dict):
                continue
            fid = str(record.get("figure") or folder.name)
            found = record.get("code")
            drawn: dict[str, Any] = found if isinstance(found, dict) else {}
            index = digests.get(str(drawn.get("sha256")))
            if index is None:
                quoted = (f'"{fid}"', f"'{fid}'")
                index = next((i for i, _c, src in code if any(q in src for q in quoted)), None)
            if index is None:
                continue  # a figure of another notebook
            cell = cells[index]
            base = (index, str(cell.get("id") or f"cell-{index}"), "code")
            for n, entry in enumerate(record.get("texts") or [], 1):
                if not isinstance(entry, dict):
                    continue
                for tok in self.text.output_text(str(entry.get("text", ""))):
                    tok.line = n  # the figure's n-th text
                    tok.context = f"figure {fid}, {entry.get('where')}: {tok.context}"
                    self._text_item(base, "figure_text", tok, False, None, None, None, None)

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
                run = pm.group(1).split(":", 1)[0].strip()
                item.findings = list(self.problems.get(run, []))
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
        if where in _CODE_TEXT and not tok.anchored and found is None:
            status, reason = "ignored", "code text without a result word or a results.json match"
        elif where == "output" and not tagged:
            if echoes is not None and _body(tok.text) in echoes:
                status, reason = "typed", "the output repeats a number typed in the cell source"
            else:
                status, reason = "ignored", "computed by the cell (its source does not type it)"
        elif tok.role == "uncertainty":
            status, reason = "typed", "the ± of a reported result"
        elif tok.year_like and found is None:
            status, reason = "ignored", "year"
        elif tok.suffix in MULTIPLIER and not tok.anchored and found is None:
            status, reason = "ignored", "a size or count (K/M/B) with no result word"
        elif tok.sig < 2 and not tok.anchored and found is None:
            status, reason = "ignored", "one significant digit and no result word"
        elif tok.sig < 2 and not tok.anchored:
            status, reason = "ambiguous", "one significant digit, equal to a results.json value"
        elif not tok.anchored and value <= 10 and not (found and tok.sig >= 3):
            status, reason = "ignored", "a small number with no result word"
        elif where == "output":
            status, reason = "typed", "not among the output's recorded generated values"
        elif (
            not tok.close & self.text.anchors
            and found is None
            and not tok.header
            and tok.decimals == 0
            and not tok.measured
            and tok.suffix not in ("%", "‰", "pp", "×", "x")
        ):
            # A whole number in prose with no result word near it and no run showing it: a
            # count, a price, a name's number; a result in a table or with decimals is typed.
            status, reason = "ignored", "a whole number with no result word and no run match"
        elif tok.setting and found is None and not tok.close & self.text.anchors - {"test"}:
            status, reason = "ignored", f"configuration (the sentence is about {tok.setting})"
        else:
            status, reason = "typed", None
        item = self._item(base, where, tok, status, reason)
        if found is not None:
            self._matched(item, tok, *found)
        elif status == "typed" and (tok.sign_shown or tok.close & _DERIVED_CUES):
            derived = self.index.derived(tok)
            if derived is not None:
                a, b = derived["of"]
                item.match = {"derived": derived}
                item.suggestion = (
                    f'the {derived["kind"]} of {a} and {b}: compute it from rgt.num("{a}") and '
                    f'rgt.num("{b}") and show it with rgt.md'
                )
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
        newer = self.index.newer(leaf)
        if newer is not None and self.index.shows(tok, newer, scale):
            leaf, newer = newer, None  # it shows the newest run too: that is the one to cite
            item.match.update(run_id=leaf.run_id, file=leaf.file, sha256=leaf.sha256)
        if newer is not None:
            job = self.index.runs[leaf.run_id][0]
            item.stale = True
            item.reason = (
                f"stale: matches {leaf.run_id}:{leaf.key} = {leaf.raw!r}, an older run of job "
                f"{job}; its newest run {newer.run_id} has {newer.raw!r}"
            )
            item.match["newest"] = {"run_id": newer.run_id, "file": newer.file, "raw": newer.raw}
            leaf = newer  # the suggestion cites the newest run
        item.findings = list(self.problems.get(leaf.run_id, []))
        if item.where == "code_source":
            item.suggestion = f'read "{leaf.run_id}:{leaf.key}" from results.json, not a literal'
            return
        shown = fmt_for(tok, leaf, scale)
        if shown is not None and item.where in _CODE_TEXT:
            fmt, after = shown
            item.suggestion = f'format rgt.num("{leaf.run_id}:{leaf.key}", "{fmt}") into the text{after and " (then " + after + ")"}'
        elif shown is not None:
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
            item = self._item(
                base, where, tok, "ignored", "code literal (no result name, no results.json match)"
            )
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
        item.findings = list(self.problems.get(str(record.get("run_id")), []))
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
