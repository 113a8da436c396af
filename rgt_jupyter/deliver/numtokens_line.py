"""One line of notebook text scanned for numbers: code spans, URLs, dates, paths and the like
blanked (same length, so columns hold), then each number read with its value, decimals, anchor
words and table header, or the reason it is ignored."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from .numtext import blanked, decimals_of
from .numtokens_base import _TOKEN, MULTIPLIER, Token, sig_digits
from .numtokens_rules import _UNITS, _ignored

_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_UNIT_SPACED = re.compile(r" ?" + _UNITS + r"(?![A-Za-z])")
_GLUED_RUN = re.compile(r"[A-Za-z_][\w.-]*\d$")  # a digit run glued to letters before a '-'
_WORD = re.compile(r"[a-z][a-z0-9]*")
_DIGIT = re.compile(r"\d")

_COMMON_MASKS = (
    r"(?P<code>(?P<tick>`+)[^`\n]+?(?P=tick))",
    r"(?P<placeholder>\{\{\s*rgt:[^{}\n]*\}\})",
    r"(?P<url>(?:https?|ftp|file|s3|gs)://[^\s<>\"')\]]+|www\.[^\s<>\"')\]]+)",
    r"(?P<uuid>\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)",
    r"(?P<date>\b\d{8}[T_-]?\d{6}\b|\b(?:19|20)\d{2}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}"
    r"(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b|\b(?:19|20)\d{2}-(?:0[1-9]|1[0-2])\b)",
    r"(?P<time>\b\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?\b)",
    r"(?P<hex>\b0[xX][0-9a-fA-F]+\b|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,}\b)",
    r"(?P<path>(?<![\w/.])(?=[\w.~/+-]*[A-Za-z])(?:~|\.{1,2})?/?(?:[\w.+-]+/)+[\w.+-]*)",
    r"(?P<exec>\b(?:In|Out)\s?\[\s*\d*\s*\]:?)",
    r"(?P<entity>&#[xX]?[0-9a-fA-F]+;)",
    r"(?P<shape>\[?\d+ rows? [x×] \d+ columns?\]?)",
)
_MARKDOWN_MASKS = (
    r"(?P<image>!\[[^\]\n]*\]\([^)\n]*\))",
    r"(?P<link>(?<=\])\([^)\s]*(?:\s+\"[^\"]*\")?\))",
    r"(?P<footnote>\[\^[^\]\n]+\])",
    r"(?P<citation>\[\d{1,3}(?:\s*[,;–-]\s*\d{1,3})*\](?![(:]))",
    r"(?P<html></?[A-Za-z][^<>\n]*>|<![^<>\n]*>)",
)
_OUTPUT_MASKS = (
    r"(?P<repr><(?:Figure|Axes|matplotlib\.|[\w.]+ object\b|[\w.]+ at 0x)[^<>\n]*>)",
    r"(?P<timing>^(?:CPU times:|Wall time:).*$|\d[\d.]* ?[mµun]?s ± [\d.]+ ?[mµun]?s per loop.*$)",
)
_MASK_REASONS = {
    "code": "code span",
    "url": "URL",
    "uuid": "UUID",
    "date": "date or timestamp",
    "time": "time of day or duration",
    "hex": "hex string or address",
    "path": "path",
    "exec": "execution count",
    "entity": "HTML entity",
    "shape": "DataFrame shape footer",
    "image": "image",
    "link": "link target",
    "footnote": "footnote",
    "citation": "citation",
    "html": "HTML markup",
    "repr": "object repr",
    "timing": "cell timing",
}
_MD_MASK = re.compile("|".join(_COMMON_MASKS + _MARKDOWN_MASKS))
_OUT_MASK = re.compile("|".join(_COMMON_MASKS + _OUTPUT_MASKS))

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(\d+(?:\.\d+)*\.?)(?=\s|$)")
_LIST_MARKER = re.compile(r"^\s*(?:[-*+]\s+)?(\d{1,9})[.)](?=\s|$)")
_REFDEF = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*\S")


def _blank(text: str, start: int, end: int) -> str:
    chunk = text[start:end]
    return text[:start] + blanked(chunk) + text[end:]


def _cells(line: str) -> list[tuple[int, int, str]]:
    """A table row's cells as (start, end, text), without the outer pipes' empty cells."""
    spans: list[tuple[int, int, str]] = []
    start = 0
    for i, ch in enumerate(line):
        if ch == "|" and (i == 0 or line[i - 1] != "\\"):
            spans.append((start, i, line[start:i].strip()))
            start = i + 1
    spans.append((start, len(line), line[start:].strip()))
    if spans and not spans[0][2] and line.lstrip().startswith("|"):
        spans = spans[1:]
    if spans and not spans[-1][2] and line.rstrip().endswith("|"):
        spans = spans[:-1]
    return spans


#: Lines longer than this (a minified blob, a digit dump) are reported, not scanned.
MAX_LINE = 2000


@dataclass(frozen=True, slots=True)
class _Line:
    """One line being scanned: as written (``raw``, for context and anchor words), with code
    spans, URLs and the like blanked (``clean``, same columns), and its table header."""

    raw: str
    clean: str
    lineno: int
    words: frozenset[str]
    header: list[str] | None
    cells: list[tuple[int, int, str]] | None


class _LineScanner:
    """Reads one line at a time; ``anchors`` are the words that anchor a number."""

    def __init__(self, anchors: frozenset[str]) -> None:
        self.anchors = anchors

    def _line(
        self, line: str, lineno: int, out: list[Token], *, markdown: bool, header: list[str] | None
    ) -> None:
        if not _DIGIT.search(line) and "{{" not in line:
            return
        if len(line) > MAX_LINE:
            # Said, not scanned: the masks below cost more than linear time on such lines.
            reason = f"line of {len(line)} characters not scanned"
            out.append(Token(lineno, 1, line[:80], kind="masked", reason=reason))
            return
        clean = line
        if markdown:
            for pattern, reason in ((_HEADING, "heading number"), (_LIST_MARKER, "list marker")):
                m = pattern.match(clean)
                if m:
                    out.append(
                        Token(lineno, m.start(1) + 1, m.group(1), kind="masked", reason=reason)
                    )
                    clean = _blank(clean, m.start(1), m.end(1))
            if _REFDEF.match(clean):
                if _DIGIT.search(clean):
                    out.append(
                        Token(lineno, 1, clean.strip()[:80], kind="masked", reason="link target")
                    )
                return
        mask = _MD_MASK if markdown else _OUT_MASK
        pieces: list[str] = []
        last = 0
        for m in mask.finditer(clean):
            kind = m.lastgroup
            if kind == "tick":  # the backreference group of a code span
                kind = "code"
            start, end = m.span()
            if start == end:
                continue
            seg = m.group(0)
            if kind == "placeholder":
                out.append(Token(lineno, start + 1, seg, kind="placeholder"))
            elif _DIGIT.search(seg):
                out.append(
                    Token(
                        lineno,
                        start + 1,
                        seg[:80],
                        kind="masked",
                        reason=_MASK_REASONS.get(kind or "", "masked"),
                    )
                )
            pieces.append(clean[last:start])
            pieces.append(" " * (end - start))
            last = end
        if pieces:
            pieces.append(clean[last:])
            clean = "".join(pieces)
        if not _DIGIT.search(clean):
            return
        ln = _Line(
            raw=line,
            clean=clean,
            lineno=lineno,
            words=frozenset(_WORD.findall(line.lower())),
            header=header,
            cells=_cells(clean) if header is not None else None,
        )
        for m in _TOKEN.finditer(clean):
            self._token(ln, m, out)

    def _token(self, ln: _Line, m: re.Match[str], out: list[Token]) -> None:
        body = m.group("body")
        body_start = m.start("body")
        if "," in body and not _THOUSANDS.fullmatch(body):
            # A list such as 1,2,3: one number per part; exponent and suffix stay with the last.
            pos = body_start
            parts = body.split(",")
            for k, part in enumerate(parts):
                last = k == len(parts) - 1
                self._emit(
                    ln,
                    out,
                    sign=m.group("sign") if k == 0 else None,
                    sign_start=m.start() if k == 0 else pos,
                    body=part,
                    body_start=pos,
                    exp=m.group("exp") if last else None,
                    suf=m.group("suf") if last else None,
                    end=m.end() if last else pos + len(part),
                )
                pos += len(part) + 1
            return
        self._emit(
            ln,
            out,
            sign=m.group("sign"),
            sign_start=m.start(),
            body=body,
            body_start=body_start,
            exp=m.group("exp"),
            suf=m.group("suf"),
            end=m.end(),
        )

    def _emit(
        self,
        ln: _Line,
        out: list[Token],
        *,
        sign: str | None,
        sign_start: int,
        body: str,
        body_start: int,
        exp: str | None,
        suf: str | None,
        end: int,
    ) -> None:
        s = ln.clean
        role = "value"
        reason: str | None = None
        start = sign_start
        prev_sign = s[sign_start - 1] if sign_start > 0 else ""
        if sign:
            if sign.startswith("±"):
                role = "uncertainty"
            elif prev_sign and (prev_sign.isalnum() or prev_sign in "_)]}.%'\""):
                if sign == "-" and (prev_sign.isalpha() or prev_sign == "_"):
                    reason = "identifier (glued to letters)"
                elif sign == "-" and prev_sign.isdigit() and _GLUED_RUN.search(s, 0, sign_start):
                    reason = "identifier (glued to letters)"  # Llama-2-7B, T5-11B
                elif prev_sign.isdigit() or prev_sign == "%":
                    role = "range"
                sign = None
                start = body_start
        if sign is None:
            start = body_start
        prev = s[body_start - 1] if body_start > 0 else ""
        nxt = s[end] if end < len(s) else ""
        text = s[start:end].strip()
        tok = Token(ln.lineno, start + 1, text, role=role)
        tok.context = ln.raw[max(0, start - 40) : end + 40].strip()
        out.append(tok)
        if reason is None:
            reason = _ignored(s, body, body_start, prev, nxt, end, sign, exp, suf)
        # Value, decimals, significant digits.
        mantissa = body.replace(",", "")
        if mantissa.count(".") > 1:
            tok.reason = reason or "version (dotted)"
            return
        try:
            value = Decimal(mantissa)
        except InvalidOperation:
            tok.reason = reason or "not a number"
            return
        decimals = decimals_of(mantissa)
        if exp:
            e = exp.strip()
            power = re.search(r"[-+]?\d+", e.split("10^")[-1] if "10^" in e else e.lstrip("eE^"))
            if power and len(power.group(0).lstrip("+-")) > 4:
                # 10^±10000 and beyond is no measured number (and would overflow a float).
                tok.reason = reason or "exponent out of range"
                return
            k = int(power.group(0)) if power else 0
            if e[0] == "^":
                if mantissa != "10":
                    reason = reason or "math expression"
                    k = 0
                else:
                    value = Decimal(1)
            tok.exponent = k
            value = value.scaleb(k)
        suffix = (suf or "").strip()
        tok.suffix = suffix
        if suffix in MULTIPLIER:
            value = value.scaleb(MULTIPLIER[suffix])
        if sign == "-":
            value = -value
        tok.sign_shown = sign in ("-", "+")
        tok.value = float(value)
        tok.decimals = decimals
        tok.sig = sig_digits(mantissa)
        tok.thousands = "," in body
        if not suffix:
            um = _UNIT_SPACED.match(s, end)
            if um:
                tok.unit = um.group(0).strip()
        # Anchors: the line's words, plus the table cell's column header and row header.
        scope = ln.words
        if ln.header is not None and ln.cells:
            col = sum(1 for c in ln.cells if c[0] <= body_start) - 1
            col_name = ln.header[col] if 0 <= col < len(ln.header) else ""
            row_head = ln.cells[0][2] if col > 0 else ""
            tok.header = f"{row_head} / {col_name}" if row_head and col_name else col_name
            if tok.header:
                scope = scope | frozenset(_WORD.findall(tok.header.lower()))
        tok.words = scope
        tok.anchored = role == "uncertainty" or bool(scope & self.anchors)
        is_int = decimals == 0 and not exp and not suffix and not tok.thousands and sign is None
        if reason is None and is_int and 1900 <= value <= 2099:
            if tok.anchored:
                tok.year_like = True
            else:
                reason = "year"
        tok.reason = reason
