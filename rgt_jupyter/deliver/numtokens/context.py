"""What the words around a number say it is, for :mod:`.text`: a result word (a gain, a
comparison), a count of things, a hardware or setup figure, a reference list's heading."""

from __future__ import annotations

import re

# Words that say a number is a result although they name no metric: gains, comparisons.
RESULT_WORDS: frozenset[str] = frozenset(
    """points pts faster slower speedup improvement improves improved improving gain gains
    outperforms outperform better worse higher lower reduction reduces reduced drop drops
    achieves achieve achieved reaches reach reached obtains obtain obtained scores improve
    averaged averages speed reaching achieving matching performance""".split()
)

# Names of settings: a number a setting takes is configuration (in code, a table row or prose).
CONFIG_NAMES = frozenset(
    """lr learning_rate epochs num_epochs n_epochs max_epochs steps max_steps num_steps n_steps
    total_steps warmup warmup_steps warmup_ratio batch_size bs seed random_state random_seed
    weight_decay wd momentum dropout drop_rate num_workers workers hidden hidden_size
    hidden_dim embed_dim d_model layers num_layers n_layers depth heads num_heads n_heads
    patience gamma beta beta1 beta2 betas eps epsilon temperature max_len max_length seq_len
    image_size img_size crop_size resolution n_estimators max_depth k n_splits folds grad_clip
    clip max_norm accumulation_steps grad_accum log_every eval_every save_every print_every
    label_smoothing num_samples n_samples context_length context_size block_size eval_iters
    max_iters lr_decay_iters eval_interval log_interval batch context_window""".split()
)
CONFIG_PARTS = frozenset(
    """lr epochs epoch steps step batch seed decay momentum dropout workers warmup layers heads
    hidden patience iters iterations iter layer head heads embd embed block vocab warmup res
    resolution crop""".split()
)

# Words after a number that make it a measured quantity, not a count of things: points of a
# score, times as fast, units of time and information, rates.
_NOT_COUNTED = frozenset(
    """points point pts times percent percentage seconds secs minutes mins hours hrs days weeks
    months years ms bits nats decibels fps samples/s""".split()
)
#: Words after a number that make it a measured quantity (a duration, a score's points).
MEASURE_WORDS = _NOT_COUNTED

# Nouns counted without a plural -s.
_COUNT_NOUNS = frozenset("data people children media personnel staff".split())
_FOLLOWING = re.compile(
    r"[ \t]?([A-Za-z0-9#][\w'#-]*)"
    r"(/|\s+per\s+(?:second|sec|s|minute|min|hour|h|day|ms|step|iteration|iter)\b)?"
)
_RESTATED = re.compile(r"\((?:or|i\.e\.,?|that is,?|≈)\s?~?$")
_DATA_DURATION = re.compile(
    r" ?(?:hours?|minutes?|days?) of (?:\w+ )?(?:audio|speech|video|recordings?|footage|data|"
    r"text|transcripts?)\b"
)
_MODEL_AFTER = re.compile(r" ?[A-Z][A-Za-z]+")  # 7B LLaMA
_SHARE_OF = re.compile(r" of (?:the |this |these |those |our |all )?([a-z][a-z-]+)")
# Words that end the search for a counted noun: a preposition or verb comes between.
_COUNT_STOP = frozenset(
    """of to and or on in at by with than for from is are was were be as vs versus over under
    after before when while that which the a an this these those it its""".split()
)
# Column headers and words that make a K/M/B/G number a model's size, not a result.
_SIZE_WORDS = frozenset(
    "params parameters parameter param flops gflops macs gmacs size sizes weights checkpoint"
    " model".split()
)
_REQUIREMENT_WORDS = frozenset("required requires vram ram disk storage download size".split())
_SPLIT_WORDS = frozenset("test train training val validation dev holdout".split())
_DEVICES = frozenset("gpus cpus tpus npus ipus".split())
_ACRONYMS = re.compile(r"[A-Z][A-Z0-9]+s")  # GPUs, CPUs, TPUs, LLMs
_SETTING_STOP = frozenset(
    "of is was = : to at with set only just about around approximately roughly of".split()
)
_STORAGE_UNITS = frozenset("KB MB GB TB PB KiB MiB GiB TiB PiB".split())
_CLOCK_UNITS = frozenset("Hz kHz MHz GHz".split())
_HARDWARE_AFTER = re.compile(r" ?(?:[A-Z]{1,3}\d{2,4}\b|RTX|GPUs?\b|TPUs?\b|NVIDIA|AMD|Intel)")


