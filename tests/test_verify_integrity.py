"""The integrity checks of VERIFY on run folders with planted defects: leakage, test used for
selection, collapse, and re-derivation of the reported number from predictions."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rgt_jupyter.verify.checks.collapse import collapse
from rgt_jupyter.verify.checks.leakage import leakage
from rgt_jupyter.verify.checks.rederive import rederive
from rgt_jupyter.verify.checks.selection import test_selection
from rgt_jupyter.verify.model import Context, Finding, RunData

from .verify_fixtures import make_run


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _run(tmp_path: Path, run_id: str = "exp-1", **kwargs: Any) -> RunData:
    return RunData(make_run(tmp_path / "runs", run_id, **kwargs))


def _only(findings: list[Finding], run: RunData | None = None) -> Finding:
    mine = [f for f in findings if run is None or f.run_ids == [run.run_id]]
    assert len(mine) == 1, [(f.verdict, f.disclosure) for f in mine]
    return mine[0]


def _verdicts(findings: list[Finding]) -> list[str]:
    return sorted(f.verdict for f in findings)


def _input_paths(finding: Finding) -> list[str]:
    return [Path(i["path"]).name for i in finding.inputs]


def _prediction_rows(preds: list[Any], targets: list[Any]) -> list[dict[str, Any]]:
    return [
        {"id": f"t{i}", "pred": p, "target": t}
        for i, (p, t) in enumerate(zip(preds, targets, strict=True))
    ]


# ----------------------------------------------------------------------------- leakage


def test_leak_by_id_touches_test(tmp_path: Path) -> None:
    run = _run(
        tmp_path,
        splits={"train": ["a", "b", "c", "d"], "test": ["c", "d", "e", "f"]},
    )
    finding = _only(leakage(Context(runs=[run])))
    assert finding.check == "leakage"
    assert finding.verdict == "finding"
    pair = finding.computed["pair"]
    assert pair["splits"] == ["test", "train"]
    assert pair["overlap"] == 2 and pair["fraction"] == pytest.approx(0.5)
    assert pair["examples"] == ["c", "d"]
    assert pair["content_compared"] is False
    assert "2 of 4 test items (50.0 %) also appear in train" in finding.disclosure
    assert "every claim on the test split is affected" in finding.disclosure.lower()
    assert "Content was not compared" in finding.disclosure
    assert sorted(_input_paths(finding)) == ["test.ids", "train.ids"]
    assert all(len(i["sha256"]) == 64 for i in finding.inputs)


def test_leak_by_content_under_another_name(tmp_path: Path) -> None:
    train = {f"train_{i}.png": _sha(f"img{i}") for i in range(4)}
    test = {"test_0.png": _sha("img2"), "test_1.png": _sha("other")}
    run = _run(
        tmp_path,
        splits={"train": list(train), "test": list(test)},
        split_hashes={"train": train, "test": test},
    )
    finding = _only(leakage(Context(runs=[run])))
    assert finding.verdict == "finding"
    pair = finding.computed["pair"]
    assert pair["shared_names"] == 0
    assert pair["renamed_same_content"] == 1
    assert pair["examples"] == ["test_0.png"]
    assert "1 by identical content under another name" in finding.disclosure
    assert "test.sha256" in _input_paths(finding)


def test_same_names_different_content_is_not_a_leak(tmp_path: Path) -> None:
    names = ["x1", "x2", "x3"]
    train = {n: _sha(f"train-{n}") for n in names}
    test = {n: _sha(f"test-{n}") for n in names}
    run = _run(
        tmp_path,
        splits={"train": names, "test": names},
        split_hashes={"train": train, "test": test},
    )
    finding = _only(leakage(Context(runs=[run])))
    assert finding.verdict == "pass"
    pair = finding.computed["pairs"][0]
    assert pair["shared_names"] == 3 and pair["overlap"] == 0
    note = pair["same_names_different_content"]
    assert note["count"] == 3
    assert note["note"] == "same names, different content: not a leak"
    assert "3 same names, different content (not a leak)" in finding.disclosure
    assert finding.computed["content_compared"] is True


def test_casefolded_duplicate_ingestion(tmp_path: Path) -> None:
    run = _run(
        tmp_path,
        splits={
            "train": ["Train/img1.png", "train/img1.png", "train/img2.png"],
            "test": ["test/img9.png"],
        },
    )
    finding = _only(leakage(Context(runs=[run])))
    assert finding.verdict == "finding"
    dup = finding.computed["duplicate_ingestion"]
    assert dup["split"] == "train"
    assert dup["n_duplicates"] == 1 and dup["n_unique_casefolded"] == 2
    assert dup["examples"] == [["Train/img1.png", "train/img1.png"]]
    assert "ingested more than once" in finding.disclosure


def test_val_overlap_names_the_selection_problem(tmp_path: Path) -> None:
    run = _run(tmp_path, splits={"train": ["a", "b", "c"], "val": ["c", "d"], "test": ["z"]})
    finding = _only(leakage(Context(runs=[run])))
    assert finding.verdict == "finding"
    assert finding.computed["pair"]["splits"] == ["val", "train"]
    assert "validation split is not disjoint" in finding.disclosure


def test_disjoint_splits_pass_and_baselines_are_checked(tmp_path: Path) -> None:
    variant = _run(tmp_path, "variant-1", splits={"train": ["a", "b"], "test": ["c"]})
    baseline = _run(tmp_path, "base-1", splits={"train": ["a", "b"], "test": ["b"]})
    findings = leakage(Context(runs=[variant], baselines=[baseline]))
    ok, content = (f for f in findings if f.run_ids == [variant.run_id])
    assert ok.verdict == "pass"
    assert "share no items (compared by id, case-folded)" in ok.disclosure
    assert "Content was not compared" in ok.disclosure
    # Without content hashes, the content half is not_checked, said apart from the ids' pass.
    assert content.verdict == "not_checked" and "job.save_split(" in content.disclosure
    assert _only(findings, baseline).verdict == "finding"


def test_case_only_cross_split_match_without_hashes(tmp_path: Path) -> None:
    run = _run(tmp_path, splits={"train": ["Img/A.png", "img/b.png"], "test": ["img/a.png"]})
    finding = _only(leakage(Context(runs=[run])))
    assert finding.verdict == "finding"
    assert finding.computed["pair"]["case_only_matches"] == 1
    assert "1 by names that differ only in case" in finding.disclosure


def test_leakage_not_checked_without_two_splits(tmp_path: Path) -> None:
    none = _run(tmp_path, "none-1")
    one = _run(tmp_path, "one-1", splits={"test": ["a", "b"]})
    findings = leakage(Context(runs=[none, one]))
    first, second = _only(findings, none), _only(findings, one)
    assert first.verdict == second.verdict == "not_checked"
    assert "No splits were declared" in first.disclosure
    assert "job.save_split(name, ids, items=items)" in first.disclosure
    assert "Only split test was declared" in second.disclosure


# ----------------------------------------------------------------------------- test selection


def test_early_stopping_on_test_is_a_finding(tmp_path: Path) -> None:
    evals = [
        {"split": "test", "step": s, "purpose": "early_stopping", "metrics": {"acc": 0.5}}
        for s in (1, 2, 3)
    ]
    run = _run(tmp_path, evals=evals)
    finding = _only(test_selection(Context(runs=[run])))
    assert finding.check == "test_selection"
    assert finding.verdict == "finding"
    assert finding.computed["test_selection_evaluations"] == 3
    assert finding.computed["selection_purposes"] == ["early_stopping"]
    assert "The test split was used to select (early_stopping on test" in finding.disclosure
    assert "report a fresh test evaluation of the val-selected model" in finding.disclosure
    assert _input_paths(finding) == ["evals.jsonl"]


def test_val_only_selection_passes(tmp_path: Path) -> None:
    evals: list[dict[str, Any]] = [
        {"split": "val", "step": s, "purpose": "early_stopping", "metrics": {"acc": 0.5}}
        for s in (1, 2, 3)
    ]
    evals.append({"split": "test", "step": 3, "purpose": "report", "metrics": {"acc": 0.6}})
    run = _run(
        tmp_path,
        evals=evals,
        results={"selection": {"split": "val"}, "test_evaluations": 1},
    )
    finding = _only(test_selection(Context(runs=[run])))
    assert finding.verdict == "pass"
    assert finding.disclosure.startswith("Selection used val only")
    assert finding.computed["test_report_evaluations"] == 1


def test_repeated_test_reports_and_results_counts(tmp_path: Path) -> None:
    evals = [
        {"split": "test", "step": s, "purpose": "report", "metrics": {"acc": 0.5}}
        for s in (1, 2, 3, 4)
    ]
    run = _run(
        tmp_path,
        evals=evals,
        results={"selection": {"split": "test"}, "test_evaluations": 4},
    )
    findings = test_selection(Context(runs=[run]))
    assert _verdicts(findings) == ["finding"] * 3
    text = " | ".join(f.disclosure for f in findings)
    assert "evaluated 4 times" in text
    assert "test_evaluations = 4" in text
    assert "selected on test" in text


def test_results_only_single_test_evaluation_passes(tmp_path: Path) -> None:
    run = _run(tmp_path, results={"test_evaluations": 1})
    finding = _only(test_selection(Context(runs=[run])))
    assert finding.verdict == "pass"
    assert "results.json records 1 test evaluation(s)" in finding.disclosure
    assert "job.log_eval(split, step, metrics, purpose=...)" in finding.disclosure


def test_selection_not_checked_without_evals(tmp_path: Path) -> None:
    run = _run(tmp_path, results={"test": {"accuracy": 0.9}})
    finding = _only(test_selection(Context(runs=[run])))
    assert finding.verdict == "not_checked"
    assert "job.log_eval(split, step, metrics, purpose=...)" in finding.disclosure


# ----------------------------------------------------------------------------- collapse


def _outputs(vectors: np.ndarray) -> dict[str, Any]:
    return {"ids": [f"t{i}" for i in range(len(vectors))], "vectors": vectors.tolist()}


def test_near_identical_outputs_are_collapsed(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    vectors = np.ones((60, 16)) + rng.normal(scale=1e-3, size=(60, 16))
    run = _run(tmp_path, outputs={"test": _outputs(vectors)})
    finding = _only(collapse(Context(runs=[run])))
    assert finding.check == "collapse"
    assert finding.verdict == "bug"
    assert finding.computed["mean_offdiag_cosine"] > 0.99
    assert finding.computed["n_items"] == 60
    assert "collapsed: near-constant outputs" in finding.disclosure.lower()
    assert _input_paths(finding) == ["test.json"]


def test_diverse_outputs_pass(tmp_path: Path) -> None:
    vectors = np.random.default_rng(2).normal(size=(80, 16))
    run = _run(tmp_path, outputs={"test": _outputs(vectors)})
    finding = _only(collapse(Context(runs=[run])))
    assert finding.verdict == "pass"
    assert abs(finding.computed["mean_offdiag_cosine"]) < 0.1
    assert finding.computed["unique_rows"] == 80


def test_suspect_cosine_is_inconclusive(tmp_path: Path) -> None:
    vectors = np.ones((300, 16)) + np.random.default_rng(3).normal(scale=0.18, size=(300, 16))
    run = _run(tmp_path, outputs={"val": _outputs(vectors)})
    finding = _only(collapse(Context(runs=[run])))
    assert finding.verdict == "inconclusive"
    assert 0.95 <= finding.computed["mean_offdiag_cosine"] < 0.99
    assert finding.disclosure.startswith("Suspect")


def test_scalar_outputs_are_not_judged_by_cosine(tmp_path: Path) -> None:
    vectors = np.linspace(1.0, 2.0, 30)[:, None]
    run = _run(tmp_path, outputs={"test": _outputs(vectors)})
    finding = _only(collapse(Context(runs=[run])))
    assert finding.verdict == "pass"
    assert finding.computed["mean_offdiag_cosine"] is None
    assert finding.computed["unique_rows"] == 30


def test_mean_cosine_matches_pairwise(tmp_path: Path) -> None:
    vectors = np.random.default_rng(4).normal(loc=0.5, size=(40, 8))
    run = _run(tmp_path, outputs={"test": _outputs(vectors)})
    finding = _only(collapse(Context(runs=[run])))
    units = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sims = units @ units.T
    expected = (sims.sum() - 40) / (40 * 39)
    assert finding.computed["mean_offdiag_cosine"] == pytest.approx(expected, rel=1e-9)


def test_single_unique_output_and_dominant_prediction(tmp_path: Path) -> None:
    same = np.tile(np.arange(4.0), (20, 1))
    preds = ["cat"] * 39 + ["dog"]
    targets = ["cat", "dog"] * 20
    run = _run(
        tmp_path,
        outputs={"test": _outputs(same)},
        predictions={"test": _prediction_rows(preds, targets)},
    )
    findings = collapse(Context(runs=[run]))
    assert _verdicts(findings) == ["bug", "bug"]
    text = " | ".join(f.disclosure for f in findings)
    assert "all 20 distinct test inputs give the same output vector" in text
    assert "Degenerate predictions: 97.5% of 40 test predictions are cat" in text


def test_one_prediction_for_every_item(tmp_path: Path) -> None:
    run = _run(tmp_path, predictions={"test": _prediction_rows([3] * 12, list(range(12)))})
    finding = _only(collapse(Context(runs=[run])))
    assert finding.verdict == "bug"
    assert finding.computed["unique_predictions"] == 1
    assert "all 12 test predictions are 3" in finding.disclosure


def test_majority_matching_imbalanced_targets_is_inconclusive(tmp_path: Path) -> None:
    preds = [0] * 39 + [1]
    targets = [0] * 39 + [1]
    run = _run(tmp_path, predictions={"test": _prediction_rows(preds, targets)})
    finding = _only(collapse(Context(runs=[run])))
    assert finding.verdict == "inconclusive"
    assert "so are 97.5% of the targets" in finding.disclosure


def test_real_equal_to_shuffled_is_a_bug(tmp_path: Path) -> None:
    run = _run(tmp_path, shuffle={"metric": "accuracy", "real": 0.126, "shuffled": 0.126, "n": 500})
    finding = _only(collapse(Context(runs=[run])))
    assert finding.verdict == "bug"
    assert "The outputs ignore the input" in finding.disclosure
    assert "(0.126) equals accuracy on inputs shuffled across items (0.126)" in finding.disclosure
    assert _input_paths(finding) == ["shuffle.json"]


def test_shuffle_within_noise_and_clearly_apart(tmp_path: Path) -> None:
    noise = _run(
        tmp_path, "noise-1", shuffle={"metric": "accuracy", "real": 0.52, "shuffled": 0.5, "n": 100}
    )
    apart = _run(
        tmp_path, "apart-1", shuffle={"metric": "accuracy", "real": 0.9, "shuffled": 0.1, "n": 100}
    )
    mse = _run(tmp_path, "mse-1", shuffle={"metric": "mse", "real": 0.400, "shuffled": 0.401})
    findings = collapse(Context(runs=[noise, apart, mse]))
    within = _only(findings, noise)
    assert within.verdict == "bug" and within.computed["z"] < 1
    assert "within noise" in within.disclosure
    assert _only(findings, apart).verdict == "pass"
    relative = _only(findings, mse)
    assert relative.verdict == "bug" and relative.computed["rule"] == "relative 1 %"


def test_collapse_not_checked_without_outputs(tmp_path: Path) -> None:
    run = _run(tmp_path)
    finding = _only(collapse(Context(runs=[run])))
    assert finding.verdict == "not_checked"
    assert "job.save_outputs(split, ids, vectors)" in finding.disclosure
    assert "job.save_shuffle_score(metric, real, shuffled, n)" in finding.disclosure


# ----------------------------------------------------------------------------- re-derive

ACCURACY = {"name": "accuracy", "direction": "max", "split": "test", "fn": "accuracy"}


def test_reported_metric_its_predictions_do_not_give(tmp_path: Path) -> None:
    rows = _prediction_rows([1, 0, 1, 1], [1, 0, 1, 0])
    run = _run(
        tmp_path,
        metric=ACCURACY,
        results={"test": {"accuracy": 0.91}},
        predictions={"test": rows},
    )
    finding = _only(rederive(Context(runs=[run])))
    assert finding.check == "rederive"
    assert finding.verdict == "finding"
    assert finding.computed["recomputed"] == pytest.approx(0.75)
    assert finding.computed["n"] == 4
    assert finding.computed["compared_at"] == "2 decimals"
    assert "The reported accuracy (0.91) is not what its predictions give: 0.75 (n=4" in (
        finding.disclosure
    )
    assert sorted(_input_paths(finding)) == ["metric.json", "results.json", "test.jsonl"]


def test_matching_metric_passes(tmp_path: Path) -> None:
    rows = _prediction_rows([1, 0, 1, 1], [1, 0, 1, 0])
    run = _run(
        tmp_path,
        metric=ACCURACY,
        results={"metrics": {"accuracy": {"test": {"value": 0.75, "n": 4}}}},
        predictions={"test": rows},
        splits={"test": ["t0", "t1", "t2", "t3"]},
    )
    finding = _only(rederive(Context(runs=[run])))
    assert finding.verdict == "pass"
    assert "is what its 4 test predictions give" in finding.disclosure


def test_rounded_report_is_compared_at_its_decimals(tmp_path: Path) -> None:
    rows = _prediction_rows([1, 1, 1, 0, 0, 0, 0], [1] * 7)
    metric = {**ACCURACY, "fn": "error_rate", "name": "error"}
    rounded = _run(
        tmp_path, "rounded-1", metric=metric, results={"error": 0.57}, predictions={"test": rows}
    )
    off = _run(
        tmp_path, "off-1", metric=metric, results={"error": 0.58}, predictions={"test": rows}
    )
    full = _run(
        tmp_path, "full-1", metric=metric, results={"error": 4 / 7}, predictions={"test": rows}
    )
    exact = _run(
        tmp_path, "exact-1", metric=metric, results={"error": 1.0}, predictions={"test": rows}
    )
    findings = rederive(Context(runs=[rounded, off, full, exact]))
    assert _only(findings, rounded).verdict == "pass"
    assert _only(findings, rounded).computed["compared_at"] == "2 decimals"
    wrong = _only(findings, exact)
    assert wrong.verdict == "finding"
    assert "exact fraction of n=7" in wrong.computed["compared_at"]
    assert _only(findings, off).verdict == "finding"
    assert _only(findings, full).computed["compared_at"].startswith("full precision")
    assert _only(findings, full).verdict == "pass"


def test_regression_fns_on_numbers_and_lists(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "pred": [1.0, 2.0], "target": [0.0, 2.0]},
        {"id": "b", "pred": [3.0, 3.0], "target": [3.0, 5.0]},
    ]
    mse = _run(
        tmp_path,
        "mse-1",
        metric={"name": "mse", "direction": "min", "split": "test", "fn": "mse"},
        results={"test": {"mse": 1.25}},
        predictions={"test": rows},
    )
    rmse = _run(
        tmp_path,
        "rmse-1",
        metric={"name": "rmse", "direction": "min", "split": "test", "fn": "rmse"},
        results={"test": {"rmse": 1.25}},
        predictions={"test": rows},
    )
    findings = rederive(Context(runs=[mse, rmse]))
    assert _only(findings, mse).verdict == "pass"
    wrong = _only(findings, rmse)
    assert wrong.verdict == "finding"
    assert wrong.computed["recomputed"] == pytest.approx(1.25**0.5)


def test_empty_predictions_are_a_finding(tmp_path: Path) -> None:
    run = _run(
        tmp_path, metric=ACCURACY, results={"test": {"accuracy": 0.0}}, predictions={"test": []}
    )
    finding = _only(rederive(Context(runs=[run])))
    assert finding.verdict == "finding"
    assert "(n = 0)" in finding.disclosure
    assert "an empty result is not a null result" in finding.disclosure


def test_duplicate_and_foreign_prediction_ids(tmp_path: Path) -> None:
    rows = [
        {"id": "t0", "pred": 1, "target": 1},
        {"id": "t0", "pred": 1, "target": 1},
        {"id": "zz", "pred": 0, "target": 0},
    ]
    run = _run(
        tmp_path,
        metric=ACCURACY,
        results={"test": {"accuracy": 1.0}},
        predictions={"test": rows},
        splits={"test": ["t0", "t1", "t2"]},
    )
    findings = rederive(Context(runs=[run]))
    assert _verdicts(findings) == ["finding", "finding"]
    text = " | ".join(f.disclosure for f in findings)
    assert "1 of 3 test predictions repeat an id (e.g. t0)" in text
    assert "2 declared items have no prediction" in text
    assert "1 predictions are for items not in it (e.g. zz)" in text
    coverage = findings[-1].computed["split_coverage"]
    assert coverage == {
        "declared": 3,
        "predicted": 2,
        "missing": 2,
        "not_in_split": 1,
        "rows_without_id": 0,
    }


def test_rederive_not_checked_without_fn_or_predictions(tmp_path: Path) -> None:
    no_fn = _run(
        tmp_path,
        "nofn-1",
        metric={**ACCURACY, "fn": None},
        results={"test": {"accuracy": 0.9}},
        predictions={"test": _prediction_rows([1], [1])},
    )
    no_preds = _run(tmp_path, "nopreds-1", metric=ACCURACY, results={"test": {"accuracy": 0.9}})
    nothing = _run(tmp_path, "nothing-1")
    findings = rederive(Context(runs=[no_fn, no_preds, nothing]))
    first = _only(findings, no_fn)
    assert first.verdict == "not_checked"
    assert "Not re-derivable" in first.disclosure
    assert 'job.declare_metric(name, direction, split="test", fn=None)' in first.disclosure
    second = _only(findings, no_preds)
    assert second.verdict == "not_checked"
    assert "job.save_predictions(split, ids, preds, targets)" in second.disclosure
    assert _only(findings, nothing).verdict == "not_checked"


def test_unreadable_declaration_is_not_checked(tmp_path: Path) -> None:
    run = _run(tmp_path, extra={"outputs/verify/shuffle.json": b"{not json"})
    finding = _only(collapse(Context(runs=[run])))
    assert finding.verdict == "not_checked"
    assert "JSONDecodeError" in finding.disclosure


def test_every_check_covers_every_run_with_serialisable_records(tmp_path: Path) -> None:
    rows = _prediction_rows(list(range(12)), list(range(12)))
    rich = _run(
        tmp_path,
        "rich-1",
        metric=ACCURACY,
        results={"test": {"accuracy": 1.0}, "test_evaluations": 1},
        predictions={"test": rows},
        splits={"train": ["a"], "test": [r["id"] for r in rows]},
        outputs={"test": _outputs(np.eye(12))},
        shuffle={"metric": "accuracy", "real": 1.0, "shuffled": 0.1, "n": 12},
        evals=[{"split": "val", "step": 1, "purpose": "checkpoint_selection", "metrics": {}}],
    )
    bare = _run(tmp_path, "bare-1")
    ctx = Context(runs=[rich], baselines=[bare])
    for check in (leakage, test_selection, collapse, rederive):
        findings = check(ctx)
        assert {f.run_ids[0] for f in findings} == {"rich-1", "bare-1"}
        rich_verdicts = {f.verdict for f in findings if f.run_ids == ["rich-1"]}
        # The splits carry no content hashes: leakage says that half is not_checked.
        expected = {"pass", "not_checked"} if check is leakage else {"pass"}
        assert rich_verdicts == expected, [f.disclosure for f in findings]
        assert {f.verdict for f in findings if f.run_ids == ["bare-1"]} == {"not_checked"}
        for finding in findings:
            record = json.loads(json.dumps(finding.record()))
            assert record["check"] == check.__name__
            assert record["targets"]["run_ids"] == finding.run_ids
