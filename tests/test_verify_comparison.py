"""The comparison checks (metric direction, one-variable diff, seed noise, stale artifacts) over
real run folders, each with its defect planted."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter.verify.checks.common import resolve_metric
from rgt_jupyter.verify.checks.direction import metric_direction
from rgt_jupyter.verify.checks.one_variable import one_variable
from rgt_jupyter.verify.checks.seed_noise import seed_noise
from rgt_jupyter.verify.checks.stale import stale_artifact
from rgt_jupyter.verify.model import Context, Finding, RunData
from tests.verify_fixtures import make_run

ACC = {"name": "acc", "direction": "max", "split": "test"}


def _arm(
    runs: Path,
    prefix: str,
    values: list[float],
    *,
    config: dict[str, Any] | None = None,
    seeds: list[int] | None = None,
    metric: dict[str, Any] | None = ACC,
    **kwargs: Any,
) -> list[RunData]:
    """One run per value, seeds 0, 1, 2... unless given, each reporting ``acc`` on test."""
    out = []
    for i, value in enumerate(values):
        seed = seeds[i] if seeds else i
        cfg = {**(config or {"lr": 0.1, "depth": 4}), "seed": seed}
        path = make_run(
            runs,
            f"{prefix}-{seed}",
            config=cfg,
            seed=seed,
            results={"test": {"acc": value}},
            metric=metric,
            **kwargs,
        )
        out.append(RunData(path))
    return out


def _only(findings: list[Finding]) -> Finding:
    assert len(findings) == 1, [(f.verdict, f.disclosure) for f in findings]
    return findings[0]


def _check_record(finding: Finding) -> None:
    """Every finding names its runs, its inputs with their real sha256, and is plain JSON."""
    assert finding.run_ids
    assert finding.disclosure
    json.dumps(finding.record(), allow_nan=False)
    assert finding.inputs
    for item in finding.inputs:
        assert hashlib.sha256(Path(item["path"]).read_bytes()).hexdigest() == item["sha256"]


# ----------------------------------------------------------------------------- metric


def test_resolve_metric_from_declaration_and_arguments(tmp_path: Path) -> None:
    runs = _arm(
        tmp_path / "runs", "v", [0.8], metric={"name": "loss", "direction": "lower_is_better"}
    )
    assert resolve_metric(Context(runs)) == ("loss", "min", "test")
    assert resolve_metric(Context(runs, metric="acc", direction="max", split="val")) == (
        "acc",
        "max",
        "val",
    )


def test_missing_direction_is_inconclusive(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    var = _arm(root, "v", [0.9], metric={"name": "acc"})
    base = _arm(root, "b", [0.8], metric={"name": "acc"})
    finding = _only(metric_direction(Context(var, base)))
    assert finding.verdict == "inconclusive"
    assert "no direction" in finding.disclosure
    assert "job.declare_metric(name, direction)" in finding.disclosure
    assert finding.computed["delta"] == pytest.approx(0.1)
    assert finding.computed["label"] is None
    _check_record(finding)


def test_declared_direction_passes_and_labels_the_delta(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    var = _arm(root, "v", [0.9])
    base = _arm(root, "b", [0.8])
    finding = _only(metric_direction(Context(var, base)))
    assert finding.verdict == "pass"
    assert finding.computed["direction"] == "max"
    assert finding.computed["label"] == "better"
    given = _only(metric_direction(Context(var, base, metric="acc", direction="min")))
    assert given.verdict == "bug"
    assert "contradicts" in given.disclosure


def test_runs_declaring_different_directions_is_a_bug(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    var = _arm(root, "v", [0.9], metric={"name": "acc", "direction": "min"})
    base = _arm(root, "b", [0.8])
    finding = _only(metric_direction(Context(var, base)))
    assert finding.verdict == "bug"
    assert "different directions" in finding.disclosure
    assert "v-0: min" in finding.disclosure and "b-0: max" in finding.disclosure


# ----------------------------------------------------------------------------- one variable


def test_confounded_ablation_names_the_undeclared_key(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    base = _arm(root, "b", [0.8, 0.81, 0.79], config={"lr": 0.1, "depth": 4})
    var = _arm(root, "v", [0.9, 0.91, 0.89], config={"lr": 0.01, "depth": 8}, changed=["lr"])
    finding = _only(one_variable(Context(var, base)))
    assert finding.verdict == "bug"
    assert "confounded" in finding.disclosure
    assert "depth (variant 8, baseline 4)" in finding.disclosure
    assert "lr" not in [k for p in finding.computed["pairs"] for k in p["extra"]]
    assert {p["variant"]: p["baseline"] for p in finding.computed["pairs"]} == {
        "v-0": "b-0",
        "v-1": "b-1",
        "v-2": "b-2",
    }
    assert finding.computed["declared"] == ["lr"]
    _check_record(finding)


def test_ablation_that_never_applied(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    base = _arm(root, "b", [0.8])
    var = _arm(root, "v", [0.8], changed=["lr"])
    finding = _only(one_variable(Context(var, base)))
    assert finding.verdict == "bug"
    assert "never applied" in finding.disclosure
    assert "lr was declared" in finding.disclosure


def test_declared_key_not_applied_while_another_changed(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    base = _arm(root, "b", [0.8])
    var = _arm(root, "v", [0.8], config={"lr": 0.1, "depth": 8})
    finding = _only(one_variable(Context(var, base, changed=["lr"])))
    assert finding.verdict == "bug"
    assert "declared but not applied: lr" in finding.disclosure
    assert "depth (variant 8, baseline 4)" in finding.disclosure


def test_clean_one_variable_ablation_passes(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    base = _arm(root, "b", [0.8, 0.81, 0.79], config={"lr": 0.1, "depth": 4, "name": "base"})
    var = _arm(root, "v", [0.9, 0.91, 0.89], config={"lr": 0.01, "depth": 4, "name": "abl"})
    finding = _only(one_variable(Context(var, base, changed=["lr"])))
    assert finding.verdict == "pass", finding.disclosure
    assert "lr (variant 0.01, baseline 0.1)" in finding.disclosure
    assert sorted(finding.run_ids) == ["b-0", "b-1", "b-2", "v-0", "v-1", "v-2"]


def test_commit_and_environment_differences_confound(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    base = _arm(root, "b", [0.8])
    var = _arm(
        root,
        "v",
        [0.9],
        config={"lr": 0.01, "depth": 4},
        git={"commit": "def456", "dirty": False},
        env_lock={"torch": "2.14.0", "numpy": "2.1.0"},
        changed=["lr"],
    )
    finding = _only(one_variable(Context(var, base)))
    assert finding.verdict == "bug"
    assert "git.commit (variant 'def456', baseline 'abc123')" in finding.disclosure
    assert "env_lock.torch (variant '2.14.0', baseline '2.13.0')" in finding.disclosure
    assert "env_lock.numpy" not in finding.disclosure


def test_declared_code_change_covers_commit_and_hash(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    base = _arm(root, "b", [0.8])
    var = _arm(root, "v", [0.9], git={"commit": "def456", "dirty": False}, code_hash="f00d")
    finding = _only(one_variable(Context(var, base, changed=["code"])))
    assert finding.verdict == "pass", finding.disclosure


def test_nothing_declared_reports_the_one_difference(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    base = _arm(root, "b", [0.8])
    var = _arm(root, "v", [0.9], config={"lr": 0.01, "depth": 4})
    finding = _only(one_variable(Context(var, base)))
    assert finding.verdict == "inconclusive"
    assert "only lr (variant 0.01, baseline 0.1) differs" in finding.disclosure


def test_unpaired_single_seeds_are_a_confound(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    base = _arm(root, "b", [0.8], seeds=[0])
    var = _arm(root, "v", [0.9], seeds=[7], config={"lr": 0.01, "depth": 4})
    finding = _only(one_variable(Context(var, base, changed=["lr"])))
    assert finding.verdict == "bug"
    assert "seed (variant 7, baseline 0)" in finding.disclosure


def test_unpaired_seeds_of_multi_seed_arms_are_left_to_seed_noise(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    base = _arm(root, "b", [0.8, 0.81], seeds=[0, 1])
    var = _arm(root, "v", [0.9, 0.91], seeds=[5, 6], config={"lr": 0.01, "depth": 4})
    finding = _only(one_variable(Context(var, base, changed=["lr"])))
    assert finding.verdict == "pass", finding.disclosure
    assert "seeds are not paired" in finding.disclosure
    assert finding.computed["pairs"][0]["seeds"]["seed"] == {"variant": 5, "baseline": 0}


def test_no_baseline_is_not_checked(tmp_path: Path) -> None:
    var = _arm(tmp_path / "runs", "v", [0.9])
    finding = _only(one_variable(Context(var)))
    assert finding.verdict == "not_checked"
    assert "no baseline runs" in finding.disclosure


def test_config_saved_for_neither_run_is_inconclusive(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    base = [RunData(make_run(root, "b-0", results={"test": {"acc": 0.8}}, metric=ACC))]
    var = [RunData(make_run(root, "v-0", results={"test": {"acc": 0.9}}, metric=ACC))]
    finding = _only(one_variable(Context(var, base, changed=["lr"])))
    assert finding.verdict == "inconclusive"
    assert "no config saved" in finding.disclosure
    assert "config" in finding.computed["pairs"][0]["unknown"]


# ----------------------------------------------------------------------------- seed noise


def test_win_within_seed_noise_is_noise(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    base = _arm(root, "b", [0.80, 0.82, 0.79])
    var = _arm(root, "v", [0.81, 0.80, 0.83])
    finding = _only(seed_noise(Context(var, base)))
    assert finding.verdict == "noise", finding.disclosure
    assert "within seed noise" in finding.disclosure
    c = finding.computed
    assert c["diff"] == pytest.approx(0.01)
    assert c["ci95"][0] < 0 < c["ci95"][1]
    assert abs(c["diff"]) < c["mde"]
    # G7 with the power term: (t_.975 + t_.80, df 4) * s_pooled * sqrt(2/3).
    assert c["mde"] == pytest.approx((2.7764 + 0.9410) * c["s_pooled"] * (2 / 3) ** 0.5, rel=1e-3)
    _check_record(finding)


@pytest.mark.parametrize("direction,label", [("max", "better"), ("min", "worse")])
def test_real_effect_is_labelled_by_direction(tmp_path: Path, direction: str, label: str) -> None:
    root = tmp_path / "runs"
    metric = {"name": "acc", "direction": direction}
    base = _arm(root, "b", [0.80, 0.81, 0.79], metric=metric)
    var = _arm(root, "v", [0.90, 0.91, 0.89], metric=metric)
    finding = _only(seed_noise(Context(var, base)))
    assert finding.verdict == "effect", finding.disclosure
    assert f"+0.1, {label})" in finding.disclosure
    c = finding.computed
    assert c["label"] == label
    assert c["ci95"][0] > 0
    # 3+3 seeds: the exact permutation test cannot go below 0.1, so Welch decides.
    assert c["permutation_exact"] and c["permutation_p"] == pytest.approx(0.1)
    assert c["p_test"] == "welch" and c["p"] < 0.001
    assert c["hedges_g"] == pytest.approx(8.0)
    best = "b-1" if direction == "max" else "b-2"
    assert c["baseline_draw"]["vs_best"]["run_id"] == best
    assert f"vs its best seed ({best})" in finding.disclosure


def test_effect_with_four_seeds_is_decided_by_the_permutation_test(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    base = _arm(root, "b", [0.80, 0.81, 0.79, 0.80])
    var = _arm(root, "v", [0.90, 0.91, 0.89, 0.90])
    finding = _only(seed_noise(Context(var, base)))
    assert finding.verdict == "effect"
    assert finding.computed["p_test"] == "permutation"
    assert finding.computed["p"] == pytest.approx(2 / 70)


def test_underpowered_difference_is_inconclusive(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    base = _arm(root, "b", [0.80, 0.82, 0.79])
    var = _arm(root, "v", [0.84, 0.86, 0.81])
    finding = _only(seed_noise(Context(var, base)))
    assert finding.verdict == "inconclusive", finding.disclosure
    assert "underpowered" in finding.disclosure
    assert f"the MDE is {finding.computed['mde']:.3g}" in finding.disclosure
    assert finding.computed["seeds_needed"] > 3


def test_single_seed_is_inconclusive_once(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    base = _arm(root, "b", [0.80, 0.82, 0.79])
    var = _arm(root, "v", [0.95])
    finding = _only(seed_noise(Context(var, base)))
    assert finding.verdict == "inconclusive"
    assert finding.disclosure.startswith("single seed, no variance band")
    draw = finding.computed["baseline_draw"]
    assert draw["vs_worst"]["run_id"] == "b-2"
    assert draw["vs_best"]["delta"] == pytest.approx(0.13)


def test_no_baseline_describes_the_spread_only(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    spread = _only(seed_noise(Context(_arm(root, "v", [0.9, 0.92]))))
    assert spread.verdict == "pass"  # the variance band to report; no difference is called
    assert "std over 2 seeds" in spread.disclosure and "no baseline" in spread.disclosure
    single = _only(seed_noise(Context(_arm(root, "w", [0.9]))))
    assert single.verdict == "not_checked"


def test_no_direction_says_higher_not_better(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    base = _arm(root, "b", [0.80, 0.81, 0.79], metric={"name": "acc"})
    var = _arm(root, "v", [0.90, 0.91, 0.89], metric={"name": "acc"})
    finding = _only(seed_noise(Context(var, base)))
    assert finding.verdict == "effect"
    assert "+0.1, higher)" in finding.disclosure
    assert finding.computed["label"] is None
    assert "vs_highest" in finding.computed["baseline_draw"]


# ----------------------------------------------------------------------------- stale artifacts


def test_identical_results_from_two_seeds_is_stale(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    runs = _arm(root, "v", [0.8941, 0.8941, 0.87])
    results, checkpoints = stale_artifact(Context(runs))
    assert results.verdict == "bug"
    assert results.disclosure.startswith("stale: the same number from runs that should differ")
    assert "v-0 and v-1 (seed 0 vs 1): 0.8941" in results.disclosure
    assert sorted(results.run_ids) == ["v-0", "v-1"]
    assert checkpoints.verdict == "not_checked"
    _check_record(results)


def test_same_value_in_different_results_files_is_inconclusive(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    a = RunData(make_run(root, "a-0", seed=0, results={"test": {"acc": 0.9}, "n": 1}, metric=ACC))
    b = RunData(make_run(root, "a-1", seed=1, results={"test": {"acc": 0.9}, "n": 2}, metric=ACC))
    results = stale_artifact(Context([a, b]))[0]
    assert results.verdict == "inconclusive"
    assert "results files differ" in results.disclosure


def _ckpt(data: bytes, step: int = 100) -> dict[str, Any]:
    return {"path": "checkpoints/best.pt", "sha256": hashlib.sha256(data).hexdigest(), "step": step}


def test_checkpoint_copied_from_another_run_is_a_bug(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    own_b = b"weights of b-0"
    base = RunData(
        make_run(
            root,
            "b-0",
            results={"test": {"acc": 0.8}, "checkpoint": _ckpt(own_b)},
            checkpoints={"best.pt": own_b},
            metric=ACC,
        )
    )
    var = RunData(
        make_run(
            root,
            "v-0",
            config={"lr": 0.01},
            results={"test": {"acc": 0.8}, "checkpoint": _ckpt(own_b)},
            checkpoints={"best.pt": own_b},
            metric=ACC,
        )
    )
    findings = stale_artifact(Context([var], [base]))
    bugs = [f for f in findings if f.verdict == "bug" and "copied from another run" in f.disclosure]
    assert bugs, [(f.verdict, f.disclosure) for f in findings]
    assert "the checkpoint v-0 evaluated" in bugs[0].disclosure
    assert "is a checkpoint file of b-0" in bugs[0].disclosure
    _check_record(bugs[0])


def test_checkpoint_not_among_the_runs_own(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    other = b"weights from elsewhere"
    run = RunData(
        make_run(
            root,
            "v-0",
            results={"test": {"acc": 0.8}, "checkpoint": _ckpt(other)},
            checkpoints={"last.pt": b"own weights"},
            metric=ACC,
        )
    )
    findings = stale_artifact(Context([run]))
    assert [f.verdict for f in findings] == ["not_checked", "bug"]
    assert "none of its 1 checkpoint file(s)" in findings[1].disclosure


def test_checkpoint_step_past_the_last_step(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    data = b"weights"
    run = RunData(
        make_run(
            root,
            "v-0",
            results={"test": {"acc": 0.8}, "checkpoint": _ckpt(data, step=5000)},
            checkpoints={"best.pt": data},
            evals=[{"split": "val", "step": s, "purpose": "report", "metrics": {}} for s in (1, 2)],
            metric=ACC,
        )
    )
    finding = _only([f for f in stale_artifact(Context([run])) if f.verdict == "bug"])
    assert "from step 5000, past the run's last step 2" in finding.disclosure


def test_same_checkpoint_bytes_in_runs_that_should_differ(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    runs = [
        RunData(
            make_run(
                root,
                f"v-{s}",
                seed=s,
                results={"test": {"acc": 0.8 + s / 100}},
                checkpoints={"last.pt": b"same bytes"},
                metric=ACC,
            )
        )
        for s in (0, 1)
    ]
    bug = _only([f for f in stale_artifact(Context(runs)) if f.verdict == "bug"])
    assert "v-0 and v-1 should differ but hold the same checkpoint bytes" in bug.disclosure


# ----------------------------------------------------------------------------- clean inputs


def _clean(root: Path) -> Context:
    base: list[RunData] = []
    var: list[RunData] = []
    for arm, lr, values, out in (
        ("b", 0.1, [0.80, 0.81, 0.79], base),
        ("v", 0.01, [0.9, 0.91, 0.89], var),
    ):
        for seed, value in enumerate(values):
            weights = f"{arm}{seed}".encode()
            out.append(
                RunData(
                    make_run(
                        root,
                        f"{arm}-{seed}",
                        config={"lr": lr, "seed": seed},
                        seed=seed,
                        results={"test": {"acc": value}, "checkpoint": _ckpt(weights, 3)},
                        checkpoints={"best.pt": weights},
                        evals=[
                            {
                                "split": "val",
                                "step": 3,
                                "purpose": "checkpoint_selection",
                                "metrics": {"acc": value},
                            }
                        ],
                        metric=ACC,
                        changed=["lr"] if arm == "v" else None,
                    )
                )
            )
    return Context(var, base)


def test_clean_inputs_only_pass_or_not_checked(tmp_path: Path) -> None:
    ctx = _clean(tmp_path / "runs")
    for check in (metric_direction, one_variable, stale_artifact):
        for finding in check(ctx):
            assert finding.verdict in ("pass", "not_checked"), (check, finding.disclosure)
            assert not finding.is_problem
            _check_record(finding)
    verdicts = [f.verdict for f in stale_artifact(ctx)]
    assert verdicts == ["pass", "pass"]
    assert _only(seed_noise(ctx)).verdict == "effect"


def test_a_lone_run_is_never_a_problem(tmp_path: Path) -> None:
    ctx = Context(_arm(tmp_path / "runs", "v", [0.9]))
    verdicts = {
        check.__name__: [f.verdict for f in check(ctx)]
        for check in (metric_direction, one_variable, seed_noise, stale_artifact)
    }
    assert verdicts == {
        "metric_direction": ["pass"],
        "one_variable": ["not_checked"],
        "seed_noise": ["not_checked"],
        "stale_artifact": ["not_checked"],
    }