def context_reason(
    s: str,
    start: int,
    before: str,
    end: int,
    suffix: str,
    unit: str,
    decimals: int,
    value: float,
    role: str,
    words: frozenset[str],
    metric_words: frozenset[str],
    in_table: bool = False,
    headers_words: frozenset[str] = frozenset(),
) -> str | None:
    """Why a number is innocent by the words around it: a count of things (``15
    corruptions``, ``52K instruction-following data``, ``16 NVIDIA A100 GPUs``), a model's size
    (``23.5M`` under ``#params``), a hardware or setup figure (``768 GB`` of RAM, ``8× A100``,
    ``2.4 GHz``); None when they say nothing of the kind. ``words``: the line's words and the
    table cell's headers."""
    if role == "uncertainty":
        return None
    if _RESTATED.search(s, max(0, start - 8), start):
        return "a restatement of the number before it (or …)"
    if _DATA_DURATION.match(s, end):
        return "a dataset's size (hours of audio)"
    if before in "€£¥" and before or (before == "$" and "$" not in s[end : end + 24]):
        return "money"  # $500, not the LaTeX of $93.4\\%$
    if suffix in ("×", "x") and _HARDWARE_AFTER.match(s, end):
        return "hardware or setup (a count of accelerators)"
    if unit in _CLOCK_UNITS:
        return "hardware or setup (a clock rate)"
    if unit in _STORAGE_UNITS:
        # A round size in prose is a machine's or a file's (80 GB, 1024 GB of RAM); one with
        # decimals, or in a table column that is no requirement, is a measurement.
        if decimals == 0 and (not in_table or words & _REQUIREMENT_WORDS):
            return "hardware or setup (memory or storage)"
        return None
    if unit.endswith(("FLOPs", "FLOPS")):
        return "count (compute cost)"
    if suffix in ("×", "x") and value == 1:
        return "the reference (1×)"
    if suffix == "%":
        share = _SHARE_OF.match(s, end)
        said = words & (metric_words | RESULT_WORDS) - _SPLIT_WORDS
        if share and share.group(1) not in metric_words | RESULT_WORDS and not said:
            return f"a share (of {share.group(1)})"
    if suffix in ("%", "‰", "pp") or unit:
        return None
    if suffix in ("k", "K", "M", "B", "G") and (
        words & _SIZE_WORDS
        or _MODEL_AFTER.match(s, end)
        or (before == "(" and s[end : end + 1] == ")")
    ):
        return "count (a model's size)"
    if in_table and headers_words & _SIZE_WORDS - {"model"}:
        return "count (a column of sizes)"
    pos = end
    for _ in range(3):
        m = _FOLLOWING.match(s, pos)
        if m is None:
            return None
        word, low = m.group(1), m.group(1).lower()
        if m.group(2):
            return None  # a rate (images/s, tokens per second)
        if low in _NOT_COUNTED or low in _COUNT_STOP:
            return None
        if low in metric_words and low not in _SPLIT_WORDS:
            return None  # 93.4 top-1 accuracy; but 10,000 test images is a count
        plural = (
            (low.endswith("s") and not low.endswith(("ss", "us", "is")) and low.isalpha())
            or _ACRONYMS.fullmatch(word) is not None
            or low in _DEVICES
        )
        if plural or low in _COUNT_NOUNS:
            return f"count ({word})"
        pos = m.end()
    return None


