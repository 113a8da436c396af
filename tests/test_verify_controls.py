"""``%verify`` on clean controls and on the mistakes a first-time user makes, over real runs:
each is a small program submitted as a job that writes its results, predictions and declarations
through :mod:`rgt_jupyter.job`, then pulled.

Controls must pass: predictions stored rounded (to 6 decimals, or as float32) re-derive the
full-precision number; a deterministic rerun (same config, code and seed) is not a stale copy;
a run beside a baseline of the same config is a control, not an ablation that never applied.
Mistakes must say what to do: a metric name results.json lacks lists the keys it has and the
closest; a ``--changed`` key no run has is "no such key"; a seed group's name works with
``%teardown`` and ``rgt down`` as with ``%watch`` and ``%pull``. The findings log keeps one
record per finding however often ``%verify`` runs, and can be read per claim."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job, JobGroup, Run
from rgt_jupyter.cli import main as rgt_main
from rgt_jupyter.verify.model import findings_by_claim, findings_by_run, read_findings
from rgt_jupyter.verify.report import VerifyReport, verify

from .conftest import run_cell

#: A regression job: its config and seed from the environment; predictions saved rounded to
#: ``ROUND`` decimals (or as float32 with ``ROUND=f32``), the mse reported at full precision
#: (times ``OFF``, to plant a real mismatch); a checkpoint whose bytes follow from the config.
REGRESSION = """\
import os, random, struct
import rgt_jupyter.job as job
cfg = {"lr": float(os.environ.get("LR", "0.1")), "hidden": 8,
       "seed": int(os.environ.get("SEED", "3"))}
job.save_config(cfg)
rng = random.Random(cfg["seed"])
ids = [f"te{i}" for i in range(200)]
preds = [rng.random() for _ in ids]
targets = [rng.random() for _ in ids]
mode = os.environ.get("ROUND", "6")
if mode == "f32":
    f32 = lambda v: struct.unpack("f", struct.pack("f", v))[0]
    preds, targets = [f32(p) for p in preds], [f32(t) for t in targets]
    stored_p, stored_t = preds, targets
    mse = f32(sum(f32((p - t) ** 2) for p, t in zip(preds, targets)) / len(ids))
else:
    stored_p = [round(p, int(mode)) for p in preds]
    stored_t = [round(t, int(mode)) for t in targets]
    mse = sum((p - t) ** 2 for p, t in zip(preds, targets)) / len(ids)
mse *= float(os.environ.get("OFF", "1"))
job.declare_metric(os.environ.get("METRIC", "mse"), "min", fn="mse")
job.save_split("test", ids)
job.save_predictions("test", ids, stored_p, stored_t)
ckpt = os.path.join(os.environ["RGT_OUT"], "checkpoints", "model.pt")
os.makedirs(os.path.dirname(ckpt), exist_ok=True)
with open(ckpt, "wb") as fh:
    fh.write(repr((cfg["lr"], cfg["hidden"], 0 if os.environ.get("COPY") else cfg["seed"])).encode())
