"""HTML read as text by the number scanner: tables as pipe rows under their header row."""

from __future__ import annotations

import html
import re


def html_to_text(markup: str) -> str:
    """Plain text of HTML: scripts and styles dropped, each table as pipe rows with a separator
    after its first (header) row, block tags as line breaks, entities unescaped."""
    markup = _SCRIPT_STYLE.sub("", markup)
    markup = _TABLE.sub(_table_rows, markup)
    markup = _BLOCK.sub("\n", markup)
    markup = _TAG.sub("", markup)
    return html.unescape(markup)


_SCRIPT_STYLE = re.compile(r"<(script|style)\b.*?</\1\s*>", re.S | re.I)
_TABLE = re.compile(r"<table\b.*?(?:</table\s*>|\Z)", re.S | re.I)
_ROW = re.compile(r"<tr\b[^>]*>(.*?)</tr\s*>", re.S | re.I)
_CELL = re.compile(r"<t([hd])\b[^>]*>(.*?)</t[hd]\s*>", re.S | re.I)
_BLOCK = re.compile(r"<br\s*/?>|</(?:p|div|li|h[1-6]|pre|tr)\s*>", re.I)
_TAG = re.compile(r"<[^>]*>")


def _table_rows(m: re.Match[str]) -> str:
    rows: list[str] = []
    for k, row in enumerate(_ROW.finditer(m.group(0))):
        cells = [
            " ".join(_TAG.sub("", c.group(2)).split()).replace("|", "/")
            for c in _CELL.finditer(row.group(1))
        ]
        rows.append("| " + " | ".join(cells) + " |")
        if k == 0:
            rows.append("|" + "---|" * max(1, len(cells)))
    return "\n" + "\n".join(rows) + "\n"
