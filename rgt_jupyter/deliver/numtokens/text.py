"""Numbers in notebook text: one scanner for markdown and raw cells, outputs and HTML.

A number found in text or code is a :class:`Token`. Each line of text is normalised, its code
spans, URLs, dates, paths and the like blanked (same length, so columns hold), then each number
is read with its value, decimals, anchor words and table header, or the reason it is ignored (a
version, a section, table or figure reference, an identifier such as ``ResNet-50``, dimensions
such as ``256x256``, a file name, an equation or item reference). :class:`TextScanner` reads
whole texts: markdown and raw cells (fences, comments and pragmas), stdout and text/plain
outputs (ANSI codes, carriage returns, progress bars), and HTML (tables as pipe rows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from ..numtext import blanked, decimals_of, normalize, spaces
from .context import (
    ANY_HEADING,
    BIBLIOGRAPHY_MASKS,
    BIBLIOGRAPHY_REASONS,
    MEASURE_WORDS,
    REFS_LINE,
    REFS_TITLE,
    approximate_duration,
    context_reason,
    sentence_setting,
    setting_reason,
)
from .markup import html_to_text
from .reasons import UNITS, ignored_reason

# -- a token, and what its text means

# Metric, split and result words: a number in the same line or table row/column is anchored.
METRIC_WORDS: frozenset[str] = frozenset(
    """accuracy acc psnr ssim lpips fid bleu rouge meteor cider f1 auc auroc auprc ap map miou
    iou dice precision recall error err loss perplexity ppl wer cer mse mae rmse nll bpd elbo
    score top1 top5 latency throughput speedup db flops gflops params ece kl r2 spearman pearson
    correlation em reward mrr ndcg hit recall1 test val validation dev holdout""".split()
)

#: A number as written: groups ``sign``, ``body`` (the digits), ``exp`` and ``suf`` (suffix).
TOKEN = re.compile(
    r"(?P<sign>[-+]|±\s?)?"
    r"(?P<body>\d+(?:[.,]\d+)*|\.\d+)"
    r"(?P<exp>[eE][-+]?\d+\b|\s?(?:[×x*·]|\\times|\\cdot)\s?10\^\{?[-+]?\d+\}?|\^\{?[-+]?\d+\}?)?"
    r"(?P<suf>\s?%|‰|\s?pp\b|[kKMBG]\b|[×x](?![A-Za-z0-9]))?"
)

MULTIPLIER = {"k": 3, "K": 3, "M": 6, "B": 9, "G": 9}


@dataclass(slots=True)
class Token:
    """One number (or placeholder, or ignored span) found in a cell's text or code."""

    line: int
    col: int
    text: str
    value: float | None = None
    decimals: int | None = None
    sig: int = 0
    exponent: int = 0
    suffix: str = ""
    unit: str = ""
    thousands: bool = False
    sign_shown: bool = False
    role: str = "value"
    kind: str = "number"  # number | placeholder | masked
    reason: str | None = None
    anchored: bool = False
    year_like: bool = False
    context: str = ""
    header: str = ""
    name: str = ""  # code: the keyword, dict key or assignment target the literal feeds
    #: Followed by a unit or a word of measure (hours, points, times): a quantity measured.
    measured: bool = False
    #: The five words either side of it (a whole number is a result only with one of these).
    close: frozenset[str] = field(default_factory=frozenset)
    #: A setting its sentence names (``batch size``), if any.
    setting: str | None = None
    words: frozenset[str] = field(default_factory=frozenset)


def sig_digits(body: str) -> int:
    """Significant digits of a shown literal; trailing zeros of an integer do not count."""
    digits = body.replace(",", "").replace("_", "")
    integer = "." not in digits
    digits = digits.replace(".", "").lstrip("0")
    if integer:
        digits = digits.rstrip("0")
    return len(digits)


# -- one line of text

