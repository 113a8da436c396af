"""Failure triage: each class from a realistic log, and the remedy/retry contract."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter import submit
from rgt_jupyter.jobs.diagnose import PATTERNS, REMEDIES, Diagnosis, classify

LOGS = Path(__file__).parent / "fixtures" / "logs"
PROGRESS_PREFIX = "[rgt] progress "


def _log(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


def _progress(lines: list[str]) -> list[dict[str, Any]]:
    return [
        json.loads(line[len(PROGRESS_PREFIX) :])
        for line in lines
        if line.startswith(PROGRESS_PREFIX)
    ]


PYTHON_ERROR = {
    "type": "KeyError",
    "message": "'learning_rate'",
    "formatted": "Traceback (most recent call last):\n  ...\nKeyError: 'learning_rate'\n",
}

# (fixture, expected kind, the rest of the job's records)
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("cuda_oom.log", "cuda_oom", {"exit_code": 1, "signal": None}),
    (
        "cgroup_oom.log",
        "cgroup_oom",
        {"exit_code": 137, "signal": "SIGKILL", "oom_kills_before": 0, "oom_kills_after": 1},
    ),
    ("cgroup_oom.log", "killed", {"exit_code": 137, "signal": "SIGKILL"}),
    ("disk_full.log", "disk_full", {"exit_code": 1, "signal": None}),
    ("inodes_full.log", "inodes_full", {"exit_code": 1, "signal": None}),
    ("nccl_timeout.log", "nccl_timeout", {"exit_code": -6, "signal": "SIGABRT"}),
    ("walltime.log", "walltime", {"exit_code": None, "signal": "SIGTERM"}),
    ("preempted.log", "preempted", {"exit_code": 143, "signal": "SIGTERM", "reason": "preempted"}),
    (
        "python_exception.log",
        "python_exception",
        {"exit_code": 1, "signal": None, "error": PYTHON_ERROR},
    ),
    ("nan.log", "nan_metrics", {"exit_code": 0, "signal": None}),
    ("unknown.log", "unknown", {"exit_code": 3, "signal": None}),
]


@pytest.mark.parametrize(("fixture", "kind", "records"), CASES, ids=[c[1] for c in CASES])
def test_each_class_from_its_log(fixture: str, kind: str, records: dict[str, Any]) -> None:
    lines = _log(fixture)
    diagnosis = classify(log_lines=lines, progress=_progress(lines), **records)
    assert diagnosis is not None
    assert diagnosis.kind == kind
    assert diagnosis.summary and diagnosis.evidence
    assert diagnosis.remedy == REMEDIES[diagnosis.kind][0]


def test_clean_exit_with_finite_metrics_is_not_a_failure() -> None:
    progress = [{"t": 1.0, "step": 1, "loss": 2.0}, {"t": 2.0, "step": 2, "loss": "1.5"}]
    assert classify(exit_code=0, signal=None, log_lines=["done"], progress=progress) is None


def test_nan_after_clean_exit_names_metric_and_first_step() -> None:
    progress = [
        {"t": 1.0, "step": 10, "loss": 1.0, "acc": 0.5},
        {"t": 2.0, "step": 20, "loss": 0.9, "acc": "nan"},
        {"t": 3.0, "step": 30, "loss": float("inf"), "acc": float("nan")},
    ]
    diagnosis = classify(exit_code=0, signal=None, log_lines=[], progress=progress)
    assert diagnosis is not None and diagnosis.kind == "nan_metrics"
    assert "'acc'" in diagnosis.summary and "step 20" in diagnosis.summary
    assert diagnosis.retry == "after_fix"


def test_sigkill_without_oom_evidence_is_killed_not_cgroup_oom() -> None:
    for before, after in ((None, None), (2, 2), (None, 3)):
        diagnosis = classify(
            exit_code=None,
            signal="SIGKILL",
            log_lines=["Killed"],
            oom_kills_before=before,
            oom_kills_after=after,
        )
        assert diagnosis is not None and diagnosis.kind == "killed"
        assert "dmesg" in diagnosis.remedy and "memory.events" in diagnosis.remedy


def test_stall_of_the_process_group_timeout_is_nccl() -> None:
    diagnosis = classify(
        exit_code=None, signal=None, log_lines=["step 900"], pg_timeout_s=1800, stalled_s=1800
    )
    assert diagnosis is not None and diagnosis.kind == "nccl_timeout"
    assert (
        classify(
            exit_code=None, signal=None, log_lines=["step 900"], pg_timeout_s=1800, stalled_s=600
        )
        is None
    )


def test_cuda_oom_in_the_error_record_alone() -> None:
    error = {
        "type": "OutOfMemoryError",
        "message": "CUDA out of memory. Tried to allocate 20.00 MiB",
    }
    diagnosis = classify(exit_code=1, signal=None, log_lines=[], error=error)
    assert diagnosis is not None and diagnosis.kind == "cuda_oom"


def test_every_class_has_a_remedy_and_only_outside_causes_retry_identically() -> None:
    kinds = set(REMEDIES)
    assert {kind for kind, _ in PATTERNS} <= kinds
    for kind, (remedy, retry) in REMEDIES.items():
        assert remedy.strip(), kind
        assert retry in {"identical", "after_fix"}, kind
    identical = {kind for kind, (_, retry) in REMEDIES.items() if retry == "identical"}
    assert identical == {"preempted", "walltime"}


@pytest.mark.parametrize(("fixture", "kind", "records"), CASES, ids=[c[1] for c in CASES])
def test_diagnosis_shape(fixture: str, kind: str, records: dict[str, Any]) -> None:
    lines = _log(fixture)
    diagnosis = classify(log_lines=lines, progress=_progress(lines), **records)
    assert isinstance(diagnosis, Diagnosis)
    assert diagnosis.remedy and diagnosis.retry in {"identical", "after_fix"}
    if kind in {"cuda_oom", "cgroup_oom", "python_exception", "killed", "nan_metrics"}:
        assert diagnosis.retry == "after_fix"
    assert isinstance(diagnosis.evidence, tuple) and len(diagnosis.evidence) <= 3


def test_a_failed_job_shows_its_class_and_fixed_remedy(project: Path) -> None:
    """End to end: a real job's error record and log reach the status view's diagnosis."""
    from rgt_jupyter.jobs.request import LaunchRequest

    program = (
        "print('step 1', flush=True)\n"
        "raise RuntimeError('CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0)')\n"
    )
    job = submit(LaunchRequest(program=program, name="oom"), project)
    assert job.wait(60) == "failed"
    diagnosis = job.snapshot().diagnosis or ""
    assert "CUDA out of memory" in diagnosis and "Fix:" in diagnosis, diagnosis
    assert "batch size" in diagnosis
