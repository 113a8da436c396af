"""Preemption drill: SIGTERM mid-training, save at a step boundary, resume bit-exactly."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell

from rgt_jupyter.api import Job

from ..conftest import wait_for
from .evidence import Evidence

TOTAL = 60
PREEMPT_AT = 25

# A deterministic CPU training program. The data come from a seeded generator; every step adds
# noise drawn from the global torch RNG (so the RNG state must be restored on resume) and SGD
# uses momentum (so the optimizer state must be restored too).
PROGRAM = """\
import os
import time

import torch
import rgt_jupyter.job as job

torch.set_num_threads(1)
print("RGT_RESUME=" + os.environ.get("RGT_RESUME", "0"), flush=True)
TOTAL = 60
BATCH = 32

job.seed_everything(1234)
gen = torch.Generator().manual_seed(7)
X = torch.randn(256, 16, generator=gen)
W = torch.randn(16, 1, generator=gen)
Y = X @ W + 0.1 * torch.randn(256, 1, generator=gen)

model = torch.nn.Sequential(
    torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Dropout(0.1), torch.nn.Linear(32, 1)
)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
step = 0
state = job.load_latest()
if state is not None:
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])
    step = int(state["step"])
    print("resumed from step %d" % step, flush=True)


def save(at):
    job.save_checkpoint({"model": model.state_dict(), "optim": opt.state_dict(), "step": at}, at)


model.train()
while step < TOTAL:
    if job.preempted():
        save(step)
        print("preempted at step %d" % step, flush=True)
        break
    lo = (step * BATCH) % 256
    xb = X[lo : lo + BATCH] + 0.05 * torch.randn(BATCH, 16)
    loss = torch.nn.functional.mse_loss(model(xb), Y[lo : lo + BATCH])
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    job.progress(step, TOTAL, loss=loss.item())
    if step % 10 == 0:
        save(step)
    time.sleep(0.05)
else:
    torch.save(model.state_dict(), os.path.join(os.environ["RGT_OUT"], "final.pt"))
    job.save_results({"steps": step, "loss": loss.item()})
    print("finished at step %d" % step, flush=True)
"""


def _run_cell(ip: InteractiveShell, name: str) -> Job:
    result = ip.run_cell(f"%%remote_run --name {name}\n" + PROGRAM)
    assert result.error_before_exec is None and result.error_in_exec is None, result
    job = result.result
    assert isinstance(job, Job), job
    return job


def _ckpt_steps(ckpt_dir: str) -> list[int]:
    steps = []
    for name in os.listdir(ckpt_dir):
        m = re.fullmatch(r"ckpt-(\d{10})\.pt", name)
        if m:
            steps.append(int(m.group(1)))
    return sorted(steps)


def _load(path: str) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)


@pytest.mark.fault(
    "F4-sigterm",
    asserts="SIGTERM mid-training: the job saves at the step boundary and ends preempted; "
    "re-running the cell resumes from that checkpoint and ends bit-identical to an "
    "uninterrupted run",
    mutation=(
        "rgt_jupyter/remote/job.py",
        "    _install_handlers()\n    atexit.register(_record_torch)",
        "    atexit.register(_record_torch)",
    ),
)
def test_preempt_then_resume_matches_uninterrupted_run(
    ip: InteractiveShell, evidence: Evidence
) -> None:
    """A real SIGTERM to the training process of a deterministic CPU run.

    Protection: rgt_jupyter/remote/job.py: inside a job, ``_install_handlers()`` turns SIGTERM into
    ``job.preempted()`` so the program saves at its step boundary; without the handlers the
    signal kills it mid-step, no checkpoint is saved and the case fails.
    """
    # A: the reference, uninterrupted.
    job_a = _run_cell(ip, "A")
    assert job_a.wait(timeout=120) == "finished", job_a.log()
    final_a = _load(os.path.join(job_a.spec.out_dir, "final.pt"))
    assert "RGT_RESUME=0" in job_a.log()

    # B: the same program, SIGTERM to the training process in the middle of the run.
    job_b = _run_cell(ip, "B")
    control_b = Path(job_b.spec.control_dir)

    def progressed() -> bool:
        snap = job_b.snapshot(log_lines=0)
        assert not snap.terminal, f"job B ended ({snap.state}) before it could be preempted"
        return snap.progress is not None and snap.progress["step"] >= PREEMPT_AT

    wait_for(progressed, 90, f"job B to reach step {PREEMPT_AT}")
    status = json.loads((control_b / "status.json").read_text())
    seen_step = int(job_b.snapshot(log_lines=0).progress["step"])
    os.kill(int(status["job_pid"]), signal.SIGTERM)
    assert job_b.wait(timeout=60) == "preempted", job_b.log()

    snap_b = job_b.snapshot()
    assert snap_b.state == "preempted"
    assert snap_b.exit_code == 0  # the program saved and returned on its own
    assert (control_b / "preempt.json").exists()
    assert json.loads((control_b / "preempt.json").read_text())["signal"] == "SIGTERM"
    m = re.search(r"preempted at step (\d+)", job_b.log())
    assert m, job_b.log()
    preempt_step = int(m.group(1))
    assert seen_step <= preempt_step < TOTAL
    steps = _ckpt_steps(job_b.spec.ckpt_dir)
    assert steps[-1] == preempt_step, steps
    last_periodic = (preempt_step - 1) // 10 * 10
    # Saved on preemption: newer than the last periodic checkpoint, or exactly at a boundary.
    assert preempt_step > last_periodic
    assert last_periodic in steps
    saved = _load(os.path.join(job_b.spec.ckpt_dir, f"ckpt-{preempt_step:010d}.pt"))
    assert saved["step"] == preempt_step
    assert not os.path.exists(os.path.join(job_b.spec.out_dir, "final.pt"))
    # What the preempted attempt saved survives its end (the resume reads it next).
    evidence.keep(job_b.spec.ckpt_dir)
    evidence.keep_prefix(control_b / "log")
    assert evidence.account(job_b.spec.ckpt_dir, control_b) == 0

    # Re-running the same cell under the same name resumes from that checkpoint.
    job_b2 = _run_cell(ip, "B")
    assert job_b2.id != job_b.id
    assert job_b2.spec.resume is True
    assert job_b2.spec.previous_job == job_b.id
    assert job_b2.spec.ckpt_dir == job_b.spec.ckpt_dir
    assert job_b2.spec.out_dir == job_b.spec.out_dir
    assert job_b2.wait(timeout=120) == "finished", job_b2.log()
    snap_b2 = job_b2.snapshot()
    assert snap_b2.resume_attempt == 2
    log_b2 = job_b2.log()
    assert "RGT_RESUME=1" in log_b2
    assert f"resumed from step {preempt_step}" in log_b2
    assert f"finished at step {TOTAL}" in log_b2
    first = job_b2.progress_records()[0]
    assert first["step"] == preempt_step + 1

    final_b = _load(os.path.join(job_b2.spec.out_dir, "final.pt"))
    assert final_a.keys() == final_b.keys()
    for key in final_a:
        assert torch.equal(final_a[key], final_b[key]), f"{key} differs from the reference run"
    assert job_a.result() == job_b2.result()