_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_UNIT_SPACED = re.compile(r" ?" + UNITS + r"(?![A-Za-z])")
_GLUED_RUN = re.compile(r"[A-Za-z_][\w.-]*\d$")  # a digit run glued to letters before a '-'
_WORD = re.compile(r"[a-z][a-z0-9]*")
_DIGIT = re.compile(r"\d")
_LETTER = re.compile(r"[A-Za-z]")
_NEXT = re.compile(r" ?([A-Za-z]+)")
_TIME_UNITS = frozenset("ms µs us ns s h min".split())
_TOPK = re.compile(r"\btop[-_ ]([15])\b")

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
    *BIBLIOGRAPHY_MASKS,
)
_MARKDOWN_MASKS = (
    r"(?P<image>!\[[^\]\n]*\]\([^)\n]*\))",
    r"(?P<link>(?<=\])\([^)\s]*(?:\s+\"[^\"]*\")?\))",
    r"(?P<footnote>\[\^[^\]\n]+\])",
    r"(?P<citation>\[\d{1,3}(?:\s*[,;–-]\s*\d{1,3})*\](?!\())",
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
    **BIBLIOGRAPHY_REASONS,
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

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(\d+(?:\.\d+)*\.?)(?=[\s:)]|$)")
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
        for m in TOKEN.finditer(clean):
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
            reason = ignored_reason(s, body, body_start, prev, nxt, end, sign, exp, suf)
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
        # Anchors: the words of the number's own sentence (of the line, within 80 characters
        # either side), plus the table cell's column header and row header; in a table row,
        # its cell's words.
        scope = _near_words(ln, start, end)
        headers: list[str] = []
        if ln.header is not None and ln.cells:
            col = sum(1 for c in ln.cells if c[0] <= body_start) - 1
            col_name = ln.header[col] if 0 <= col < len(ln.header) else ""
            # The row's label: its first cell with words in it (a table may open with an
            # empty column).
            label = next((k for k, c in enumerate(ln.cells) if _LETTER.search(c[2])), 0)
            row_head = ln.cells[label][2] if col > label else ""
            tok.header = f"{row_head} / {col_name}" if row_head and col_name else col_name
            if tok.header:
                scope = scope | frozenset(_WORD.findall(tok.header.lower()))
            if col == 0 and _LETTER.search(ln.cells[0][2]) and reason is None:
                reason = "row label (a name in the table's first column)"
            headers = [row_head, col_name]
        tok.words = scope
        if reason is None and decimals == 0 and not suffix and not headers:
            if approximate_duration(s[max(0, start - 16) : start], s, end):
                reason = "an approximate duration (about 3 minutes)"
        if not headers and decimals == 0:
            tok.setting = sentence_setting(_WORD.findall(_sentence(ln.raw, start, end).lower()))
        tok.close = frozenset(
            _WORD.findall(ln.raw[max(0, start - 60) : start].lower())[-5:]
            + _WORD.findall(ln.raw[end : end + 60].lower())[:5]
        )
        nw = _NEXT.match(s, end)
        tok.measured = bool(tok.unit) or (nw is not None and nw.group(1).lower() in MEASURE_WORDS)
        if reason is None:
            reason = context_reason(
                s,
                start,
                s[start - 1] if start else "",
                end,
                suffix,
                tok.unit,
                decimals,
                tok.value,
                role,
                scope,
                METRIC_WORDS,
                in_table=bool(headers),
                headers_words=frozenset(_WORD.findall(" ".join(headers).lower())),
            )
        if reason is None and tok.unit not in _TIME_UNITS:
            # The words before it in its own sentence, or its own table cell.
            lo = max(0, start - 40)
            if ln.cells is not None:
                lo = max([lo] + [a for a, _b, _t in ln.cells if a <= start])
            reason = setting_reason(s[lo:start], headers)
        tok.anchored = role == "uncertainty" or bool(scope & self.anchors)
        is_int = decimals == 0 and not exp and not suffix and not tok.thousands and sign is None
        if reason is None and is_int and 1900 <= value <= 2099:
            if tok.anchored:
                tok.year_like = True
            else:
                reason = "year"
        tok.reason = reason


_SENTENCE_END = re.compile(r"[.!?;](?:\s|$)|\s[-–—]\s")


def _sentence(raw: str, start: int, end: int) -> str:
    """The sentence of ``raw`` a number at ``[start, end)`` stands in (within 80 characters
    either side)."""
    lo, hi = max(0, start - 80), min(len(raw), end + 80)
    for before in _SENTENCE_END.finditer(raw, lo, start):
        lo = before.end()
    after = _SENTENCE_END.search(raw, end, hi)
    if after is not None:
        hi = after.start() + 1
    return raw[lo:hi]


def _near_words(ln: _Line, start: int, end: int) -> frozenset[str]:
    """The words of the sentence a number stands in (of its table cell, in a table row)."""
    if ln.cells is not None:
        for a, b, _text in ln.cells:
            if a <= start < b:
                return _words(ln.raw[a:b])
    if len(ln.raw) <= 120:
        return _words(ln.raw)
    return _words(_sentence(ln.raw, start, end))


def _words(text: str) -> frozenset[str]:
    """The words of ``text`` (lower case; ``top-1``/``top_1`` as ``top1``)."""
    low = text.lower()
    if "top" in low:
        low = _TOPK.sub(r"top\1", low)
    return frozenset(_WORD.findall(low))


# -- whole texts: markdown, outputs, HTML

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
    split words, results.json keys). A reference list (under a "References" or "Bibliography"
    heading, to the next heading of its level) holds no result: its numbers are ignored, also
    in the markdown cells after the heading's own cell."""

    def __init__(self, anchors: frozenset[str]) -> None:
        super().__init__(anchors)
        #: The level of the reference list's heading while one is being read (7: a bold line).
        self.references: int | None = None

    def _heading(self, line: str) -> None:
        """Start or end the reference list at a heading line."""
        hm = ANY_HEADING.match(line)
        if hm is not None:
            level = len(hm.group(1))
            if REFS_TITLE.fullmatch(hm.group(2)):
                self.references = level
            elif self.references is not None and level <= self.references:
                self.references = None
        elif REFS_LINE.match(line):
            self.references = 7

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
            self._heading(line)
            first = len(out)
            self._line(line, i + 1, out, markdown=True, header=header)
            if i + 1 in pragma_lines or self.references is not None:
                why = (
                    "pragma: rgt:ignore"
                    if i + 1 in pragma_lines
                    else "bibliography (reference list)"
                )
                for tok in out[first:]:
                    if tok.kind == "number" and tok.reason is None:
                        tok.reason = why
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
