"""How a shown number is read and compared, shared by :mod:`.numtokens`, :mod:`.check_numbers`
and :mod:`.reconcile`: text normalisation, blanking that keeps columns, decimals shown, the
display-rounding tolerance and the percent and per-mille scales."""

from __future__ import annotations

import re
import unicodedata

# A fraction shown after ``%`` or ``‰`` is scaled by this much.
PERCENT_SCALE: dict[str, int] = {"%": 100, "‰": 1000}

_NOT_NEWLINE = re.compile(r"[^\n]")


# Digit groups split by a thin, narrow no-break or no-break space or an apostrophe (12 345,
# 12'345): one number, read with its thousands as commas (same length, so columns hold).
_GROUPED = re.compile(
    r"(?<![\w.,'\u2019])\d{1,3}(?:[\u2009\u202f\u00a0'\u2019]\d{3})+(?![\d'\u2019])"
)
_GROUP_SEP = re.compile(r"[\u2009\u202f\u00a0'\u2019]")
# A power of ten written with superscripts (× 10⁻⁴): read as ``10^-4`` (NFKC alone would make
# it ``10-4``, a range).
_SUPERSCRIPT_POWER = re.compile(r"10([\u207b\u207a]?)([\u2070\u00b9\u00b2\u00b3\u2074-\u2079]+)")
_SUPERSCRIPTS = str.maketrans(
    "\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079\u207b\u207a", "0123456789-+"
)


def _power(m: re.Match[str]) -> str:
    return "10^" + (m.group(1) + m.group(2)).translate(_SUPERSCRIPTS)


def normalize(text: str) -> str:
    """NFKC, U+2212 minus → ``-`` (NBSP and thin spaces become spaces under NFKC); digit groups
    split by thin or no-break spaces or apostrophes joined as one number (``12,345``); a power
    of ten in superscripts read as ``10^-4``."""
    if "'" in text or not text.isascii():
        text = _GROUPED.sub(lambda m: _GROUP_SEP.sub(",", m.group()), text)
    if not text.isascii():
        text = _SUPERSCRIPT_POWER.sub(_power, text)
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
