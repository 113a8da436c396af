"""Scanning one document for ``rgt reconcile``: the numbers of each sentence and table cell that
a metric anchors, each compared with the EVIDENCE row its context picks, and whether it shows
that row's value."""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections.abc import Callable, Iterator
from typing import NamedTuple

from .documents import Cell, Unit, normalize_line
from .evidence import Entry, term
from .report import Ignored, Log
from .tokens import Tok, attach, tokens

_TIGHT = 40  # characters between a number and its anchor within which integers are checked too
_CONTEXT = 120

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


def _term_pattern(term: str) -> str:
    return r"\s+".join(re.escape(part) for part in term.split())


def _constant(line: int) -> Callable[[int], int]:
    return lambda _offset: line


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[\"']|$)")


# -- which EVIDENCE row a number is compared with, and whether it shows it


class _Occ(NamedTuple):
    start: int
    end: int
    term: str


def _gap(occ: _Occ, tok: Tok | None) -> float:
    if tok is None:
        return 0.0
    if occ.end <= tok.start:
        return float(tok.start - occ.end)
    if occ.start >= tok.end:
        return occ.start - tok.end + 0.5  # a name before the number wins a tie
    return 0.0


def _paired(tok: Tok, toks: list[Tok], metric_occs: list[_Occ], text: str) -> _Occ | None:
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
    cands: list[Entry], occs: list[_Occ], near: Tok | None
) -> tuple[list[Entry], list[Entry]]:
    """The candidates whose method names (then metric qualifiers, then split words) stand
    nearest to the number, and the candidates none of whose method names appear at all."""
    picked = cands
    unmentioned: list[Entry] = []
    stages: tuple[Callable[[Entry], frozenset[str]], ...] = (
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


def _match(tok: Tok, entries: list[Entry], factor: int) -> tuple[Entry, float] | None:
    for entry in entries:
        for target, scale in _targets(entry.value, factor):
            if tok.matches(target):
                return entry, scale
    return None


# -- the scanner


class Scanner:
    """Checks the documents against the entries; everything lands in ``log``."""

    def __init__(self, entries: list[Entry], log: Log) -> None:
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
        """Where ``text`` names a term of some entry (metric, alias, id, qualifier, split)."""
        if not self.entries:
            return []
        return [_Occ(m.start(), m.end(), term(m.group())) for m in self.regex.finditer(text)]

    def scan(self, doc: str, raw_lines: list[str], units: Iterator[Unit]) -> None:
        """Check the prose blocks and tables ``units`` of document ``doc`` (``raw_lines``: its
        lines as written, for context)."""
        self.doc = doc
        self.context_lines = [" ".join(normalize_line(line).split()) for line in raw_lines]
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

    def _ignore(self, line: int, toks: list[Tok], reason: str | None = None) -> None:
        for tok in toks:
            if reason is not None or tok.role == "ignored":
                self.log.ignored.append(Ignored(self.doc, line, tok.text, reason or tok.reason))

    # -- prose ----------------------------------------------------------------------------------

    def _prose(self, block: list[tuple[int, str]]) -> None:
        text = "\n".join(t for _, t in block)
        starts = list(itertools.accumulate((len(t) + 1 for _, t in block), initial=0))

        def line_of(offset: int) -> int:
            return block[bisect.bisect_right(starts, offset) - 1][0]

        toks = tokens(text, self.anchor_words)
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
            for tok in attach(s_toks):
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
        self, tok: Tok, text: str, toks: list[Tok], occs: list[_Occ], anchored: list[Entry]
    ) -> list[Entry]:
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

    def _table(self, rows: list[list[Cell]], header_rows: int | None) -> None:
        """Each number cell is checked against the metric of its column header (or, in a
        transposed table, of its row label) and the method its row label or header names. When
        some row names an EVIDENCE method, rows that name none (other work) are left alone."""
        toks = {id(c): tokens(c.text, self.anchor_words) for row in rows for c in row}
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
        jobs: list[tuple[Cell, list[list[Entry]], list[_Occ], int, bool, set[str]]] = []
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
            values = attach(cell_toks)
            if table_names_methods and not named:
                self._ignore(cell.line, values, "its row names no EVIDENCE method")
                continue
            flat = list({x.index: x for g in groups for x in g}.values())
            for i, tok in enumerate(values):
                cands = groups[i] if len(groups) == len(values) > 1 else flat
                line_of = _constant(cell.line)
                self._judge(tok, cands, [], ctx_occs, None, line_of, factor, split_words)

    def _groups(self, occs: list[_Occ]) -> list[list[Entry]]:
        """The entries of each metric named in a header or row label, in order."""
        groups: list[list[Entry]] = []
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
        tok: Tok,
        cands: list[Entry],
        others: list[Entry],
        occs: list[_Occ],
        near: Tok | None,
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

    def _attached(self, att: Tok, entry: Entry, scales: list[float], line: int) -> None:
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

    def _derived(self, tok: Tok, cands: list[Entry], factor: int) -> tuple[Entry, str] | None:
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
