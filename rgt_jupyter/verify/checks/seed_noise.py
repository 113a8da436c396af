"""A4 and G1, G2, G6, G7: is the variant-vs-baseline difference larger than the seeds' spread?
:func:`compare_arms` gives the statistics of two arms of seeds."""

from __future__ import annotations

import inspect
import math
import warnings
from typing import Any

import numpy as np

from ..model import Context, Finding, RunData
from .common import (
    delta_label,
    delta_words,
    finding,
    mean_of,
    metric_values,
    read_inputs,
    resolve_metric,
    signed,
)

#: Significance level, power of the minimum detectable effect, and the bootstrap's resamples and
#: seed (fixed, so a verdict is reproducible).
ALPHA = 0.05
POWER = 0.8
BOOTSTRAP_RESAMPLES = 10_000
PERMUTATION_RESAMPLES = 9_999
RNG_SEED = 0

#: The files a seed-noise finding cites.
_METRIC_FILES = ("run.json", "results.json", "verify/metric.json")


def _num(value: Any) -> float | None:
    """A JSON-safe float (None for nan and infinities)."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _std(values: list[float]) -> float | None:
    return float(np.std(values, ddof=1)) if len(values) > 1 else None


def _arm(pairs: list[tuple[RunData, float]]) -> dict[str, Any]:
    values = [v for _, v in pairs]
    return {
        "values": {run.run_id: v for run, v in pairs},
        "seeds": {run.run_id: run.seed for run, _ in pairs},
        "n": len(values),
        "mean": mean_of(values) if values else None,
        "std": _std(values),
    }


def _permutation_p(variant: list[float], baseline: list[float]) -> tuple[float, bool, float]:
    """(two-sided permutation p of the difference of means, exact?, smallest p it can give)."""
    from scipy import stats  # deferred: scipy, only when seeds are compared

    def statistic(x: Any, y: Any, axis: int) -> Any:
        return np.mean(x, axis=axis) - np.mean(y, axis=axis)

    seeded = "rng" in inspect.signature(stats.permutation_test).parameters
    kwargs: dict[str, Any] = {"rng" if seeded else "random_state": RNG_SEED}
    result = stats.permutation_test(
        (variant, baseline),
        statistic,
        vectorized=True,
        n_resamples=PERMUTATION_RESAMPLES,
        alternative="two-sided",
        **kwargs,
    )
    partitions = math.comb(len(variant) + len(baseline), len(variant))
    exact = partitions <= PERMUTATION_RESAMPLES
    smallest = min(1.0, 2 / partitions) if exact else 2 / (PERMUTATION_RESAMPLES + 1)
    return float(result.pvalue), exact, smallest


def _mde(s_pooled: float, n1: int, n2: int) -> float:
    """The minimum detectable effect at ``ALPHA`` with power ``POWER`` (pooled t, df n1+n2-2)."""
    from scipy import stats  # deferred: scipy, only when seeds are compared

    df = n1 + n2 - 2
    t_sum = float(stats.t.ppf(1 - ALPHA / 2, df) + stats.t.ppf(POWER, df))
    return t_sum * s_pooled * math.sqrt(1 / n1 + 1 / n2)


def _seeds_needed(s_pooled: float, delta: float, limit: int = 1000) -> int | None:
    """Seeds per arm for which ``|delta|`` would be the minimum detectable effect."""
    if s_pooled <= 0 or delta == 0:
        return None
    for n in range(2, limit + 1):
        if _mde(s_pooled, n, n) <= abs(delta):
            return n
    return None


def compare_arms(variant: list[float], baseline: list[float]) -> dict[str, Any]:
    """The statistics of variant vs baseline seeds (each ≥2): means, stds, difference of
    means with a bootstrap 95 % CI, Welch's t, a permutation test, Cohen's d and Hedges' g, and
    the minimum detectable effect."""
    from scipy import stats  # deferred: scipy, only when seeds are compared

    n1, n2 = len(variant), len(baseline)
    m1, m2 = mean_of(variant), mean_of(baseline)
    s1, s2 = float(np.std(variant, ddof=1)), float(np.std(baseline, ddof=1))
    delta = m1 - m2
    rng = np.random.default_rng(RNG_SEED)
    boot_v = rng.choice(variant, size=(BOOTSTRAP_RESAMPLES, n1), replace=True).mean(axis=1)
    boot_b = rng.choice(baseline, size=(BOOTSTRAP_RESAMPLES, n2), replace=True).mean(axis=1)
    low, high = (float(x) for x in np.percentile(boot_v - boot_b, [2.5, 97.5]))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        welch = stats.ttest_ind(variant, baseline, equal_var=False)
        perm_p, exact, smallest = _permutation_p(variant, baseline)
    s_pooled = math.sqrt(((n1 - 1) * s1**2 + (n2 - 1) * s2**2) / (n1 + n2 - 2))
    d = delta / s_pooled if s_pooled > 0 else None
    g = d * (1 - 3 / (4 * (n1 + n2) - 9)) if d is not None else None
    use_perm = smallest < ALPHA
    p = perm_p if use_perm else _num(welch.pvalue)
    return {
        "n_variant": n1,
        "n_baseline": n2,
        "mean_variant": m1,
        "mean_baseline": m2,
        "std_variant": s1,
        "std_baseline": s2,
        "diff": delta,
        "relative_diff": delta / abs(m2) if m2 else None,
        "ci95": [low, high],
        "ci_excludes_zero": low > 0 or high < 0,
        "bands_overlap": (m1 - s1) <= (m2 + s2) and (m2 - s2) <= (m1 + s1),
        "welch_t": _num(welch.statistic),
        "welch_df": _num(getattr(welch, "df", None)),
        "welch_p": _num(welch.pvalue),
        "permutation_p": perm_p,
        "permutation_exact": exact,
        "permutation_smallest_p": smallest,
        "p": p,
        "p_test": "permutation" if use_perm else "welch",
        "s_pooled": s_pooled,
        "cohens_d": _num(d),
        "hedges_g": _num(g),
        "mde": _mde(s_pooled, n1, n2),
        "alpha": ALPHA,
        "power": POWER,
        "seeds_needed": _seeds_needed(s_pooled, delta),
        "bootstrap": {"resamples": BOOTSTRAP_RESAMPLES, "rng_seed": RNG_SEED},
    }


def _draw(
    variant_mean: float, baseline: list[tuple[RunData, float]], direction: str | None
) -> tuple[dict[str, Any], str]:
    """G6: the variant mean against the baseline's mean, best and worst seed (highest and
    lowest without a direction), each named."""
    ordered = sorted(baseline, key=lambda pair: pair[1])
    top, bottom = ordered[-1], ordered[0]
    if direction == "min":
        named = {"best": bottom, "worst": top}
    elif direction == "max":
        named = {"best": top, "worst": bottom}
    else:
        named = {"highest": top, "lowest": bottom}
    mean = mean_of([v for _, v in baseline])
    computed: dict[str, Any] = {"vs_mean": {"value": mean, "delta": variant_mean - mean}}
    words = [f"{signed(variant_mean - mean)} vs the baseline mean"]
    for label, (run, value) in named.items():
        delta = variant_mean - value
        computed[f"vs_{label}"] = {"run_id": run.run_id, "value": value, "delta": delta}
        words.append(f"{signed(delta)} vs its {label} seed ({run.run_id})")
    return computed, ", ".join(words)


def seed_noise(ctx: Context) -> list[Finding]:
    """A4, G1, G2, G6, G7: is the variant-vs-baseline difference larger than the seeds' spread?"""
    check = "seed_noise"
    name, direction, split = resolve_metric(ctx)
    runs = ctx.everything
    inputs = read_inputs(runs, *_METRIC_FILES)
    var, base = metric_values(ctx.runs, name, split), metric_values(ctx.baselines, name, split)
    computed: dict[str, Any] = {
        "metric": name,
        "split": split,
        "direction": direction,
        "variant": _arm(var),
        "baseline": _arm(base),
    }

    def out(verdict: str, text: str) -> list[Finding]:
        return [finding(check, verdict, text, runs, computed, inputs)]

    if name is None:
        return out(
            "not_checked",
            "no metric named: declare it with job.declare_metric(name, "
            "direction) or pass metric= to %verify",
        )
    if not var:
        return out(
            "not_checked",
            f"no variant run reports {name} on {split} in results.json: "
            "nothing to compare; save it with the split named",
        )
    vx, bx = [v for _, v in var], [v for _, v in base]
    if not bx:
        if len(vx) < 2:
            return out(
                "not_checked",
                f"one variant run and no baseline value of {name}: no "
                "spread to measure; pass baseline runs and run ≥3 seeds",
            )
        return out(
            "pass",
            f"{name} {mean_of(vx):.4g} ± {_std(vx):.2g} (std over {len(vx)} seeds): the seed "
            "variance band to report beside it; no baseline, so no difference is called",
        )
    delta = mean_of(vx) - mean_of(bx)
    draw, draw_text = _draw(mean_of(vx), base, direction)
    computed.update(diff=delta, label=delta_label(delta, direction), baseline_draw=draw)
    head = (
        f"{name} variant {mean_of(vx):.4g} vs baseline {mean_of(bx):.4g} "
        f"({signed(delta)}, {delta_words(delta, direction)})"
    )
    if len(vx) < 2 or len(bx) < 2:
        counts = f"{len(vx)} variant and {len(bx)} baseline run(s)"
        return out(
            "inconclusive",
            f"single seed, no variance band: {head} from {counts}; run "
            "≥3 seeds per arm to tell an effect from seed noise",
        )
    stats = compare_arms(vx, bx)
    computed.update(stats)
    ci = f"95 % CI [{stats['ci95'][0]:.4g}, {stats['ci95'][1]:.4g}]"
    p_text = f"p = {stats['p']:.2g} ({stats['p_test']})" if stats["p"] is not None else "p n/a"
    if stats["s_pooled"] == 0:
        return out(
            "inconclusive",
            f"no spread across seeds: {head}; every run of an arm gave "
            "the same value, so the seeds may not have applied (see stale_artifact)",
        )
    if stats["ci_excludes_zero"] and stats["p"] is not None and stats["p"] < ALPHA:
        return out(
            "effect",
            f"effect: {head}, {ci}, {p_text}, Hedges' g "
            f"{stats['hedges_g']:.2g}; {draw_text}; report mean ± std over the seeds "
            "with this CI",
        )
    mde = f"{stats['mde']:.3g}"
    if not stats["ci_excludes_zero"] and abs(delta) < stats["mde"]:
        return out(
            "noise",
            f"within seed noise: {head}, {ci} includes 0, {p_text}; the MDE is "
            f"{mde}, so claim no difference (run more seeds if a smaller effect matters)",
        )
    needed = stats["seeds_needed"]
    more = f"about {needed} seeds per arm would detect it" if needed else "run more seeds"
    return out(
        "inconclusive",
        f"underpowered: {head}, {ci}, {p_text}; the MDE is {mde} with "
        f"{len(vx)}+{len(bx)} seeds; run more seeds ({more})",
    )
