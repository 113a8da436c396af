"""Documents for ``rgt reconcile``: Markdown, plain text and LaTeX read as prose blocks and tables,
with code, links, markup, math commands and ignored lines blanked."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from typing import NamedTuple

from ..numtext import blanked, normalize, spaces

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


def normalize_line(line: str) -> str:
    """``line`` normalised (:func:`rgt_jupyter.deliver.numtext.normalize`), with ``+/-`` and
    ``+-`` as ``±`` and tabs as spaces."""
    return normalize(line).replace("+/-", "±").replace("+-", "±").replace("\t", " ")


def _blank(line: str) -> str:
    for pattern in _BLANKS:
        line = pattern.sub(spaces, line)
    return line


def _same_length(m: re.Match[str], new: str) -> str:
    return new.ljust(len(m.group()))


def _clean_md(line: str) -> str:
    """Markdown line -> text with code, links, markup and math commands blanked, same length."""
    line = re.sub(r"`+[^`]*`+", spaces, line)
    line = re.sub(r"<[^<>\n]{1,200}>", spaces, line)
    line = re.sub(r"(!?)\[([^\]]*)\]\(([^)]*)\)", lambda m: _same_length(m, " " + m.group(2)), line)
    line = _blank(line)
    line = _EXP10.sub(lambda m: _same_length(m, "e" + m.group(1)), line)
    line = line.replace("\\pm", " ± ").replace("\\%", " %").replace("\\|", "¦¦")
    line = re.sub(r"\\[A-Za-z]+|\\[,;:! ]", spaces, line)
    line = re.sub(r"[*{}$]|~~", spaces, line)
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


class Cell(NamedTuple):
    """One table cell: its text, its line, and how many columns it spans."""

    text: str
    line: int
    span: int


_MD_DELIM = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?\s*$")
_MD_BREAK = re.compile(r"^\s{0,3}#{1,6}\s|^\s*(?:[-*+]|\d{1,3}[.)])\s+")
#: A part of a document: ``("prose", [(line, text), ...], [])``, or ``("md-table", [], rows)`` /
#: ``("table", [], rows)`` with rows of :class:`Cell` (a Markdown table's header row first).
Unit = tuple[str, list[tuple[int, str]], list[list[Cell]]]


def _md_cells(line: str, lineno: int) -> list[Cell]:
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") else body
    return [Cell(c.replace("¦¦", "|").strip(), lineno, 1) for c in body.split("|")]


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


def markdown(raw_lines: list[str]) -> Iterator[Unit]:
    """Prose blocks (list of (line number, text)) and tables (rows of cells, header first) of a
    Markdown or plain-text file. Fenced code and lines with an ``rgt:ignore`` pragma drop out."""
    cleaned: list[str] = []
    breaks: list[bool] = []
    fence: str | None = None
    in_comment = False
    for raw in raw_lines:
        line = normalize_line(raw)
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


def _tex_cell(raw: str, line: int) -> Cell:
    span = 1
    m = re.match(r"\s*\\multicolumn\s*\{(\d+)\}\s*\{[^{}]*\}\s*\{(.*)\}\s*$", raw, re.S)
    if m:
        span, raw = int(m.group(1)), m.group(2)
    m = re.match(
        r"\s*\\multirow\s*\{[^{}]*\}\s*(?:\[[^\]]*\])?\s*\{[^{}]*\}\s*\{(.*)\}\s*$", raw, re.S
    )
    if m:
        raw = m.group(1)
    return Cell(" ".join(_clean_tex(raw).split()), line, span)


def latex(raw_lines: list[str]) -> Iterator[Unit]:
    """Tables (rows of cells, of each tabular-like environment) and prose blocks of a LaTeX
    file; comments, verbatim environments, the preamble and ``% rgt:ignore`` lines drop out."""
    lines = []
    for raw in raw_lines:
        line = normalize_line(raw)
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
        full = blanked(full[: doc.end()]) + full[doc.end() :]
    full = _VERBATIM.sub(spaces, full)
    chars = list(full)
    for m in _TAB_BEGIN.finditer(full):
        env = m.group(1)
        pos = _skip_group(full, m.end(), "[", "]")
        for _ in range(2 if env in ("tabular*", "tabularx", "tabulary") else 1):
            pos = _skip_group(full, pos, "{", "}")
        end = full.find(f"\\end{{{env}}}", pos)
        end = len(full) if end < 0 else end
        rows: list[list[Cell]] = []
        row_start = pos
        for row_m in re.finditer(r"\\\\(?:\s*\[[^\]]*\])?|$", full[pos:end]):
            row_text = full[row_start : pos + row_m.start()]
            cells: list[Cell] = []
            cell_start = row_start
            for cell_m in re.finditer(r"(?<!\\)&|$", row_text):
                raw = _TEX_RULES.sub(spaces, row_text[cell_start - row_start : cell_m.start()])
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
