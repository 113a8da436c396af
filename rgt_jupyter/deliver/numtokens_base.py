"""A number found in notebook text or code (:class:`Token`), and what its text means."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Metric, split and result words: a number in the same line or table row/column is anchored.
METRIC_WORDS: frozenset[str] = frozenset(
    """accuracy acc psnr ssim lpips fid bleu rouge meteor cider f1 auc auroc auprc ap map miou
    iou dice precision recall error err loss perplexity ppl wer cer mse mae rmse nll bpd elbo
    score top1 top5 latency throughput speedup db flops gflops params ece kl r2 spearman pearson
    correlation em reward mrr ndcg hit recall1 test val validation dev holdout""".split()
)

_TOKEN = re.compile(
    r"(?P<sign>[-+]|±\s?)?"
    r"(?P<body>\d+(?:[.,]\d+)*|\.\d+)"
    r"(?P<exp>[eE][-+]?\d+\b|\s?(?:[×x*·]|\\times|\\cdot)\s?10\^\{?[-+]?\d+\}?|\^\{?[-+]?\d+\}?)?"
    r"(?P<suf>\s?%|‰|\s?pp\b|[kKMBG]\b|[×x](?![A-Za-z0-9]))?"
)

MULTIPLIER = {"k": 3, "K": 3, "M": 6, "B": 9, "G": 9}


@dataclass(slots=True)
class Token:
    """One number (or placeholder, or ignored span) found in a cell's text or code."""

    line: int
    col: int
    text: str
    value: float | None = None
    decimals: int | None = None
    sig: int = 0
    exponent: int = 0
    suffix: str = ""
    unit: str = ""
    thousands: bool = False
    sign_shown: bool = False
    role: str = "value"
    kind: str = "number"  # number | placeholder | masked
    reason: str | None = None
    anchored: bool = False
    year_like: bool = False
    context: str = ""
    header: str = ""
    name: str = ""  # code: the keyword, dict key or assignment target the literal feeds
    words: frozenset[str] = field(default_factory=frozenset)


def sig_digits(body: str) -> int:
    """Significant digits of a shown literal; trailing zeros of an integer do not count."""
    digits = body.replace(",", "").replace("_", "")
    integer = "." not in digits
    digits = digits.replace(".", "").lstrip("0")
    if integer:
        digits = digits.rstrip("0")
    return len(digits)
