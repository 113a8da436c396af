"""The text of a notebook cell or output that ``rgt check-numbers`` reads, and the generated
numbers its metadata records."""

from __future__ import annotations

from typing import Any

from .numtokens import TextScanner, Token

_MIME_ORDER = ("text/markdown", "text/html", "text/latex", "text/plain")
_WIDGET = "application/vnd.jupyter.widget-view+json"


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
