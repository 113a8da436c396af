"""Two-level noise (seeds x test items), several tasks (IQM, probability of improvement) and
tuning-budget parity, on run folders, one of them pulled from a real job; and the statistics
bench, run small here and its committed full-size figures asserted."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from rgt_jupyter.api import Run
from rgt_jupyter.verify.checks.budget import tuning_budget
from rgt_jupyter.verify.checks.resample import expected_max, iqm, poi, two_level
from rgt_jupyter.verify.checks.seed_noise import seed_noise
from rgt_jupyter.verify.checks.tasks import tasks_iqm
from rgt_jupyter.verify.checks.two_level import two_level_noise
from rgt_jupyter.verify.model import Context, Finding, RunData
from rgt_jupyter.verify.report import verify
from tests.pulljobs import finished
from tests.verify_fixtures import make_run

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench" / "verify_stats.py"
METRIC = {"name": "acc", "direction": "max", "split": "test", "fn": "accuracy"}


def _rows(correct: np.ndarray) -> list[dict[str, Any]]:
    return [{"id": f"x{i}", "pred": int(c), "target": 1} for i, c in enumerate(correct)]


def _arm(
    runs: Path, name: str, latent: np.ndarray, seeds: int, flip: float, rng: np.random.Generator
) -> list[RunData]:
    """``seeds`` runs whose per-item correctness is ``latent`` with a fraction ``flip`` of items
    flipped per seed; results.json reports each run's accuracy on test."""
    out = []
    for seed in range(seeds):
        correct = latent ^ (rng.random(latent.size) < flip)
        make_run(
            runs,
            f"{name}-{seed}",
            seed=seed,
            config={"arm": name, "seed": seed},
            results={"test": {"acc": float(correct.mean())}},
            metric=METRIC,
            predictions={"test": _rows(correct)},
        )
        out.append(RunData(runs / f"{name}-{seed}"))
    return out


def _only(findings: list[Finding]) -> Finding:
    assert len(findings) == 1, findings
    return findings[0]


