"""How a shown number is read and compared, shared by :mod:`.numtokens`, :mod:`.check_numbers`
and :mod:`.reconcile`: text normalisation, blanking that keeps columns, decimals shown, the
display-rounding tolerance and the percent and per-mille scales."""

from __future__ import annotations

import re
import unicodedata

# A fraction shown after ``%`` or ``‰`` is scaled by this much.
PERCENT_SCALE: dict[str, int] = {"%": 100, "‰": 1000}

_NOT_NEWLINE = re.compile(r"[^\n]")


def normalize(text: str) -> str:
    """NFKC, U+2212 minus → ``-`` (NBSP and thin spaces become spaces under NFKC)."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text).replace("\u2212", "-")
    return text


def blanked(text: str) -> str:
    """``text`` with every character but newlines turned into a space (same length)."""
    return _NOT_NEWLINE.sub(" ", text)


def spaces(m: re.Match[str]) -> str:
    """A regex replacement that blanks the match (same length, newlines kept)."""
    return _NOT_NEWLINE.sub(" ", m.group())


def decimals_of(mantissa: str) -> int:
    """How many decimals a mantissa (digits, at most one ``.``) shows."""
    return len(mantissa.partition(".")[2])


def rounding_tolerance(step: float, magnitude: float) -> float:
    """How far a value may lie from a number shown to ``step`` (its last digit's place) and
    still show as it, at half-up or half-even rounding: half a step, plus a relative 1e-9 of
    ``magnitude`` for floating-point error."""
    return 0.5 * step + 1e-9 * max(1.0, abs(magnitude))
