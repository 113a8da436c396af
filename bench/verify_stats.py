"""Benchmark: the two-level noise test of ``%verify`` on simulated comparisons with a known truth.

Each comparison draws one test set of ``items`` items and ``seeds`` seeds per arm; an item's score
under a seed is ``base_i + [variant](effect + d_i) + seed_aj + eps_aji``: ``base_i`` (how hard the
item is, shared by both arms), ``d_i`` (how the variant's change differs item by item: mean 0, so
the test set itself carries noise about the effect), ``seed_aj`` (optimisation noise), ``eps``
(item x seed noise). The truth is ``effect``, the difference a test set of infinite size and
infinitely many seeds would show; half the comparisons have none. The regimes range from
seed-dominated to test-set-dominated noise, with 3 to 10 seeds and 100 to 2,000 items.

For the two-level test (:func:`rgt_jupyter.verify.checks.resample.two_level`) and for the
seed-only Welch test on the per-seed scores, it measures: CI coverage of the true effect,
the false "effect" rate (p < alpha where there is none) and the power (p < alpha where there is
one). Writes ``bench/results/verify_stats.json`` (or ``--out``). Goals: coverage >= 0.94, false
"effect" rate <= 0.05, power >= Welch's where Welch holds its size (the regimes in which its own
false rate is <= alpha; elsewhere its power is paid for by false effects, reported beside).

    python bench/verify_stats.py [--n 1000] [--resamples 1000] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from _machine import machine  # noqa: E402 - the bench folder on the path

from rgt_jupyter.verify.checks.resample import two_level  # noqa: E402 - needs the repo

GOALS = {"coverage_min": 0.94, "false_effect_max": 0.05}
ALPHA = 0.05
#: (seeds per arm, items, seed sd, per-item effect sd, item x seed sd, effect when present)
REGIMES = [
    (3, 200, 0.010, 0.02, 0.05, 0.020),  # seed-dominated, 3 seeds
    (5, 500, 0.010, 0.02, 0.05, 0.015),  # seed-dominated, 5 seeds
    (10, 1000, 0.005, 0.05, 0.05, 0.008),  # balanced
    (5, 100, 0.002, 0.30, 0.05, 0.080),  # test-set-dominated, small test set
    (5, 2000, 0.002, 0.30, 0.05, 0.025),  # test-set-dominated, large test set
    (3, 300, 0.004, 0.15, 0.10, 0.040),  # both
]


def simulate(
    rng: np.random.Generator, regime: tuple[float, ...], effect: bool
) -> tuple[np.ndarray, np.ndarray, float]:
    """(variant seeds x items, baseline seeds x items, true effect) of one comparison."""
    seeds, items, s_seed, s_item, s_eps, size = regime
    n, m = int(seeds), int(items)
    truth = float(size) if effect else 0.0
    base = rng.normal(0.7, 0.2, m)
    d = rng.normal(0.0, s_item, m)
    a = base + truth + d + rng.normal(0, s_seed, (n, 1)) + rng.normal(0, s_eps, (n, m))
    b = base + rng.normal(0, s_seed, (n, 1)) + rng.normal(0, s_eps, (n, m))
    return a, b, truth


def welch(a: np.ndarray, b: np.ndarray) -> tuple[float, list[float]]:
    """(p, 95 % CI) of Welch's t-test on the per-seed scores: the seed-only test."""
    from scipy import stats  # deferred: scipy, once per comparison

    x, y = a.mean(axis=1), b.mean(axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.ttest_ind(x, y, equal_var=False)
    low, high = res.confidence_interval(1 - ALPHA)
    return float(res.pvalue), [float(low), float(high)]


def rates(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Coverage, false effect rate and power of one test over ``rows``."""
    null = [r for r in rows if r["truth"] == 0]
    alt = [r for r in rows if r["truth"] != 0]
    return {
        "coverage": float(np.mean([r[key]["covers"] for r in rows])),
        "false_effect_rate": float(np.mean([r[key]["p"] < ALPHA for r in null])) if null else None,
        "power": float(np.mean([r[key]["p"] < ALPHA for r in alt])) if alt else None,
        "comparisons": len(rows),
    }


def run(n: int, resamples: int, seed: int = 0) -> dict[str, Any]:
    """``n`` simulated comparisons (half with an effect), spread over :data:`REGIMES`."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    for k in range(n):
        regime_index = k % len(REGIMES)
        a, b, truth = simulate(rng, REGIMES[regime_index], effect=(k // len(REGIMES)) % 2 == 1)
        two = two_level(a, b, resamples=resamples, seed=k)
        p_w, ci_w = welch(a, b)
        rows.append(
            {
                "regime": regime_index,
                "truth": truth,
                "two_level": {
                    "p": two["p"],
                    "covers": two["ci95"][0] <= truth <= two["ci95"][1],
                },
                "welch": {"p": p_w, "covers": ci_w[0] <= truth <= ci_w[1]},
            }
        )
    seconds = time.perf_counter() - start
    per_regime = []
    for i, regime in enumerate(REGIMES):
        sub = [r for r in rows if r["regime"] == i]
        keys = ("seeds", "items", "seed_sd", "item_effect_sd", "item_seed_sd", "effect")
        per_regime.append(
            {
                "regime": dict(zip(keys, regime, strict=True)),
                "two_level": rates(sub, "two_level"),
                "welch": rates(sub, "welch"),
            }
        )
    sized = [
        i
        for i, reg in enumerate(per_regime)
        if reg["welch"]["false_effect_rate"] is not None
        and reg["welch"]["false_effect_rate"] <= ALPHA
    ]
    valid = [r for r in rows if r["regime"] in sized]
    overall = {"two_level": rates(rows, "two_level"), "welch": rates(rows, "welch")}
    where_welch_holds: dict[str, Any] = {
        "regimes": sized,
        "two_level": rates(valid, "two_level") if valid else None,
        "welch": rates(valid, "welch") if valid else None,
    }
    two = overall["two_level"]
    met = {
        "coverage": two["coverage"] >= GOALS["coverage_min"],
        "false_effect_rate": two["false_effect_rate"] is not None
        and two["false_effect_rate"] <= GOALS["false_effect_max"],
        "power_vs_welch": bool(
            valid
            and where_welch_holds["two_level"]["power"] is not None
            and where_welch_holds["two_level"]["power"] >= where_welch_holds["welch"]["power"]
        ),
    }
    return {
        "schema": "rgt-bench/verify-stats/1",
        "comparisons": n,
        "resamples": resamples,
        "alpha": ALPHA,
        "seed": seed,
        "seconds": seconds,
        "overall": overall,
        "where_welch_holds_its_size": where_welch_holds,
        "per_regime": per_regime,
        "goals": GOALS,
        "goals_met": met,
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="comparisons (default 1000)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "results" / "verify_stats.json",
        help="where to write the JSON (default: bench/results/verify_stats.json)",
    )
    args = parser.parse_args()
    report = run(args.n, args.resamples)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("overall", "goals_met", "seconds")}, indent=2))


if __name__ == "__main__":
    main()