def _lucky_test_set(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-item correctness of two methods that are equally good (each right on an item with
    probability 0.7, independently): the truth is no difference. The first generator seed on
    whose test set of ``n`` items the variant happens to be ≥ 9 points ahead."""
    for s in range(1000):
        rng = np.random.default_rng(s)
        v, b = rng.random(n) < 0.7, rng.random(n) < 0.7
        if v.mean() - b.mean() >= 0.09:
            return v, b
    raise AssertionError("no such test set")


def test_test_set_noise_turns_a_seed_only_effect_into_noise(tmp_path: Path) -> None:
    """Ground truth: no difference. Seeds barely move the score (2 % of items flip), so the
    seed-only test calls the lucky test set's +9 points an effect; the two-level bootstrap sees
    that another test set of 100 items would move it by more, and says noise, beside it."""
    v, b = _lucky_test_set(100)
    rng = np.random.default_rng(1)
    ctx = Context(
        runs=_arm(tmp_path, "var", v, 5, 0.02, rng),
        baselines=_arm(tmp_path, "base", b, 5, 0.02, rng),
    )
    seed_only = _only(seed_noise(ctx))
    assert seed_only.verdict == "effect"
    found = _only(two_level_noise(ctx))
    assert found.verdict == "noise", found.disclosure
    c = found.computed
    assert c["seed_only"]["verdict"] == "effect" and c["seed_only"]["p"] < 0.05
    assert c["p"] > 0.05 and c["ci95"][0] < 0 < c["ci95"][1]
    assert c["test_share"] > 0.5 and c["n_items"] == 100
    assert "does not survive another draw of the test set" in found.disclosure
    assert {i["path"].rsplit("/", 1)[-1] for i in found.inputs} >= {"test.jsonl"}


def test_a_true_effect_is_an_effect_for_both(tmp_path: Path) -> None:
    """Ground truth: the variant is right on 85 % of items, the baseline on 70 %, each seed
    flipping 5 % of items: a true difference of 0.15 x (1 - 2 x 0.05) = 0.135 on 2,000 items;
    both tests see it."""
    rng = np.random.default_rng(3)
    u = rng.random(2000)
    ctx = Context(
        runs=_arm(tmp_path, "var", u < 0.85, 4, 0.05, rng),
        baselines=_arm(tmp_path, "base", u < 0.70, 4, 0.05, rng),
    )
    found = _only(two_level_noise(ctx))
    assert found.verdict == "effect", found.disclosure
    low, high = found.computed["ci95"]
    assert 0 < low < 0.135 < high
    assert found.computed["seed_only"]["verdict"] == "effect"
    lo, hi = found.computed["bootstrap_ci95"]
    assert lo < found.computed["diff"] < hi


def test_two_level_matches_its_variance_components() -> None:
    """Seed and item components: a difference only between seeds has no item share, and the
    joint bootstrap's SE is close to the sum of the components."""
    rng = np.random.default_rng(0)
    items = rng.normal(size=300)
    a = items + rng.normal(0, 0.1, (6, 1)) + 0.05 * rng.normal(size=(6, 300))
    b = items + rng.normal(0, 0.1, (6, 1)) + 0.05 * rng.normal(size=(6, 300))
    out = two_level(a, b, resamples=4000)
    per_a, per_b = a.mean(axis=1), b.mean(axis=1)
    assert out["variance"]["seeds_variant"] == pytest.approx(np.var(per_a, ddof=1) / 6)
    assert out["variance"]["test_items"] == pytest.approx(
        np.var(a.mean(0) - b.mean(0), ddof=1) / 300
    )
    assert out["bootstrap_se"] == pytest.approx(out["se"], rel=0.25)
    assert out["diff"] == pytest.approx(per_a.mean() - per_b.mean())


def test_verify_reports_two_level_beside_seed_only(tmp_path: Path) -> None:
    """Through ``verify()``: both findings are recorded, the seed-only one unchanged."""
    project = tmp_path / "proj"
    runs = project / "runs"
    v, b = _lucky_test_set(100)
    rng = np.random.default_rng(1)
    var = _arm(runs, "var", v, 5, 0.02, rng)
    base = _arm(runs, "base", b, 5, 0.02, rng)
    report = verify([r.run_id for r in var], [r.run_id for r in base], project=project)
    assert report.verdict("seed_noise") == "effect"
    assert report.verdict("two_level_noise") == "noise"
    assert "two_level_noise" in report.text()
    logged = [json.loads(line) for line in (project / "verify" / "findings.jsonl").open()]
    checks = {rec["check"] for rec in logged}
    assert {"seed_noise", "two_level_noise", "tasks_iqm", "tuning_budget"} <= checks
    assert report.verdict("tasks_iqm") == "not_checked"
    assert report.verdict("tuning_budget") == "not_checked"


def test_two_level_not_checked_without_predictions(tmp_path: Path) -> None:
    for k in range(2):
        make_run(tmp_path, f"v-{k}", seed=k, results={"test": {"acc": 0.8}}, metric=METRIC)
        make_run(tmp_path, f"b-{k}", seed=k, results={"test": {"acc": 0.7}}, metric=METRIC)
    ctx = Context(
        runs=[RunData(tmp_path / f"v-{k}") for k in range(2)],
        baselines=[RunData(tmp_path / f"b-{k}") for k in range(2)],
    )
    found = _only(two_level_noise(ctx))
    assert found.verdict == "not_checked"
    assert "job.save_predictions" in found.disclosure


JOB = """\
import random
import rgt_jupyter.job as job
seed = job.seed(0)
rng = random.Random(seed)
ids = ["x%d" % i for i in range(60)]
targets = [i % 2 for i in range(60)]
preds = [t if rng.random() < 0.9 else 1 - t for t in targets]
job.declare_metric("acc", "max", split="test", fn="accuracy")
job.save_predictions("test", ids, preds, targets)
job.save_results({"test": {"acc": sum(p == t for p, t in zip(preds, targets)) / 60}})
"""


def test_predictions_of_a_real_job_are_bootstrapped(project: Path) -> None:
    """A run pulled from a job that saved its predictions with the job API is one arm's seed;
    the two-level test reads its items paired with hand-made runs of the same ids."""
    pulled = finished(project, JOB, "pred").pull()
    assert isinstance(pulled, Run)
    real = RunData(pulled.path)
    rows = real.predictions("test")
    assert rows is not None and len(rows) == 60
    runs = project / "runs"
    rng = np.random.default_rng(5)
    others = []
    for name, rate in (("var-1", 0.9), ("base-0", 0.6), ("base-1", 0.6)):
        correct = rng.random(60) < rate
        preds = [
            {"id": f"x{i}", "pred": int(c) if i % 2 else 1 - int(c), "target": i % 2}
            for i, c in enumerate(correct)
        ]
        make_run(
            runs,
            name,
            results={"test": {"acc": float(correct.mean())}},
            metric=METRIC,
            predictions={"test": preds},
        )
        others.append(RunData(runs / name))
    ctx = Context(runs=[real, others[0]], baselines=others[1:])
    found = _only(two_level_noise(ctx))
    assert found.verdict in ("effect", "noise", "inconclusive")
    assert found.computed["n_items"] == 60 and found.computed["items_not_shared"] == 0
    assert any(i["path"].startswith(str(pulled.path)) for i in found.inputs)
    assert found.computed["diff"] > 0


# ----------------------------------------------------------------------------- several tasks


def _task_runs(runs: Path, name: str, means: dict[str, float], n: int, seed: int) -> list[RunData]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        tasks = {t: float(m + rng.normal(0, 0.05)) for t, m in means.items()}
        make_run(runs, f"{name}-{k}", seed=k, results={"tasks": tasks}, metric=METRIC)
        out.append(RunData(runs / f"{name}-{k}"))
    return out


def test_iqm_and_probability_of_improvement_across_tasks(tmp_path: Path) -> None:
    base = {"pong": 0.5, "breakout": 0.3, "qbert": 0.7, "seaquest": 0.4}
    better = {t: m + 0.15 for t, m in base.items()}
    ctx = Context(
        runs=_task_runs(tmp_path, "v", better, 5, 0),
        baselines=_task_runs(tmp_path, "b", base, 5, 1),
    )
    found = _only(tasks_iqm(ctx))
    assert found.verdict == "effect", found.disclosure
    c = found.computed
    var = np.array([[r.results["tasks"][t] for t in sorted(base)] for r in ctx.runs])
    assert c["iqm_variant"] == pytest.approx(stats.trim_mean(var.ravel(), 0.25))
    assert c["iqm_variant_ci95"][0] <= c["iqm_variant"] <= c["iqm_variant_ci95"][1]
    assert c["probability_of_improvement_ci95"][0] > 0.5
    assert c["tasks"] == sorted(base) and c["bootstrap"] == "percentile, stratified by task"
    assert "IQM over 4 tasks" in found.disclosure


def test_equal_arms_across_tasks_are_noise(tmp_path: Path) -> None:
    base = {"a": 0.5, "b": 0.3, "c": 0.7}
    ctx = Context(
        runs=_task_runs(tmp_path, "v", base, 5, 2),
        baselines=_task_runs(tmp_path, "b", base, 5, 3),
    )
    found = _only(tasks_iqm(ctx))
    assert found.verdict == "noise"
    lo, hi = found.computed["probability_of_improvement_ci95"]
    assert lo < 0.5 < hi


def test_poi_and_iqm_definitions() -> None:
    x = np.array([[1.0, 0.0], [2.0, 0.0]])
    y = np.array([[1.0, 1.0], [0.0, 1.0]])
    # task 0: pairs (1>1 tie, 1>0, 2>1, 2>0) = 3.5/4; task 1: 0 > 1 never = 0
    assert float(poi(x, y)) == pytest.approx((3.5 / 4 + 0.0) / 2)
    assert float(iqm(np.arange(8.0))) == pytest.approx(np.mean([2, 3, 4, 5]))


# ----------------------------------------------------------------------------- tuning budgets


def _search(values: list[float]) -> dict[str, bytes]:
    trials = [{"config": {"lr": 10.0 ** -(1 + i % 4)}, "value": v} for i, v in enumerate(values)]
    body = {"metric": "acc", "direction": "max", "split": "val", "trials": trials}
    return {"outputs/verify/search.json": json.dumps(body).encode()}


def test_unequal_tuning_budgets_are_flagged_with_expected_max_curves(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    big = [float(v) for v in rng.uniform(0.6, 0.8, 50)]
    small = [float(v) for v in rng.uniform(0.6, 0.8, 5)]
    for k in range(2):
        make_run(tmp_path, f"v-{k}", seed=k, metric=METRIC, extra=_search(big))
        make_run(tmp_path, f"b-{k}", seed=k, metric=METRIC, extra=_search(small))
    ctx = Context(
        runs=[RunData(tmp_path / f"v-{k}") for k in range(2)],
        baselines=[RunData(tmp_path / f"b-{k}") for k in range(2)],
    )
    found = _only(tuning_budget(ctx))
    assert found.verdict == "finding"
    c = found.computed
    assert c["budgets"] == {"variant": 50, "baseline": 5}  # one shared search counted once
    curve = c["expected_max"]["variant"]
    assert len(curve) == 50 and curve[0] == pytest.approx(np.mean(big))
    assert all(x <= y + 1e-12 for x, y in zip(curve, curve[1:], strict=False))
    assert curve[-1] <= max(big)
    assert c["common_budget"] == 5
    assert c["expected_max_at_common_budget"]["variant"] == pytest.approx(curve[4])
    assert "unequal tuning budgets: variant 50 trials, baseline 5" in found.disclosure


def test_expected_max_matches_sampling() -> None:
    values = [0.1, 0.5, 0.2, 0.9, 0.4]
    rng = np.random.default_rng(0)
    draws = rng.choice(values, size=(200_000, 3)).max(axis=1).mean()
    assert expected_max(values, 3)[2] == pytest.approx(draws, abs=0.005)
    assert expected_max(values, 2, higher_is_better=False)[0] == pytest.approx(np.mean(values))
    assert expected_max(values, 2, higher_is_better=False)[1] < np.mean(values)


def test_equal_budgets_pass_and_undeclared_is_not_checked(tmp_path: Path) -> None:
    vals = [0.7, 0.72, 0.71]
    make_run(tmp_path, "v-0", metric=METRIC, extra=_search(vals))
    make_run(tmp_path, "b-0", metric=METRIC, extra=_search([0.6, 0.65, 0.7]))
    make_run(tmp_path, "b-1", metric=METRIC)
    ctx = Context(runs=[RunData(tmp_path / "v-0")], baselines=[RunData(tmp_path / "b-0")])
    assert _only(tuning_budget(ctx)).verdict == "pass"
    ctx = Context(runs=[RunData(tmp_path / "v-0")], baselines=[RunData(tmp_path / "b-1")])
    found = _only(tuning_budget(ctx))
    assert found.verdict == "not_checked" and "baseline" in found.disclosure


# ----------------------------------------------------------------------------- the bench


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("verify_stats_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_bench_small_run(tmp_path: Path) -> None:
    """120 comparisons (20 per regime): the two-level interval covers the truth near its
    nominal rate and calls fewer false effects than the seed-only test, which misses the test
    set's noise; the script writes its JSON with the machine named."""
    bench = _bench()
    out = bench.run(120, 200)
    assert out["comparisons"] == 120 and len(out["per_regime"]) == len(bench.REGIMES)
    two, welch = out["overall"]["two_level"], out["overall"]["welch"]
    assert two["coverage"] >= 0.9 and two["coverage"] > welch["coverage"]
    assert two["false_effect_rate"] < welch["false_effect_rate"]
    assert out["machine"]["python"]
    target = tmp_path / "stats.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--n", "12", "--resamples", "100", "--out", str(target)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(target.read_text())["comparisons"] == 12


def test_committed_bench_figures_meet_their_goals() -> None:
    data = json.loads((REPO / "bench" / "results" / "verify_stats.json").read_text())
    assert data["comparisons"] == 1000
    two, welch = data["overall"]["two_level"], data["overall"]["welch"]
    assert two["coverage"] >= 0.94
    assert two["false_effect_rate"] <= 0.05
    held = data["where_welch_holds_its_size"]
    assert held["regimes"] and held["two_level"]["power"] >= held["welch"]["power"]
    # where the test set's noise matters, the seed-only test calls effects that are not there
    assert welch["false_effect_rate"] > 0.05
    assert all(data["goals_met"].values())
    assert data["machine"]["cpu_count"]
