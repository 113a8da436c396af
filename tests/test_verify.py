"""``%verify`` end to end on run folders: what a job declares is what the checks read, a clean
pair of arms gives no finding, findings go to ``verify/findings.jsonl`` and never into a run,
and ``rgt verify --json`` speaks the contract's shape."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter.verify.model import RunData
from rgt_jupyter.verify.report import VerifyReport, verify

from .conftest import run_cell
from .verify_fixtures import make_run


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _arm(runs: Path, name: str, hidden: int, scores: list[float]) -> list[Path]:
    """One arm: a run per seed, every declaration made, the metric re-derivable."""
    out = []
    ids = {"train": [f"tr{i}" for i in range(40)], "val": ["va0", "va1"], "test": []}
    rng = random.Random(hidden)
    for seed, score in enumerate(scores):
        n = 100
        right = round(score * n)
        test_ids = [f"te{i}" for i in range(n)]
        ids["test"] = test_ids
        targets = [i % 2 for i in range(n)]  # balanced classes; the first `right` are hit
        preds = [
            {"id": t, "pred": targets[i] if i < right else 1 - targets[i], "target": targets[i]}
            for i, t in enumerate(test_ids)
        ]
        vectors = [[rng.gauss(0, 1) for _ in range(8)] for _ in range(16)]
        out.append(
            make_run(
                runs,
                f"{name}-s{seed}",
                config={"model": {"hidden": hidden, "layers": 2}, "lr": 0.01, "seed": seed},
                seed=seed,
                results={"test": {"accuracy": right / n}},
                metric={"name": "accuracy", "direction": "max", "split": "test", "fn": "accuracy"},
                splits=ids,
                split_hashes={
                    s: {i: hashlib.sha256(i.encode()).hexdigest() for i in members}
                    for s, members in ids.items()
                },
                predictions={"test": preds},
                evals=[
                    {"split": "val", "step": 1, "purpose": "checkpoint_selection", "metrics": {}},
                    {"split": "test", "step": 2, "purpose": "report", "metrics": {}},
                ],
                outputs={"test": {"ids": test_ids[:16], "vectors": vectors}},
                shuffle={"metric": "accuracy", "real": right / n, "shuffled": 0.5, "n": n},
                changed=["model.hidden"],
                checkpoints={f"ckpt-{name}-{seed}.pt": f"{name}{seed}".encode()},
            )
        )
    return out


def test_job_helpers_write_what_the_checks_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("RGT_OUT", str(out))
    import rgt_jupyter.job as job

    job.declare_metric("accuracy", "higher_is_better", fn="accuracy")
    job.declare_changed(["model.hidden"])
    job.save_split("train", ["a", "b"], hashes=["AA", "BB"])
    job.save_split("test", ["c"])
    job.save_predictions("test", ["c"], [1], [1])
    job.log_eval("val", 3, {"accuracy": 0.5}, purpose="early_stopping")
    job.save_outputs("test", ["c"], [[0.1, 0.2]])
    job.save_shuffle_score("accuracy", 0.9, 0.5, n=10)
    job.save_config({"model": {"hidden": 8}})
    job.save_results({"test": {"accuracy": 1.0}})
    monkeypatch.setenv("RGT_CKPT_DIR", str(tmp_path / "ckpt"))
    ckpt = Path(job.save_checkpoint({"w": [1, 2]}, step=7))
    job.declare_checkpoint(str(ckpt), step=7)
    with pytest.raises(ValueError, match="neither under"):
        job.declare_checkpoint("/etc/hostname", step=1)
    with pytest.raises(ValueError, match="direction"):
        job.declare_metric("accuracy", "up")
    with pytest.raises(ValueError, match="differ in length"):
        job.save_predictions("test", ["c"], [1, 2], [1])
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    os.rename(out, run_dir / "outputs")
    (run_dir / "run.json").write_text(json.dumps({"config": {"model": {"hidden": 8}}, "seed": 1}))
    run = RunData(run_dir)
    assert run.metric == {"name": "accuracy", "direction": "max", "split": "test", "fn": "accuracy"}
    assert run.changed == ["model.hidden"] and run.config == {"model.hidden": 8}
    assert run.split_ids("train") == ["a", "b"] and run.split_hashes("train") == {
        "a": "aa",
        "b": "bb",
    }
    assert run.splits() == ["test", "train"] and run.split_hashes("test") is None
    assert run.predictions("test") == [{"id": "c", "pred": 1, "target": 1}]
    assert run.evals == [
        {"split": "val", "step": 3, "purpose": "early_stopping", "metrics": {"accuracy": 0.5}}
    ]
    assert run.outputs("test") == {"ids": ["c"], "vectors": [[0.1, 0.2]]}
    assert run.shuffle == {"metric": "accuracy", "real": 0.9, "shuffled": 0.5, "n": 10}
    assert run.metric_value("accuracy", "test") == 1.0
    assert run.json("verify/checkpoint.json") == {
        "path": f"checkpoints/{ckpt.name}",
        "sha256": hashlib.sha256(ckpt.read_bytes()).hexdigest(),
        "step": 7,
    }
    # Every file read is an input of the findings, with its sha256.
    paths = {Path(i["path"]).name for i in run.inputs()}
    assert {"metric.json", "train.ids", "test.jsonl", "evals.jsonl"} <= paths


def test_a_clean_run_gives_no_finding(project: Path) -> None:
    runs = _arm(project / "runs", "base", 8, [0.80, 0.85, 0.75])
    report = verify([str(p) for p in runs], project=project)
    assert report.problems == []
    assert {f.verdict for f in report.findings} <= {"pass", "not_checked"}, report.text()
    # What could not be checked without a baseline is said, not skipped.
    assert report.verdict("one_variable") == "not_checked"


def test_a_clean_comparison_finds_the_effect_and_leaves_the_runs_alone(project: Path) -> None:
    runs = project / "runs"
    base = _arm(runs, "base", 8, [0.80, 0.85, 0.75])
    variant = _arm(runs, "wide", 64, [0.95, 1.0, 0.9])
    before = _tree_digest(runs)
    report = verify([str(p) for p in variant], [str(p) for p in base], project=project)
    assert isinstance(report, VerifyReport)
    assert report.problems == [], report.text()
    assert report.verdict("seed_noise") == "effect", report.text()
    assert report.verdict("one_variable") == "pass", report.text()
    assert all(f.verdict in ("pass", "not_checked", "effect") for f in report.findings)
    checks = {f.check for f in report.findings}
    assert checks == {
        "metric_direction",
        "one_variable",
        "seed_noise",
        "two_level_noise",
        "tasks_iqm",
        "tuning_budget",
        "leakage",
        "test_selection",
        "collapse",
        "rederive",
        "stale_artifact",
    }
    assert _tree_digest(runs) == before  # nothing written into a run
    log = project / "verify" / "findings.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == len(report.findings)
    assert all(line["inputs"] and line["targets"]["run_ids"] for line in lines if line["inputs"])
    assert all(len(i["sha256"]) == 64 for line in lines for i in line["inputs"])
    again = verify([str(p) for p in variant], [str(p) for p in base], project=project)
    # The same findings on the same inputs are not appended a second time.
    assert len(again.findings) == len(report.findings)
    assert len(log.read_text().splitlines()) == len(report.findings)


def test_cli_json_and_strict(project: Path) -> None:
    runs = project / "runs"
    base = _arm(runs, "base", 8, [0.80, 0.85, 0.75])
    variant = _arm(runs, "same", 8, [0.80, 0.80, 0.85])  # nothing changed: never applied
    cmd = [sys.executable, "-m", "rgt_jupyter", "--project", str(project), "verify"]
    done = subprocess.run(
        [*cmd, *map(str, variant), "--baseline", *map(str, base), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert {"check", "verdict"} <= set(report["findings"][0])
    one_variable = [f for f in report["findings"] if f["check"] == "one_variable"]
    assert any(f["verdict"] == "bug" for f in one_variable), one_variable
    strict = subprocess.run(
        [*cmd, *map(str, variant), "--baseline", *map(str, base), "--strict"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert strict.returncode == 1 and "[bug] one_variable" in strict.stdout


def test_magic_returns_a_report_with_a_rich_view(ip: Any, project: Path) -> None:
    runs = project / "runs"
    base = _arm(runs, "base", 8, [0.8])
    variant = _arm(runs, "wide", 64, [0.9])
    result, text = run_cell(ip, f"%verify {variant[0]} --baseline {base[0]} --direction max")
    assert result.error_in_exec is None, text
    report = result.result
    assert isinstance(report, VerifyReport)
    bundle = report._repr_mimebundle_()
    assert "rgt-verify" in bundle["text/html"] and "single seed" in bundle["text/plain"]
    result, text = run_cell(ip, "%verify no-such-run")
    assert "is not a run folder, a run id, a job or a seed group" in text


def test_a_declared_checkpoint_from_another_run_is_stale(project: Path) -> None:
    runs = project / "runs"
    base = _arm(runs, "base", 8, [0.80, 0.85])
    theirs = hashlib.sha256(b"base0").hexdigest()  # base-s0's checkpoint bytes
    claim = json.dumps({"path": "checkpoints/ckpt-base-0.pt", "sha256": theirs, "step": 2})
    variant = _arm(runs, "wide", 64, [0.9, 0.95])
    (variant[0] / "outputs" / "verify" / "checkpoint.json").write_text(claim)
    report = verify([str(p) for p in variant], [str(p) for p in base], project=project)
    assert report.verdict("stale_artifact") == "bug", report.text()
    assert any("wide-s0" in f.run_ids for f in report.by_check("stale_artifact") if f.is_problem)
