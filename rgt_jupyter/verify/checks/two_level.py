"""G1, G2 with both sources of noise (Bouthillier et al. 2021): the seed-only test
(:mod:`.seed_noise`) measures how a difference moves from seed to seed on one fixed test set, not
how it would move on another test set of the same size. When every run saved its per-item
predictions (``predictions/<split>.jsonl``), this check bootstraps seeds and test items together,
paired across arms (:func:`.resample.two_level`), and reports its verdict beside the seed-only
one computed from the same per-seed scores; it never replaces the ``seed_noise`` finding.

An item's score is the row's ``score`` when the job saved one (``{"id", "pred", "target",
"score"}``; any per-item number whose mean is the metric), else it follows the declared ``fn``:
``accuracy`` (1 when pred == target), ``error_rate``, ``mse``, ``mae`` (per item, the mean over
a list). ``rmse`` is not a mean of per-item values, so it is not_checked. Without a declared
``fn`` predictions are scored by accuracy.

Resampled splits (a metric averaged over several test resamples or folds) are not a level here:
a run declares one test split, so the split level would need each resample's predictions saved
under its own split name, which runs do not declare yet.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..model import Context, Finding, RunData
from .common import (
    DECLARE_METRIC,
    SAVE_PREDICTIONS,
    delta_words,
    finding,
    is_number,
    read_inputs,
    resolve_metric,
    signed,
)
from .resample import ALPHA, two_level

CHECK = "two_level_noise"
_FNS = ("accuracy", "error_rate", "mse", "mae")


def _values(value: Any) -> list[float] | None:
    if is_number(value):
        return [float(value)]
    if isinstance(value, list) and value and all(is_number(v) for v in value):
        return [float(v) for v in value]
    return None


def item_score(row: dict[str, Any], fn: str) -> float | None:
    """One item's score: its saved ``score``, else ``fn`` of its pred and target (None when
    neither gives a number)."""
    if is_number(row.get("score")):
        return float(row["score"])
    pred, target = row.get("pred"), row.get("target")
    if fn in ("accuracy", "error_rate"):
        hit = float(pred == target)
        return hit if fn == "accuracy" else 1.0 - hit
    p, t = _values(pred), _values(target)
    if p is None or t is None or len(p) != len(t):
        return None
    err = np.asarray(p) - np.asarray(t)
    return float(np.mean(err**2) if fn == "mse" else np.mean(np.abs(err)))


def run_scores(run: RunData, split: str, fn: str) -> dict[str, float] | None:
    """Item id → score of one run's saved predictions of ``split`` (None when none saved)."""
    rows = run.predictions(split)
    if rows is None:
        return None
    out: dict[str, float] = {}
    for row in rows:
        score = item_score(row, fn)
        if "id" in row and score is not None:
            out[str(row["id"])] = score
    return out


def _fn_of(ctx: Context) -> str | None:
    declared = [m for m in (r.metric for r in ctx.everything) if m and m.get("fn")]
    return str(declared[0]["fn"]) if declared else "accuracy"


def _seed_only(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """Welch's test on the per-seed scores: what the seeds alone say about the same data."""
    from scipy import stats  # deferred: scipy, only when a comparison is computed

    x, y = a.mean(axis=1), b.mean(axis=1)
    res = stats.ttest_ind(x, y, equal_var=False)
    low, high = (float(v) for v in res.confidence_interval(1 - ALPHA))
    p = float(res.pvalue)
    effect = p < ALPHA and (low > 0 or high < 0)
    return {
        "test": "welch",
        "diff": float(x.mean() - y.mean()),
        "ci95": [low, high],
        "p": p,
        "verdict": "effect" if effect else "noise",
    }


def _verdict(stats: dict[str, Any]) -> str:
    if stats["ci_excludes_zero"] and stats["p"] < ALPHA:
        return "effect"
    return "noise" if abs(stats["diff"]) < stats["mde"] else "inconclusive"


def two_level_noise(ctx: Context) -> list[Finding]:
    """The variant-vs-baseline difference against seed and test-set noise together."""
    name, direction, split = resolve_metric(ctx)
    runs = ctx.everything
    fn = _fn_of(ctx)
    computed: dict[str, Any] = {"metric": name, "split": split, "direction": direction, "fn": fn}

    def out(verdict: str, text: str) -> list[Finding]:
        rels = (f"predictions/{split}.jsonl", "verify/metric.json")
        return [finding(CHECK, verdict, text, runs, computed, read_inputs(runs, *rels))]

    if not ctx.baselines:
        return out("not_checked", "no baseline runs: no difference to test")
    if fn not in _FNS:
        return out(
            "not_checked",
            f"the declared fn {fn!r} is not a mean of per-item values; save a per-item "
            f'"score" with the predictions, or declare one of {", ".join(_FNS)} '
            f"({DECLARE_METRIC})",
        )
    scores = {run.run_id: run_scores(run, split, fn) for run in runs}
    missing = [rid for rid, s in scores.items() if not s]
    if missing:
        computed["without_predictions"] = missing
        return out(
            "not_checked",
            f"{len(missing)} run(s) saved no scorable predictions of {split}, so the test "
            f"set's own noise is not measured; save them with {SAVE_PREDICTIONS}",
        )
    if len(ctx.runs) < 2 or len(ctx.baselines) < 2:
        return out("not_checked", "fewer than 2 seeds in an arm: run ≥3 seeds per arm")
    present = {rid: s for rid, s in scores.items() if s}
    id_sets = [set(s) for s in present.values()]
    common = sorted(set.intersection(*id_sets))
    dropped = len(set.union(*id_sets)) - len(common)
    if len(common) < 2:
        return out("not_checked", f"the runs share {len(common)} item(s) of {split}: not paired")

    def matrix(arm: list[RunData]) -> np.ndarray:
        return np.array([[present[r.run_id][i] for i in common] for r in arm])

    a, b = matrix(ctx.runs), matrix(ctx.baselines)
    stats = two_level(a, b)
    seed_only = _seed_only(a, b)
    verdict = _verdict(stats)
    computed.update(stats, seed_only=seed_only, items_not_shared=dropped, two_level=verdict)
    lo, hi = stats["ci95"]
    share = stats["test_share"]
    head = (
        f"{name or fn} {signed(stats['diff'])} ({delta_words(stats['diff'], direction)}) over "
        f"{stats['n_items']} items x {stats['n_variant']}+{stats['n_baseline']} seeds"
    )
    both = (
        f"seeds + test items: 95 % CI [{lo:.4g}, {hi:.4g}], p = {stats['p']:.2g}"
        + (f", the test set is {share:.0%} of the variance" if share is not None else "")
        + f"; seed-only (Welch): p = {seed_only['p']:.2g}, {seed_only['verdict']}"
    )
    if dropped:
        both += f"; {dropped} item(s) not saved by every run left out"
    if verdict == "effect":
        return out("effect", f"effect beyond seed and test-set noise: {head}; {both}")
    if verdict == "noise":
        text = f"within seed and test-set noise: {head}; {both}"
        if seed_only["verdict"] == "effect":
            text += "; the seed-only effect does not survive another draw of the test set"
        return out("noise", text)
    return out(
        "inconclusive",
        f"underpowered: {head}; {both}; MDE {stats['mde']:.3g}: more seeds or a larger test set",
    )