def setting_reason(before: str, headers: list[str]) -> str | None:
    """Why a number is a setting's value: the words right before it (``batch size of 128``)
    or its table row's or column's header (a ``Learning rate`` row, an ``Lr Schd`` column)
    name a setting; None otherwise."""
    parts = _parts(before)
    while parts and (parts[-1] in _SETTING_STOP or parts[-1].isdigit() or parts[-1] == "and"):
        parts.pop()  # "seeds 0, 1 and 2": the setting named before the list
    if parts and parts[-1].endswith("s") and parts[-1][:-1] in CONFIG_PARTS:
        parts[-1] = parts[-1][:-1]
    for n in (3, 2, 1):
        joined = "_".join(parts[-n:]) if len(parts) >= n else ""
        if joined in CONFIG_NAMES or (n == 1 and joined in CONFIG_PARTS):
            return f"configuration ({' '.join(parts[-n:])})"
    for header in headers:
        words = _parts(header)
        if "_".join(words) in CONFIG_NAMES or (
            len(words) <= 3 and any(w in CONFIG_PARTS for w in words)
        ):
            return f"configuration ({header.strip()})"
    return None


def sentence_setting(words: list[str]) -> str | None:
    """A setting the sentence names (``context size``, ``batch size``, ``eval_iters``), from
    its words in order; None when it names none."""
    for n in (3, 2):
        for i in range(len(words) - n + 1):
            joined = "_".join(words[i : i + n])
            if joined in CONFIG_NAMES:
                return " ".join(words[i : i + n])
    return None


_APPROX = re.compile(r"(?:\babout|\baround|\broughly|\bapproximately|~|≈)\s?$", re.I)
_DURATION_AFTER = re.compile(r" ?(?:seconds?|minutes?|hours?|days?|weeks?)\b", re.I)


def approximate_duration(before: str, s: str, end: int) -> bool:
    """``about 3 minutes``, ``~4 days``: a rough duration, said in passing."""
    return bool(_APPROX.search(before)) and bool(_DURATION_AFTER.match(s, end))


def _parts(text: str) -> list[str]:
    low = text.lower().replace("β", "beta").replace("γ", "gamma").replace("ε", "eps")
    return [w for w in re.split(r"[^a-z0-9]+", low) if w]


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
_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
    r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"
)
BIBLIOGRAPHY_MASKS = (
    rf"(?P<written_date>\b{_MONTH}\s\d{{1,2}}(?:st|nd|rd|th)?,?\s(?:19|20)\d{{2}}\b"
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)?\s{_MONTH}\s(?:19|20)\d{{2}}\b"
    r"|\b\d{1,2}/\d{1,2}/(?:19|20)?\d{2}\b|\b\d{1,2}/(?:19|20)\d{2}\b)",
    r"(?P<arxiv>\barXiv(?::|\s)\s?\d{4}\.\d{4,5}(?:v\d+)?)",
    r"(?P<doi>\b10\.\d{4,9}/[^\s<>\"')\]]+)",
    r"(?P<pages>\b(?:pp?\.|[Pp]ages?)\s?\d+\s?(?:[–—-]{1,2}|to)\s?\d+)",
    r"(?P<volume>\b(?:[Vv]ol\.|[Vv]olume|[Nn]o\.|[Ii]ssue)\s?\d+(?:\s?\(\d+\))?)",
    r"(?P<named_year>\b[A-Za-z][A-Za-z-]*['\u2019]\d{2}\b)",
)
BIBLIOGRAPHY_REASONS = {
    "written_date": "date",
    "arxiv": "bibliography (arXiv id)",
    "doi": "bibliography (DOI)",
    "pages": "bibliography (page range)",
    "volume": "bibliography (volume or issue)",
    "named_year": "name with a year (WMT'14)",
}
