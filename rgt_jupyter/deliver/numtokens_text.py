"""Whole texts scanned for numbers: markdown and raw cells (fences, comments and pragmas), stdout
and text/plain outputs (ANSI codes, carriage returns, progress bars), and HTML (tables as pipe
rows)."""

from __future__ import annotations

import html
import re

from .numtext import normalize, spaces
from .numtokens_base import Token
from .numtokens_line import _DIGIT, MAX_LINE, _cells, _LineScanner

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
# An unclosed comment, OSC escape or table runs to the end of the text (or line), so no
# pattern has to give up and retry from every later position.
_COMMENT = re.compile(r"<!--(.*?)(?:-->|\Z)", re.S)
_PRAGMA_COMMENT = re.compile(r"rgt:\s*ignore\b")
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")
_PROGRESS = re.compile(r"\d+%\|| (?:it/s|s/it)\]|\|[█▏▎▍▌▋▊▉#]+")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?")


def _table_header(
    lines: list[str], i: int, line: str, header: list[str] | None
) -> tuple[list[str] | None, bool]:
    """The table header in force at ``line`` (``lines[i]`` as scanned), and whether ``line`` is
    the separator row under that header."""
    if "|" not in line or len(line) > MAX_LINE:
        return None, False
    nxt = lines[i + 1] if i + 1 < len(lines) else ""
    nxt = nxt if len(nxt) <= MAX_LINE else ""
    if "|" in nxt and _TABLE_SEP.match(nxt):
        return [c[2] for c in _cells(line)], False
    return header, header is not None and _TABLE_SEP.match(line) is not None


class TextScanner(_LineScanner):
    """Scans text for numbers; ``anchors`` are the words that anchor a number (metric names,
    split words, results.json keys)."""

    # -- whole texts

    def markdown(self, source: str) -> list[Token]:
        """Tokens of a markdown or raw cell: fences and HTML comments are blanked first;
        ``<!-- rgt:ignore -->`` ignores its own line, or the block after it when alone."""
        text = normalize(source)
        out: list[Token] = []
        pragma_lines: set[int] = set()
        if "<!--" in text:
            for m in _COMMENT.finditer(text):
                if _PRAGMA_COMMENT.search(m.group(1)):
                    pragma_lines.update(self._pragma_scope(text, m.start(), m.end()))
            text = _COMMENT.sub(spaces, text)
        lines = text.split("\n")
        fence: str | None = None
        fence_start = 0
        fence_digits = False
        header: list[str] | None = None
        for i, line in enumerate(lines):
            if fence is not None:
                if line.strip().startswith(fence):
                    if fence_digits:
                        out.append(Token(fence_start, 1, fence, kind="masked", reason="code fence"))
                    fence = None
                elif not fence_digits and _DIGIT.search(line):
                    fence_digits = True
                continue
            fm = _FENCE.match(line)
            if fm:
                fence, fence_start, fence_digits = fm.group(1), i + 1, False
                continue
            header, separator = _table_header(lines, i, line, header)
            if separator:
                continue
            first = len(out)
            self._line(line, i + 1, out, markdown=True, header=header)
            if i + 1 in pragma_lines:
                for tok in out[first:]:
                    if tok.kind == "number" and tok.reason is None:
                        tok.reason = "pragma: rgt:ignore"
        if fence is not None and fence_digits:
            out.append(Token(fence_start, 1, fence, kind="masked", reason="code fence"))
        return out

    @staticmethod
    def _pragma_scope(text: str, start: int, end: int) -> set[int]:
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        line_end = len(text) if line_end < 0 else line_end
        first = text.count("\n", 0, start) + 1
        alone = not text[line_start:start].strip() and not text[end:line_end].strip()
        if not alone:
            return {first}
        scope = {first}
        lines = text[line_end + 1 :].split("\n") if line_end < len(text) else []
        for k, line in enumerate(lines):
            if not line.strip():
                break
            scope.add(first + 1 + k)
        return scope

    def output_text(self, text: str) -> list[Token]:
        """Tokens of stdout or text/plain: ANSI codes stripped, only the text after a line's
        last carriage return, progress-bar lines dropped."""
        text = normalize(_ANSI.sub("", text)) if "\x1b" in text else normalize(text)
        out: list[Token] = []
        header: list[str] | None = None
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if "\r" in line:
                line = line.rstrip("\r").rsplit("\r", 1)[-1]
            header, separator = _table_header(lines, i, line, header)
            if separator:
                continue
            if not _DIGIT.search(line):
                continue
            if _PROGRESS.search(line[:MAX_LINE]):
                out.append(Token(i + 1, 1, line.strip()[:80], kind="masked", reason="progress bar"))
                continue
            self._line(line, i + 1, out, markdown=False, header=header)
        return out

    def html(self, text: str) -> list[Token]:
        """Tokens of text/html: tables become pipe rows under their header row, other tags
        are dropped."""
        return self.output_text(html_to_text(text))


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
