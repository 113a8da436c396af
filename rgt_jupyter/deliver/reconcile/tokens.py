"""The numbers of a prose block or table cell for ``rgt reconcile``, each with its role (value,
uncertainty, sample count) or the reason it is ignored."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from ..numtext import PERCENT_SCALE, decimals_of, rounding_tolerance
from .evidence import SPLIT_TERMS, term

_NUM = re.compile(r"[+-]?(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+)(?:[eE][+-]?\d+)?")
_UNITS = {"db", "ms", "s", "sec", "px", "pp", "dbs", "points", "pts"}
_FUNCTION_WORDS = {
    "on", "in", "at", "for", "and", "or", "vs", "versus", "with", "while", "to", "from", "of",
    "than", "by", "over", "compared", "against", "the", "a", "an", "is", "are", "was", "were",
    "which", "that", "when", "as", "but", "after", "under", "across", "respectively", "higher",
    "lower", "better", "worse", "mean", "average", "overall", "only", "also", "i", "e",
}  # fmt: skip
_OTHER_QUANTITY = {
    "hours", "hour", "hrs", "hr", "h", "days", "day", "minutes", "minute", "mins", "min", "weeks",
    "epochs", "epoch", "steps", "step", "iterations", "iteration", "iters", "iter", "samples",
    "images", "examples", "params", "parameters", "layers", "gpus", "gpu", "seeds", "seed",
    "runs", "times", "heads", "tokens", "batches", "nodes", "cores", "classes", "frames",
    "folds", "k", "m", "b", "g", "gb", "mb", "kb", "tb", "million", "billion", "thousand", "x",
    "flops", "gflops", "tflops", "bytes", "bits",
}  # fmt: skip
_STRUCT = re.compile(
    r"(?:^|[^A-Za-z])(?:tables?|tab|figs?|figures?|sec|sections?|§|eqs?|equations?|appendix|app"
    r"|steps?|chapters?|ch|lines?|alg|algorithms?|rows?|columns?|cols?|stages?|phases?|parts?"
    r"|theorems?|lemmas?|defs?|definitions?|props?|propositions?|exps?|experiments?|versions?"
    r"|ver|python|torch|pytorch|cuda|cudnn|numpy|jax|tensorflow|epochs?|iterations?|iters?"
    r"|layers?|items?|no|seeds?|rank|batch|gpus?|ids?|#)\.?\s*$",
    re.I,
)
_KEY_EQ = re.compile(r"(?:^|[^\w.])([^\W\d][\w.\-]*)\s*=\s*$")
_N_KEY = re.compile(r"(?:^|[^\w])[nN]\s*[=:]\s*$")
_STD_KEY = re.compile(r"(?:^|[^\w])(?:std|sd|stdev|sigma|σ)\s*[=:]?\s*$", re.I)


@dataclass
class Tok:
    """One number of a text: its span and text, its value as mantissa and exponent, and its
    role (or why it is ignored); ``attached`` holds the ``± b`` and ``n=`` that follow a value."""

    start: int
    end: int
    text: str
    mantissa: Decimal
    decimals: int
    exp: int
    factor: int = 1  # 100 after %, 1000 after ‰
    role: str = "value"  # value | uncertainty | n | ignored
    reason: str = ""
    attached: list[Tok] = field(default_factory=list)

    @property
    def int_like(self) -> bool:
        """Written as an integer (no decimals, no exponent)."""
        return self.decimals == 0 and self.exp == 0

    @property
    def shown(self) -> float:
        """The value as written (before ``%`` or ``‰``)."""
        return float(self.mantissa) * 10.0**self.exp

    @property
    def sig_digits(self) -> int:
        """Significant digits as written."""
        digits = self.mantissa.as_tuple().digits
        return len("".join(map(str, digits)).lstrip("0")) or 1

    def matches(self, target: float, *, absolute: bool = False) -> bool:
        """True when ``target`` shows as this text at its decimals (half-up or half-even)."""
        shown = abs(self.shown) if absolute else self.shown
        tol = rounding_tolerance(10.0 ** (self.exp - self.decimals), target)
        return abs(shown - target) <= tol


def tokens(text: str, anchor_words: frozenset[str]) -> list[Tok]:
    """Every number of ``text`` with its role; ``ignored`` ones carry the reason."""
    out: list[Tok] = []
    for m in _NUM.finditer(text):
        start, end, raw = m.start(), m.end(), m.group()
        before = text[start - 1] if start > 0 else " "
        glued = raw[0] in "+-" and not (before.isspace() or before in "([=:,/±")
        if glued:  # a hyphen or a plus inside a word, not a sign
            start, raw = start + 1, raw[1:]
        body = raw.lstrip("+-")
        mant, _, exp_text = body.replace(",", "").lower().partition("e")
        try:
            mantissa = Decimal(("-" if raw.startswith("-") else "") + mant)
        except InvalidOperation:
            continue
        tok = Tok(start, end, raw, mantissa, decimals_of(mant), int(exp_text or 0))
        prefix, rest = text[max(0, start - 80) : start], text[end : end + 80]
        pre1 = text[start - 1] if start > 0 else " "
        if glued:
            range_end = before.isdigit() and text[start - 1] == "-"
            tok.role, tok.reason = "ignored", "range" if range_end else "identifier"
        elif pre1.isalnum() or pre1 in "_.@#^'\\":
            tok.role, tok.reason = "ignored", "identifier"
        elif pre1 == "×":
            tok.role, tok.reason = "ignored", "scale factor"
        elif re.match(r"\.\d", rest):
            tok.role, tok.reason = "ignored", "version"
        elif re.match(r"(?:-|\s*–\s*)\d", rest):
            tok.role, tok.reason = "ignored", "range"
        suffix = re.match(r"\s?(%|‰)|([A-Za-z]+)|\s*×", rest)
        if tok.role == "value" and suffix:
            if suffix.group(1):
                tok.factor, tok.end = PERCENT_SCALE[suffix.group(1)], end + suffix.end()
                tok.text += suffix.group(1)
            elif suffix.group(2) is not None:
                if suffix.group(2).lower() not in _UNITS:
                    tok.role, tok.reason = "ignored", "identifier or other quantity"
            else:
                tok.role, tok.reason = "ignored", "scale factor"
        if tok.role == "value":
            _classify(tok, prefix, text[tok.end :], anchor_words)
        out.append(tok)
    return out


def _classify(tok: Tok, prefix: str, rest: str, anchor_words: frozenset[str]) -> None:
    key = _KEY_EQ.search(prefix)
    if re.search(r"±\s*$", prefix):
        tok.role = "uncertainty"
    elif _N_KEY.search(prefix):
        tok.role = "n"
        if re.match(r"\s*(?:seeds?|runs?)\b", rest, re.I):
            tok.role, tok.reason = "ignored", "seed count"
    elif _STD_KEY.search(prefix):
        tok.role = "uncertainty"
    elif key and term(key.group(1)) not in anchor_words:
        tok.role, tok.reason = "ignored", f"setting {key.group(1)}="
    elif re.search(r"(?:^|\W)v\s*$|(?:python|torch|pytorch|cuda|cudnn)\s*$|==\s*$", prefix, re.I):
        tok.role, tok.reason = "ignored", "version"
    elif _STRUCT.search(prefix):
        tok.role, tok.reason = "ignored", "reference to a table, figure or section"
    elif (
        tok.int_like
        and tok.factor == 1
        and not tok.text.startswith(("+", "-"))
        and 1900 <= tok.mantissa <= 2099
    ):
        tok.role, tok.reason = "ignored", "year"
    else:
        word = re.match(r"\s+([A-Za-z][A-Za-z\-]*)", rest)
        if word:
            w = word.group(1).lower()
            if w in _OTHER_QUANTITY:
                tok.role, tok.reason = "ignored", f"a count of {w}"
            elif tok.int_like and not (
                w in _UNITS or w in _FUNCTION_WORDS or w in anchor_words or w in SPLIT_TERMS
            ):
                tok.role, tok.reason = "ignored", f"a count of {w}"


def attach(toks: list[Tok]) -> list[Tok]:
    """Hang each ``± b`` and ``n=`` on the value before it; returns the values."""
    values: list[Tok] = []
    last: Tok | None = None
    for tok in toks:
        if tok.role == "value":
            values.append(tok)
            last = tok
        elif tok.role in ("uncertainty", "n"):
            if last is None:
                tok.role, tok.reason = "ignored", f"{tok.role} without a value"
                continue
            last.attached.append(tok)
            if tok.role == "uncertainty" and tok.factor != 1 and last.factor == 1:
                last.factor = tok.factor
    return values
