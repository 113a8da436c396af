"""Training code as researchers bring it (a Hugging Face Trainer, a Lightning module, a plain
script), and the drill every such job goes through: launched from a real kernel or with
``rgt run`` on a billed machine that runs here, SIGTERMed mid-run, relaunched, pulled, gated."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job, Run
from rgt_jupyter.errors import RgtError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.teardown import compute_gate

from .conftest import rgt, wait_for
from .kernels import _execute, _kernel_spec_manager, _shutdown, _start_kernel
from .machines import RENTED


def rented(project: Path) -> str:
    """A billed profile (an ``ssh`` box's meter and gate) whose jobs run on this machine."""
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    (profiles / "rented.toml").write_text(RENTED)
    return "rented"


@contextmanager
def kernel(project: Path, tmp: Path) -> Iterator[Callable[..., str]]:
    """A real ipykernel with the extension loaded; yields ``run(code, timeout)``."""
    km = kc = None
    try:
        km, kc = _start_kernel(project, _kernel_spec_manager(tmp), {"RGT_AUDIT_TORCH": "0"})
        _execute(kc, "%load_ext rgt_jupyter")
        yield lambda code, timeout=120: _execute(kc, code, timeout=timeout)
    finally:
        _shutdown(km, kc)


def job_named(project: Path, name: str, other_than: str | None = None) -> Job:
    """The newest job of this name (once it is another than ``other_than``)."""

    def found() -> Job | None:
        try:
            job = Job.from_registry(name, project)
        except RgtError:
            return None
        return job if job.id != other_than else None

    return wait_for(found, 60, f"job {name} in the registry")


def sigterm_at(job: Job, step: int) -> None:
    """SIGTERM the job's process once its progress reached ``step`` (as a spot reclaim does)."""

    def reached() -> bool:
        snap = job.snapshot(log_lines=0)
        assert not snap.terminal, f"{job.id} ended ({snap.state}) before step {step}:\n{job.log()}"
        return snap.progress is not None and snap.progress["step"] >= step

    wait_for(reached, 180, f"{job.id} to reach step {step}")
    status = json.loads((Path(job.spec.control_dir) / "status.json").read_text())
    os.kill(int(status["job_pid"]), signal.SIGTERM)


def preempt_and_resume(project: Path, name: str, launch: Callable[[], Any], step: int) -> Job:
    """Launch, SIGTERM at ``step``, launch again under the same name: the resumed job, finished."""
    launch()
    first = job_named(project, name)
    sigterm_at(first, step)
    assert first.wait(120) == "preempted", first.log()
    assert (Path(first.spec.control_dir) / "preempt.json").exists()
    # It saved and stopped on its own, not killed at the end of the grace period.
    assert first.snapshot(log_lines=0).exit_code == 0, first.log()
    assert "[rgt] preempted: saving" in first.log(), first.log()
    launch()
    resumed = job_named(project, name, other_than=first.id)
    assert resumed.spec.resume and resumed.spec.ckpt_dir == first.spec.ckpt_dir
    assert resumed.wait(300) == "finished", resumed.log()
    assert "[rgt] resuming from" in resumed.log(), resumed.log()
    return resumed


def rgt_run(project: Path, script: str, name: str, *flags: str) -> Callable[[], None]:
    """``rgt run SCRIPT --name NAME FLAGS`` from the project dir, as a function to call."""

    def launch() -> None:
        rgt("run", script, "--name", name, *flags, cwd=project)

    return launch


def pull_and_gate(project: Path, job: Job) -> Run:
    """Pull the job, verified; then the teardown gate of its machine passes."""
    run = job.pull()
    assert run.verified, run.verification
    gate = compute_gate(job._row, project)
    assert gate.passed, gate.text()
    return run


def uninterrupted_run(project: Path, program: str) -> dict[str, Any]:
    """The results of ``program`` run once, never stopped (the baseline a resumed run must
    match bit for bit)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("RGT_PROJECT", str(project))
    mp.setenv("RGT_AUDIT_TORCH", "0")
    try:
        job = submit(LaunchRequest(program=program, name="base"), project)
        assert job.wait(300) == "finished", job.log()
        result: dict[str, Any] = job.result()
        return result
    finally:
        mp.undo()


def same_as_uninterrupted(resumed: Job, uninterrupted: dict[str, Any], steps: int) -> None:
    """The resumed job took every step and ended with the uninterrupted run's weights."""
    result = resumed.result()
    assert result["steps"] == uninterrupted["steps"] == steps
    assert result["weights_sha256"] == uninterrupted["weights_sha256"]


def went_on_from_the_preemption(resumed: Job, preempt_at: int, steps: int) -> None:
    """The resumed attempt reported every step with its loss, and its first progress came after
    the preemption's checkpoint, not from step 0."""
    snap = resumed.snapshot(log_lines=0)
    assert snap.progress is not None and snap.progress["step"] == steps
    assert snap.progress["total"] == steps and "loss" in snap.progress
    first = resumed.progress_records()[0]
    assert preempt_at <= first["step"] < steps
