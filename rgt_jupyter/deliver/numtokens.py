"""Numbers in notebook text and code, as tokens with their position and why one is ignored.

Text (markdown, raw cells, outputs) is normalised (NFKC, U+2212 → ``-``), code spans, fences,
URLs, link targets, HTML comments and tags are blanked (same length, so columns hold), and each
line is scanned once with precompiled patterns. Code is read with :mod:`ast` (after IPython's
input transformer when the cell is not plain Python), so only numeric literals count, each with
its call, keyword and assignment target. Classification against results.json is the caller's
(:mod:`.check_numbers`); here a token is either a candidate (``reason is None``), a placeholder,
or ignored with a reason.

The work is split: :mod:`.numtokens_base` (:class:`Token`), :mod:`.numtokens_line` (one line of
text), :mod:`.numtokens_rules` (why a number of text is not a value), :mod:`.numtokens_text`
(markdown, outputs, HTML) and :mod:`.numtokens_code` (code cells); this module gathers them.
"""

from __future__ import annotations

from .numtext import normalize
from .numtokens_base import METRIC_WORDS, MULTIPLIER, Token, sig_digits
from .numtokens_code import CodeScanner, metric_named, source_numbers
from .numtokens_text import TextScanner, html_to_text

__all__ = [
    "METRIC_WORDS",
    "MULTIPLIER",
    "CodeScanner",
    "TextScanner",
    "Token",
    "html_to_text",
    "metric_named",
    "normalize",
    "sig_digits",
    "source_numbers",
]
