"""Which EVIDENCE row a number of ``rgt reconcile`` is compared with, and whether it shows it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from .reconcile_evidence import _Entry
from .reconcile_tokens import _Tok


class _Occ(NamedTuple):
    start: int
    end: int
    term: str


def _gap(occ: _Occ, tok: _Tok | None) -> float:
    if tok is None:
        return 0.0
    if occ.end <= tok.start:
        return float(tok.start - occ.end)
    if occ.start >= tok.end:
        return occ.start - tok.end + 0.5  # a name before the number wins a tie
    return 0.0


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
