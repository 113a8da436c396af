"""What the words around a number say it is, for :mod:`.text`: a result word (a gain, a
comparison), a count of things, a hardware or setup figure, a reference list's heading."""

from __future__ import annotations

import re

# Words that say a number is a result although they name no metric: gains, comparisons.
RESULT_WORDS: frozenset[str] = frozenset(
    """points pts faster slower speedup improvement improves improved improving gain gains
    outperforms outperform better worse higher lower reduction reduces reduced drop drops
    achieves achieve achieved reaches reach reached obtains obtain obtained scores""".split()
)

# Words after a number that make it a measured quantity, not a count of things: points of a
# score, times as fast, units of time and information, rates.
_NOT_COUNTED = frozenset(
    """points point pts times percent percentage seconds secs minutes mins hours hrs days weeks
    months years ms bits nats decibels fps samples/s""".split()
)
# Nouns counted without a plural -s.
_COUNT_NOUNS = frozenset("data people children media personnel staff".split())
_NEXT_WORD = re.compile(
    r" ?(?:(?P<mod>[a-z][a-z-]+) )?(?P<word>[A-Za-z][A-Za-z-]{2,})(?P<rate>/|\s+per\b)?"
)
# Words between a count and its noun (10,000 test images, 50 distinct classes).
_COUNT_MODIFIERS = frozenset(
    """test train training validation val dev held-out heldout unlabeled unlabelled labeled
    labelled additional more new synthetic real clean noisy distinct unique different random
    annotated raw total separate""".split()
)
_STORAGE_UNITS = frozenset("KB MB GB TB PB KiB MiB GiB TiB PiB".split())
_SETUP_WORDS = frozenset(
    """ram vram memory gpu gpus cpu cpus disk disks ssd nvme storage hbm node nodes machine
    machines server servers cluster core cores tpu tpus a100 h100 h200 v100 a6000 rtx t4 l4 p100
    k80 mi250 mi300 xeon epyc""".split()
)
_CLOCK_UNITS = frozenset("Hz kHz MHz GHz".split())
_HARDWARE_AFTER = re.compile(r" ?(?:[A-Z]{1,3}\d{2,4}\b|RTX|GPUs?\b|TPUs?\b|NVIDIA|AMD|Intel)")


def context_reason(
    s: str,
    end: int,
    suffix: str,
    unit: str,
    role: str,
    words: frozenset[str],
    metric_words: frozenset[str],
) -> str | None:
    """Why a number is innocent by the words right after it: a count of things (``15
    corruptions``, ``23.5M parameters``, ``64 cores``), a hardware or setup figure (``768 GB``
    of RAM, ``8× A100``, ``2.4 GHz``); None when they say nothing of the kind."""
    if role == "uncertainty":
        return None
    if suffix in ("×", "x") and _HARDWARE_AFTER.match(s, end):
        return "hardware or setup (a count of accelerators)"
    if unit in _CLOCK_UNITS:
        return "hardware or setup (a clock rate)"
    if unit in _STORAGE_UNITS and words & _SETUP_WORDS:
        return "hardware or setup (memory or storage)"
    if suffix in ("%", "‰", "pp") or unit:
        return None
    m = _NEXT_WORD.match(s, end)
    if m is None:
        return None
    mod, word, rate = m.group("mod"), m.group("word"), bool(m.group("rate"))
    if mod and mod not in _COUNT_MODIFIERS:
        # The first word is the noun, unless it only qualifies the one after it.
        word, rate = mod, word.lower() == "per"
    if rate:
        return None  # a rate (images/s, tokens per second)
    low = word.lower()
    if low in _NOT_COUNTED or low in metric_words:
        return None
    plural = low.endswith("s") and not low.endswith(("ss", "us", "is"))
    if plural or low in _COUNT_NOUNS:
        return f"count ({word})"
    return None


ANY_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
REFS_TITLE = re.compile(
    r"(?:\d+(?:\.\d+)*\.?\s+)?(?:references?|bibliography|works cited|literature cited|"
    r"citations|cited works|further reading)\s*:?",
    re.I,
)
REFS_LINE = re.compile(
    r"^\s{0,3}(?:\*\*|__)?(?:references?|bibliography)(?:\*\*|__)?\s*:?\s*$", re.I
)

#: Masks of the text scanner for what a bibliography entry is made of, and for names with a
#: year (one group each; the reasons by group name).
BIBLIOGRAPHY_MASKS = (
    r"(?P<arxiv>\barXiv(?::|\s)\s?\d{4}\.\d{4,5}(?:v\d+)?)",
    r"(?P<doi>\b10\.\d{4,9}/[^\s<>\"')\]]+)",
    r"(?P<pages>\b(?:pp?\.|[Pp]ages?)\s?\d+\s?(?:[–—-]{1,2}|to)\s?\d+)",
    r"(?P<volume>\b(?:[Vv]ol\.|[Vv]olume|[Nn]o\.|[Ii]ssue)\s?\d+(?:\s?\(\d+\))?)",
    r"(?P<named_year>\b[A-Za-z][A-Za-z-]*['\u2019]\d{2}\b)",
)
BIBLIOGRAPHY_REASONS = {
    "arxiv": "bibliography (arXiv id)",
    "doi": "bibliography (DOI)",
    "pages": "bibliography (page range)",
    "volume": "bibliography (volume or issue)",
    "named_year": "name with a year (WMT'14)",
}