job.declare_checkpoint(ckpt, step=1)
job.save_results({"test": {"mse": mse}, "step": 1})
"""


def _run(project: Path, name: str, **env: str) -> Run:
    """Submit :data:`REGRESSION` with ``env``, wait for it, pull it."""
    job = submit(REGRESSION, project, name=name, env=[f"{k}={v}" for k, v in env.items()])
    assert isinstance(job, Job)
    assert job.wait(120) == "finished", job.log()
    return job.pull()


def _of(report: VerifyReport, check: str) -> list[Any]:
    return report.by_check(check)


def _texts(report: VerifyReport, check: str) -> str:
    return " | ".join(f.disclosure for f in report.by_check(check))


def test_predictions_stored_rounded_or_float32_rederive_the_reported_number(
    project: Path,
) -> None:
    rounded = _run(project, "rounded", ROUND="6")
    single = _run(project, "single", ROUND="f32")
    planted = _run(project, "planted", ROUND="6", OFF="1.0001")
    report = verify([str(rounded.path), str(single.path), str(planted.path)], project=project)
    by_run = {f.run_ids[0]: f for f in _of(report, "rederive")}
    # The control is a real one: the stored rounding moves the mse past a fixed 1e-9.
    ok = by_run[rounded.path.name]
    assert abs(ok.computed["difference"]) > 1e-9 * abs(ok.computed["reported"])
    assert ok.verdict == "pass", ok.disclosure
    assert "predictions stored at 6 decimals" in ok.computed["compared_at"]
    f32 = by_run[single.path.name]
    assert f32.verdict == "pass", f32.disclosure
    assert "float32" in f32.computed["compared_at"]
    # A real mismatch (1e-4 relative) is still one.
    bad = by_run[planted.path.name]
    assert bad.verdict == "finding" and "is not what its predictions give" in bad.disclosure


def test_a_deterministic_rerun_is_not_a_stale_copy_nor_an_unapplied_ablation(
    project: Path,
) -> None:
    first = _run(project, "det-a")
    again = _run(project, "det-b")
    assert json.loads((first.path / "results.json").read_text()) == json.loads(
        (again.path / "results.json").read_text()
    )
    report = verify([str(again.path)], [str(first.path)], project=project)
    assert not report.problems, report.text()
    stale = _of(report, "stale_artifact")
    assert stale and all(f.verdict == "pass" for f in stale), _texts(report, "stale_artifact")
    assert "deterministic rerun" in _texts(report, "stale_artifact")
    assert "copied" not in _texts(report, "stale_artifact")
    (one,) = _of(report, "one_variable")
    assert one.verdict == "pass" and "control pair" in one.disclosure
    assert "never applied" not in one.disclosure
    # Together, as arms of one comparison, the reruns are still not stale.
    both = verify([str(first.path), str(again.path)], project=project)
    assert all(f.verdict == "pass" for f in _of(both, "stale_artifact"))
    # A run of another seed holding the same checkpoint bytes is still a copy.
    copied = _run(project, "det-c", SEED="4", COPY="1")
    older = _run(project, "det-d", SEED="5", COPY="1")
    caught = verify([str(copied.path)], [str(older.path)], project=project, record=False)
    assert caught.verdict("stale_artifact") == "bug"
    assert "copied" in _texts(caught, "stale_artifact")


def test_declared_change_that_did_not_apply_is_still_a_bug(project: Path) -> None:
    base = _run(project, "base")
    same = _run(project, "same")
    report = verify([str(same.path)], [str(base.path)], changed=["lr"], project=project)
    (one,) = _of(report, "one_variable")
    assert one.verdict == "bug" and "never applied" in one.disclosure


def test_a_changed_key_no_run_has_is_no_such_key(project: Path) -> None:
    base = _run(project, "lr-base", LR="0.1")
    wide = _run(project, "lr-wide", LR="0.2")
    report = verify([str(wide.path)], [str(base.path)], changed=["lrr"], project=project)
    (one,) = _of(report, "one_variable")
    assert "no such key" in one.disclosure and "did you mean 'lr'" in one.disclosure
    assert "same value as the baseline" not in one.disclosure
    assert one.computed["pairs"][0]["no_such_key"] == {"lrr": ["lr"]}
    good = verify([str(wide.path)], [str(base.path)], changed=["lr"], project=project)
    assert good.verdict("one_variable") == "pass"


def test_a_metric_name_results_lack_lists_the_keys_and_the_closest(project: Path) -> None:
    run = _run(project, "typo", METRIC="mes")
    report = verify([str(run.path)], project=project)
    (found,) = _of(report, "rederive")
    assert found.verdict == "not_checked", found.disclosure
    assert "test.mse" in found.disclosure and "closest: 'mse'" in found.disclosure
    assert found.computed["results_keys"] == ["step", "test.mse"]
    (direction,) = _of(report, "metric_direction")
    assert direction.verdict == "inconclusive" and "closest: 'mse'" in direction.disclosure
    assert not report.problems, report.text()  # a wrong name is not a defect of the run


def test_findings_are_recorded_once_and_read_per_claim(project: Path) -> None:
    base = _run(project, "c-base", LR="0.1")
    wide = _run(project, "c-wide", LR="0.2")
    log = project / "verify" / "findings.jsonl"
    first = verify([str(wide.path)], [str(base.path)], changed=["lr"], project=project)
    lines = log.read_text().splitlines()
    assert len(lines) == len(first.findings)
    for _ in range(3):
        verify([str(wide.path)], [str(base.path)], changed=["lr"], project=project)
    assert log.read_text().splitlines() == lines  # nothing identical appended again
    claimed = verify(
        [str(wide.path)], [str(base.path)], changed=["lr"], project=project, claim="C1"
    )
    assert set(claimed.by_claim()) == {"C1"}
    per_claim = findings_by_claim(project)
    assert len(per_claim["C1"]) == len(claimed.findings)
    assert len(per_claim[""]) == len(first.findings)
    # Per run, each finding once, however often it was verified.
    records = findings_by_run(project)[base.path.name]
    keys = [(r["check"], r["disclosure"], r["targets"]["claim_id"]) for r in records]
    assert len(keys) == len(set(keys))
    # A doubled line (two sessions appending the same record) is read once.
    with log.open("a") as fh:
        fh.write(lines[0] + "\n")
    assert len(read_findings(project)) == len(first.findings) + len(claimed.findings)


GROUP = "import rgt_jupyter.job as job\njob.save_results({'test': {'acc': 1.0}})\n"


def test_a_seed_groups_name_works_in_teardown_and_down(
    project: Path, ip: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    group = submit(GROUP, project, name="sweep", seeds="1-2")
    assert isinstance(group, JobGroup)
    assert set(group.wait(120).values()) == {"finished"}
    members = sorted(j.id for j in group.jobs)
    for line in ("%watch sweep", "%pull sweep", "%teardown sweep"):
        result, out = run_cell(ip, line)
        assert result.error_in_exec is None and result.error_before_exec is None, out
    capsys.readouterr()
    assert rgt_main(["down", "sweep", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    # The gate covers every member, and the command it suggests names the group.
    assert sorted(said["gate"]["jobs"]) == members
    assert any("rgt down sweep --yes" in line for line in said["said"])
    assert rgt_main(["down", "sweep", "--yes"]) == 0
