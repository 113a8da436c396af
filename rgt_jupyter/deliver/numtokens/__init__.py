"""Numbers in notebook text and code, as tokens with their position and why one is ignored.

Text (markdown, raw cells, outputs) is normalised (NFKC, U+2212 → ``-``), code spans, fences,
URLs, link targets, HTML comments and tags are blanked (same length, so columns hold), and each
line is scanned once with precompiled patterns. Code is read with :mod:`ast` (after IPython's
input transformer when the cell is not plain Python), so only numeric literals count, each with
its call, keyword and assignment target. Classification against results.json is the caller's
(:mod:`rgt_jupyter.deliver.check_numbers`); here a token is either a candidate (``reason is
None``), a placeholder, or ignored with a reason.

This package's face is what it exports here: :class:`Token`, :class:`TextScanner` (markdown, raw
cells, outputs, HTML; :mod:`.text`), :class:`CodeScanner` (code cells; :mod:`.code`) and their
helpers (``html_to_text``, ``metric_named``, ``source_numbers``, ``sig_digits``, ``normalize``,
``METRIC_WORDS``, ``MULTIPLIER``).
"""

from __future__ import annotations

from ..numtext import normalize
from .code import CodeScanner, metric_named, source_numbers
from .context import RESULT_WORDS
from .markup import html_to_text
from .text import (
    METRIC_WORDS,
    MULTIPLIER,
    TextScanner,
    Token,
    sig_digits,
)

__all__ = [
    "METRIC_WORDS",
    "MULTIPLIER",
    "RESULT_WORDS",
    "CodeScanner",
    "TextScanner",
    "Token",
    "html_to_text",
    "metric_named",
    "normalize",
    "sig_digits",
    "source_numbers",
]
