"""The bootstrap maths of the noise, task and budget checks: the two-level (seeds × test items)
paired bootstrap of a difference, rliable's IQM and probability of improvement with a bootstrap
stratified by task, and the expected maximum of a tuning search after n trials (Dodge et al.
2019). numpy only, vectorised over the resamples; scipy is imported where a quantile is needed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: Significance level, resamples and generator seed (fixed, so a verdict is reproducible).
ALPHA = 0.05
RESAMPLES = 2_000
RNG_SEED = 0
#: Items a chunk of resamples holds at once (bounds memory on large test sets).
_CHUNK_CELLS = 4_000_000


def two_level(
    variant: np.ndarray,
    baseline: np.ndarray,
    resamples: int = RESAMPLES,
    seed: int = RNG_SEED,
) -> dict[str, Any]:
    """The difference of mean per-item scores, variant minus baseline, with its two sources of
    noise: ``variant`` is (seeds × items), ``baseline`` (seeds × items), the same items in the
    same column order (a shared test set), each ≥ 2 seeds.

    Each resample draws the seeds of each arm with replacement and one multiset of test items
    with replacement, shared by every seed of both arms: the test set is drawn once, so the draw
    is paired across arms. Beside the joint distribution (its SE and percentile 95 % interval),
    the same draws give each component alone: the seeds of each arm over the fixed test set, and
    the items with the seeds fixed. The verdict's interval is t-based on the sum of the
    components (each rescaled to its unbiased n/(n-1) form) with Welch-Satterthwaite degrees of
    freedom, because percentile intervals over 3-5 seeds cover less than their nominal 95 %."""
    from scipy import stats  # deferred: scipy, only when a comparison is computed

    a, b = np.asarray(variant, dtype=float), np.asarray(baseline, dtype=float)
    na, nb, n_items = a.shape[0], b.shape[0], a.shape[1]
    rng = np.random.default_rng(seed)
    per_a, per_b = a.mean(axis=1), b.mean(axis=1)  # each seed's score on the test set
    delta = float(per_a.mean() - per_b.mean())
    item_diff = a.mean(axis=0) - b.mean(axis=0)  # paired per-item difference, seeds averaged
    joint = np.empty(resamples)
    step = max(1, _CHUNK_CELLS // max(1, n_items))
    for start in range(0, resamples, step):
        reps = min(step, resamples - start)
        counts = rng.multinomial(n_items, np.full(n_items, 1.0 / n_items), size=reps)
        weights = counts / n_items  # (reps, items): one shared draw of the test set
        ma, mb = weights @ a.T, weights @ b.T  # (reps, seeds): each seed on the drawn items
        ia = rng.integers(0, na, size=(reps, na))
        ib = rng.integers(0, nb, size=(reps, nb))
        rows = np.arange(reps)[:, None]
        joint[start : start + reps] = ma[rows, ia].mean(axis=1) - mb[rows, ib].mean(axis=1)
    # Each component's ideal-bootstrap variance (what infinitely many resamples of that level
    # alone give), in its unbiased form: no Monte Carlo noise in the verdict's standard error.
    v_a = float(np.var(per_a, ddof=1)) / na
    v_b = float(np.var(per_b, ddof=1)) / nb
    v_i = float(np.var(item_diff, ddof=1)) / n_items
    var = v_a + v_b + v_i
    parts = v_a**2 / (na - 1) + v_b**2 / (nb - 1) + v_i**2 / max(1, n_items - 1)
    df = var**2 / parts if parts > 0 else math.inf
    se = math.sqrt(var)
    t_crit = float(stats.t.ppf(1 - ALPHA / 2, df)) if math.isfinite(df) else 1.959963984540054
    p = float(2 * stats.t.sf(abs(delta) / se, df)) if se > 0 else (0.0 if delta else 1.0)
    low, high = delta - t_crit * se, delta + t_crit * se
    boot_low, boot_high = (float(x) for x in np.percentile(joint, [2.5, 97.5]))
    return {
        "diff": delta,
        "se": se,
        "df": df if math.isfinite(df) else None,
        "ci95": [low, high],
        "ci_excludes_zero": low > 0 or high < 0,
        "p": p,
        "mde": float(t_crit + stats.t.ppf(0.8, df)) * se if se > 0 else 0.0,
        "variance": {"seeds_variant": v_a, "seeds_baseline": v_b, "test_items": v_i},
        "test_share": v_i / var if var > 0 else None,
        "bootstrap_se": float(np.std(joint, ddof=1)),
        "bootstrap_ci95": [boot_low, boot_high],
        "n_variant": na,
        "n_baseline": nb,
        "n_items": n_items,
        "alpha": ALPHA,
        "resamples": resamples,
        "rng_seed": seed,
    }


# ----------------------------------------------------------------------------- several tasks


def iqm(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """The interquartile mean along ``axis``: the mean of the middle 50 % (rliable's IQM,
    ``scipy.stats.trim_mean(x, 0.25)``)."""
    from scipy import stats  # deferred: scipy, only when tasks are compared

    out: np.ndarray = stats.trim_mean(values, 0.25, axis=axis)
    return out


def _stratified(scores: np.ndarray, rng: np.random.Generator, reps: int) -> np.ndarray:
    """(reps, runs, tasks): the runs resampled with replacement within each task."""
    runs, tasks = scores.shape
    idx = rng.integers(0, runs, size=(reps, runs, tasks))
    out: np.ndarray = np.take_along_axis(scores[None, :, :], idx, axis=1)
    return out


def poi(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """rliable's probability of improvement of X over Y (runs × tasks each, or a leading
    resample axis): per task the chance a run of X beats a run of Y (ties count half), averaged
    over tasks."""
    gt = (x[..., :, None, :] > y[..., None, :, :]).mean(axis=(-3, -2))
    eq = (x[..., :, None, :] == y[..., None, :, :]).mean(axis=(-3, -2))
    out: np.ndarray = (gt + 0.5 * eq).mean(axis=-1)
    return out


def task_comparison(
    variant: np.ndarray,
    baseline: np.ndarray,
    higher_is_better: bool = True,
    resamples: int = RESAMPLES,
    seed: int = RNG_SEED,
) -> dict[str, Any]:
    """IQM of each arm, their difference, and the probability of improvement, each with a
    percentile 95 % interval from a bootstrap stratified by task (runs resampled within each
    task, as rliable does). ``variant`` and ``baseline``: (runs × tasks) scores on the same
    tasks in the same column order. With ``higher_is_better`` False the probability of
    improvement counts the lower score as the better one."""
    a, b = np.asarray(variant, dtype=float), np.asarray(baseline, dtype=float)
    rng = np.random.default_rng(seed)
    ra, rb = _stratified(a, rng, resamples), _stratified(b, rng, resamples)
    sign = 1.0 if higher_is_better else -1.0
    iqm_a = iqm(ra.reshape(resamples, -1))
    iqm_b = iqm(rb.reshape(resamples, -1))
    p_boot = poi(sign * ra, sign * rb)

    def ci(values: np.ndarray) -> list[float]:
        return [float(x) for x in np.percentile(values, [2.5, 97.5])]

    p_hat = float(poi(sign * a, sign * b))
    p_ci = ci(p_boot)
    return {
        "iqm_variant": float(iqm(a.reshape(-1))),
        "iqm_baseline": float(iqm(b.reshape(-1))),
        "iqm_variant_ci95": ci(iqm_a),
        "iqm_baseline_ci95": ci(iqm_b),
        "iqm_diff": float(iqm(a.reshape(-1)) - iqm(b.reshape(-1))),
        "iqm_diff_ci95": ci(iqm_a - iqm_b),
        "probability_of_improvement": p_hat,
        "probability_of_improvement_ci95": p_ci,
        "poi_ci_excludes_half": p_ci[0] > 0.5 or p_ci[1] < 0.5,
        "runs_variant": int(a.shape[0]),
        "runs_baseline": int(b.shape[0]),
        "n_tasks": int(a.shape[1]),
        "resamples": resamples,
        "rng_seed": seed,
        "bootstrap": "percentile, stratified by task",
    }


# ----------------------------------------------------------------------------- tuning budgets


def expected_max(values: list[float], n_max: int, higher_is_better: bool = True) -> list[float]:
    """Dodge et al. (2019) expected validation performance: the expected best of ``n`` trials
    drawn with replacement from the observed ones, for n = 1..``n_max``. With the values sorted,
    E[max of n] = Σ_i v_(i) ((i/N)^n - ((i-1)/N)^n)."""
    v = np.sort(np.asarray(values, dtype=float))
    if not higher_is_better:
        v = -v[::-1]
    count = v.size
    ranks = np.arange(1, count + 1) / count
    ns = np.arange(1, n_max + 1)[:, None]
    weights = ranks[None, :] ** ns - (ranks[None, :] - 1 / count) ** ns
    curve = weights @ v
    return [float(x) if higher_is_better else float(-x) for x in curve]
