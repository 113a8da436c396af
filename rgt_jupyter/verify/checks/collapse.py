"""F1, F2, F5: near-identical outputs for distinct inputs, one dominant prediction, or a score
on shuffled inputs equal to the real one."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Hashable
from typing import Any

import numpy as np

from ..model import Context, Finding, RunData
from .common import SAVE_OUTPUTS, SAVE_PREDICTIONS, SAVE_SHUFFLE, is_number, per_run, run_finding

#: Mean off-diagonal output cosine at or above which outputs are collapsed, and suspect.
COLLAPSED_COSINE = 0.99
SUSPECT_COSINE = 0.95

#: Share of all predictions taken by one value at or above which predictions are degenerate,
#: and the fewest predictions that share is judged on.
DOMINANT_SHARE = 0.95
MIN_PREDICTIONS = 10

#: Real and shuffled scores this close are the same score.
EQUAL_SCORES = 1e-9

#: Without a standard error, real within this fraction of shuffled is "the same".
RELATIVE_SAME = 0.01

#: Real-minus-shuffled within this many standard errors is indistinguishable (``bug``), and
#: within the second one not clearly apart (``inconclusive``).
SAME_SE = 1.0
APART_SE = 1.96

#: Metric-name parts that mean a score is not a proportion even when it lies in [0, 1].
NOT_PROPORTION = ("mse", "mae", "rmse", "loss", "nll", "psnr", "ssim", "lpips", "fid", "r2", "corr")


def _say(run: RunData, rel: str, verdict: str, text: str, computed: dict[str, Any]) -> Finding:
    """A collapse finding about ``run``, citing the file ``rel`` it judged."""
    return run_finding("collapse", verdict, run, text, computed, [rel])


def _names(run: RunData, sub: str, suffix: str) -> list[str]:
    """The split names of the ``<sub>/<split><suffix>`` files a run holds."""
    found: set[str] = set()
    for base in (run.path / sub, run.path / "outputs" / sub):
        if base.is_dir():
            found |= {p.name[: -len(suffix)] for p in base.glob(f"*{suffix}") if p.is_file()}
    return sorted(found)


def _mean_cosine(vectors: np.ndarray) -> tuple[float | None, int]:
    """Mean cosine over distinct pairs of non-zero rows, and the number of zero rows. Uses
    ``(|Σu|² - n) / (n(n-1))`` over unit rows ``u``, so no n×n matrix is built."""
    norms = np.linalg.norm(vectors, axis=1)
    nonzero = norms > 0
    units = vectors[nonzero] / norms[nonzero, None]
    n = len(units)
    if n < 2:
        return None, int((~nonzero).sum())
    total = units.sum(axis=0)
    value = (float(total @ total) - n) / (n * (n - 1))
    return min(1.0, max(-1.0, value)), int((~nonzero).sum())


def _collapse_outputs(run: RunData, split: str) -> Finding:
    rel = f"verify/outputs/{split}.json"
    data = run.outputs(split) or {}
    raw_ids = data.get("ids")
    try:
        vectors = np.asarray(data.get("vectors"), dtype=float)
    except (TypeError, ValueError):
        vectors = np.empty((0, 0))
    if vectors.ndim == 1:
        vectors = vectors[:, None]
    if vectors.ndim != 2 or len(vectors) < 2 or not np.isfinite(vectors).all():
        return _say(
            run,
            rel,
            "not_checked",
            f"The outputs saved for {split} are not at least two finite vectors of one length, "
            f"so collapse was not checked. Save them with {SAVE_OUTPUTS}.",
            {"split": split, "shape": list(vectors.shape)},
        )
    if isinstance(raw_ids, list) and len(raw_ids) == len(vectors):
        first: dict[str, int] = {}
        for index, item in enumerate(raw_ids):
            first.setdefault(str(item), index)
        vectors = vectors[sorted(first.values())]
    n = len(vectors)
    unique = len(np.unique(vectors, axis=0))
    # The cosine of two scalars is only their sign, so one-number outputs are judged on how
    # many distinct values they take.
    cosine, zero_rows = _mean_cosine(vectors) if vectors.shape[1] > 1 else (None, 0)
    spread = float(vectors.std(axis=0).mean())
    centre = float(np.linalg.norm(vectors.mean(axis=0)))
    computed: dict[str, Any] = {
        "split": split,
        "n_items": n,
        "dim": int(vectors.shape[1]),
        "unique_rows": unique,
        "mean_offdiag_cosine": cosine,
        "zero_rows": zero_rows,
        "mean_feature_std": spread,
        "norm_of_mean_vector": centre,
        "thresholds": {"collapsed": COLLAPSED_COSINE, "suspect": SUSPECT_COSINE},
    }
    if unique == 1:
        return _say(
            run,
            rel,
            "bug",
            f"Collapsed: all {n} distinct {split} inputs give the same output vector. The model "
            "ignores its input; check the input scale and normalisation first (per-feature "
            "standardisation), then the loss.",
            computed,
        )
    if cosine is not None and cosine >= COLLAPSED_COSINE:
        return _say(
            run,
            rel,
            "bug",
            f"Collapsed: near-constant outputs, mean cosine {cosine:.4f} between outputs of "
            f"{n} distinct {split} inputs (≥ {COLLAPSED_COSINE}). Any score from this model "
            "does not come from reading its input; check input scale and normalisation first.",
            computed,
        )
    if cosine is not None and cosine >= SUSPECT_COSINE:
        return _say(
            run,
            rel,
            "inconclusive",
            f"Suspect: mean cosine {cosine:.4f} between outputs of {n} distinct {split} inputs "
            f"({SUSPECT_COSINE}–{COLLAPSED_COSINE}). Compare the real-input score with a "
            f"shuffled-input one ({SAVE_SHUFFLE}) before trusting the number.",
            computed,
        )
    shown = "n/a" if cosine is None else f"{cosine:.4f}"
    return _say(
        run,
        rel,
        "pass",
        f"Outputs of {n} distinct {split} inputs differ (mean cosine {shown}, {unique} unique).",
        computed,
    )


def _key(value: Any) -> Hashable:
    if isinstance(value, list | dict):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, Hashable) else repr(value)


def _collapse_predictions(run: RunData, split: str) -> Finding:
    rel = f"predictions/{split}.jsonl"
    rows = [r for r in run.predictions(split) or [] if "pred" in r]
    preds = Counter(_key(r["pred"]) for r in rows)
    n = len(rows)
    computed: dict[str, Any] = {"split": split, "n": n, "unique_predictions": len(preds)}
    if n < MIN_PREDICTIONS:
        return _say(
            run,
            rel,
            "not_checked",
            f"Only {n} predictions were saved for {split}; at least {MIN_PREDICTIONS} are needed "
            f"to judge whether one prediction dominates. Save them with {SAVE_PREDICTIONS}.",
            computed,
        )
    top, top_n = preds.most_common(1)[0]
    share = top_n / n
    targets = Counter(_key(r["target"]) for r in rows if "target" in r)
    target_share = targets[top] / sum(targets.values()) if targets else None
    computed.update(
        {
            "top_prediction": str(top),
            "top_share": share,
            "target_share_of_top": target_share,
            "threshold": DOMINANT_SHARE,
        }
    )
    if len(preds) == 1:
        return _say(
            run,
            rel,
            "bug",
            f"Degenerate predictions: all {n} {split} predictions are {top!s}. The model "
            "ignores its input; no score from it measures the method.",
            computed,
        )
    if share >= DOMINANT_SHARE:
        if target_share is not None and target_share >= DOMINANT_SHARE:
            return _say(
                run,
                rel,
                "inconclusive",
                f"{share:.1%} of {n} {split} predictions are {top!s}, and so are "
                f"{target_share:.1%} of the targets: predicting the majority always would "
                "score the same. Report per-class recall or a balanced metric.",
                computed,
            )
        return _say(
            run,
            rel,
            "bug",
            f"Degenerate predictions: {share:.1%} of {n} {split} predictions are {top!s} "
            f"(≥ {DOMINANT_SHARE:.0%}). The model predicts one class almost regardless of "
            "its input; check the loss, class balance and input normalisation.",
            computed,
        )
    return _say(
        run,
        rel,
        "pass",
        f"{len(preds)} distinct predictions over {n} {split} items; the most common is "
        f"{share:.1%} of them.",
        computed,
    )


def _is_proportion(metric: str, real: float, shuffled: float) -> bool:
    name = metric.lower()
    return (
        0.0 <= real <= 1.0
        and 0.0 <= shuffled <= 1.0
        and not any(part in name for part in NOT_PROPORTION)
    )


def _collapse_shuffle(run: RunData) -> Finding:
    rel = "verify/shuffle.json"
    data = run.shuffle or {}
    metric = str(data.get("metric") or "score")
    real: Any = data.get("real")
    shuffled: Any = data.get("shuffled")
    n = data.get("n")
    numbers = all(is_number(v) and math.isfinite(v) for v in (real, shuffled))
    if not numbers:
        return _say(
            run,
            rel,
            "not_checked",
            f"verify/shuffle.json lacks finite real and shuffled scores. Save them with "
            f"{SAVE_SHUFFLE}.",
            {"shuffle": data},
        )
    real, shuffled = float(real), float(shuffled)
    gap = abs(real - shuffled)
    count: int | None = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None
    computed: dict[str, Any] = {
        "metric": metric,
        "real": real,
        "shuffled": shuffled,
        "n": n,
        "difference": real - shuffled,
    }
    if real == shuffled or gap <= EQUAL_SCORES:
        return _say(
            run,
            rel,
            "bug",
            f"The outputs ignore the input: {metric} on real inputs ({real!r}) equals {metric} "
            f"on inputs shuffled across items ({shuffled!r}). Check that the model receives "
            "its own item's input (batching, masking, conditioning) before reading any score.",
            computed,
        )
    if count is not None and _is_proportion(metric, real, shuffled):
        p = min(max((real + shuffled) / 2, 0.5 / count), 1 - 0.5 / count)
        se = math.sqrt(2 * p * (1 - p) / count)
        z = gap / se
        computed.update({"se_difference": se, "z": z, "rule": "binomial standard error"})
        if z < SAME_SE:
            return _say(
                run,
                rel,
                "bug",
                f"The outputs ignore the input: {metric} real {real:.4g} vs shuffled "
                f"{shuffled:.4g} differ by {z:.2f} standard errors at n={n}, within noise. "
                "The model does not measurably read its own input.",
                computed,
            )
        if z < APART_SE:
            return _say(
                run,
                rel,
                "inconclusive",
                f"{metric} real {real:.4g} vs shuffled {shuffled:.4g}: {z:.2f} standard errors "
                f"apart at n={n}, not clearly above the shuffled-input score. Evaluate more "
                "items or compare per item.",
                computed,
            )
    else:
        scale = max(abs(real), abs(shuffled))
        computed.update({"relative_difference": gap / scale, "rule": "relative 1 %"})
        if gap <= RELATIVE_SAME * scale:
            return _say(
                run,
                rel,
                "bug",
                f"The outputs ignore the input: {metric} real {real:.6g} vs shuffled "
                f"{shuffled:.6g} are within {RELATIVE_SAME:.0%} of each other.",
                computed,
            )
    return _say(
        run,
        rel,
        "pass",
        f"{metric} on real inputs ({real:.4g}) differs from shuffled inputs ({shuffled:.4g}): "
        "the outputs depend on the input.",
        computed,
    )


def _collapse_run(run: RunData, ctx: Context) -> list[Finding]:
    out = [_collapse_outputs(run, s) for s in _names(run, "verify/outputs", ".json")]
    out += [_collapse_predictions(run, s) for s in _names(run, "predictions", ".jsonl")]
    if run.shuffle is not None:
        out.append(_collapse_shuffle(run))
    if not out:
        out.append(
            run_finding(
                "collapse",
                "not_checked",
                run,
                "No outputs, predictions or shuffled-input score were saved, so collapse was not "
                f"checked. Save some with {SAVE_OUTPUTS}, {SAVE_PREDICTIONS} or {SAVE_SHUFFLE}.",
                {},
                [],
            )
        )
    return out


def collapse(ctx: Context) -> list[Finding]:
    """F1, F2, F5: near-identical outputs for distinct inputs (mean off-diagonal cosine),
    one prediction for (almost) every item, and a real-input score equal to the
    shuffled-input one."""
    return per_run("collapse", ctx, _collapse_run)
