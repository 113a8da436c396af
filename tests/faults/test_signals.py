"""Signals from outside: SIGTERM/SIGUSR2 end a job ``preempted`` with its work saved at a step
boundary; SIGKILL ends it ``failed`` (the job) or ``lost`` (the agent too), never ``running``
forever and never ``finished``."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from rgt_jupyter.api import submit
from rgt_jupyter.jobs.request import LaunchRequest

from ..conftest import control_json, pid_alive, running_job, wait_for
from .evidence import Evidence

# Saves a checkpoint at every 5th step and at the step it is told to stop.
LOOP = (
    "import time, rgt_jupyter.job as job\n"
    "step = 0\n"
    "while not job.preempted():\n"
    "    step += 1\n"
    "    job.progress(step)\n"
    "    if step % 5 == 0:\n"
    "        job.save_checkpoint({'step': step}, step, keep=100)\n"
    "    time.sleep(0.05)\n"
    "if step % 5:\n"
    "    job.save_checkpoint({'step': step}, step, keep=100)\n"
    "job.save_results({'stopped_at': step})\n"
)

SLEEPER = (
    "import time, rgt_jupyter.job as job\n"
    "job.save_checkpoint({'step': 1}, 1)\n"
    "job.progress(1)\n"
    "time.sleep(600)\n"
)


@pytest.mark.fault(
    "F4-sigterm",
    asserts="a signal to the agent reaches the job, which saves a checkpoint at the step it "
    "stopped and ends preempted (exit 0); every checkpoint written before stays",
    mutation=("rgt_jupyter/remote/agent.py", "os.killpg(self.child.pid, signum)", "None"),
)
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGUSR2"])
def test_agent_forwards_preemption_signals(project: Path, sig: str, evidence: Evidence) -> None:
    """The agent gets the platform's signal and forwards it to the job's process group.

    Protection: rgt_jupyter/remote/agent.py ``Agent.on_signal``: ``os.killpg(self.child.pid, signum)``
    forwards the signal; removed, the job never hears it, runs past the grace period and is
    killed, so it ends without its stop checkpoint and the case fails.
    """
    job = running_job(project, LOOP, f"fwd-{sig.lower()}", grace=5.0)
    ckpt = Path(job.spec.ckpt_dir)
    wait_for(lambda: list(ckpt.glob("ckpt-0000000005.*")), 30, "the first checkpoint")
    evidence.keep(ckpt)
    status = control_json(job, "status.json")
    assert status is not None
    os.kill(status["agent_pid"], getattr(signal, sig))
    assert job.wait(30) == "preempted"
    exit_rec = control_json(job, "exit.json")
    assert exit_rec is not None and exit_rec["exit_code"] == 0
    assert [s["signal"] for s in exit_rec["agent_signals"]] == [sig]
    stopped = job.result()["stopped_at"]
    assert stopped >= 5
    # Saved at the step boundary where it stopped, complete with its record.
    saved = sorted(p.name for p in ckpt.glob(f"ckpt-{stopped:010d}.*"))
    assert len(saved) == 2 and saved[1].endswith(".sha256"), saved
    assert evidence.account(ckpt) == 0


@pytest.mark.fault(
    "F4-sigkill",
    asserts="agent and job SIGKILLed (a reboot in effect): the job is lost, never running, "
    "with no exit record invented; its checkpoint stays",
    mutation=(
        "rgt_jupyter/jobs/observe.py",
        "alive, note = agent_alive(transport, spec, status, boot)",
        "alive, note = True, None",
    ),
)
def test_vanished_agent_is_lost_not_running(project: Path, evidence: Evidence) -> None:
    """Agent and job die at once with no chance to write anything.

    Protection: rgt_jupyter/jobs/observe.py ``observe_agent``: the agent status.json names is checked in
    the process table (``agent_alive``: alive, on this boot, its command line naming the control
    dir) before the job is called running; taken as alive, the job reads ``running`` forever and
    the case fails.
    """
    job = running_job(project, SLEEPER, "vanish")
    ckpt = Path(job.spec.ckpt_dir)
    evidence.keep(ckpt)
    status = control_json(job, "status.json")
    assert status is not None
    os.kill(status["agent_pid"], signal.SIGKILL)
    os.kill(status["job_pid"], signal.SIGKILL)
    for pid in (status["agent_pid"], status["job_pid"]):
        wait_for(lambda pid=pid: not pid_alive(pid), 30, f"process {pid} to die")
    snap = job.snapshot()
    assert snap.state == "lost", snap
    assert "without an exit record" in (snap.diagnosis or "")
    assert control_json(job, "exit.json") is None
    assert evidence.account(ckpt) == 0


@pytest.mark.fault(
    "F4-sigkill",
    asserts="the job process SIGKILLed: the agent records failed with the signal, never "
    "finished; its checkpoint stays",
    mutation=(
        "rgt_jupyter/remote/agent.py",
        '        if rc == 0:\n            return "finished"',
        '        if rc == 0 or rc == -signal.SIGKILL:\n            return "finished"',
    ),
)
def test_sigkilled_job_is_failed_never_finished(project: Path, evidence: Evidence) -> None:
    """The job is killed (the OOM killer, a user's kill -9); the agent survives and records it.

    Protection: rgt_jupyter/remote/agent.py ``Agent.final_state``: only exit code 0 is ``finished``;
    with a killed job counted as finished, the case fails.
    """
    job = running_job(project, SLEEPER, "killed")
    ckpt = Path(job.spec.ckpt_dir)
    evidence.keep(ckpt)
    status = control_json(job, "status.json")
    assert status is not None
    os.kill(status["job_pid"], signal.SIGKILL)
    assert job.wait(30) == "failed"
    snap = job.snapshot()
    assert snap.signal == "SIGKILL" and "SIGKILL" in (snap.diagnosis or "")
    assert evidence.account(ckpt) == 0


# Starts its training only once told to (the file GO exists): a warning can land first. It
# saves at every step and stops at the first step boundary after a warning.
LATE = (
    "import os, time\n"
    "while not os.path.exists(os.environ['GO']):\n"
    "    time.sleep(0.05)\n"
    "import rgt_jupyter.job as job\n"
    "step = 0\n"
    "while True:\n"
    "    step += 1\n"
    "    job.save_checkpoint({'step': step}, step, keep=100)\n"
    "    if job.preempted():\n"
    "        break\n"
    "    time.sleep(0.05)\n"
    "job.save_results({'stopped_at': step})\n"
)


@pytest.mark.fault(
    "F4-sigterm",
    asserts="a SIGUSR2 that reaches the job before its code set a handler neither kills it "
    "nor is lost: the job saves at its first step boundary and ends preempted (exit 0)",
    mutation=[
        (
            "rgt_jupyter/remote/job.py",
            "            signal.signal(sig, _on_preempt)\n    _catch_up()\n",
            "            signal.signal(sig, _on_preempt)\n",
        ),
        (
            "rgt_jupyter/remote/agent.py",
            "        signal.signal(signal.SIGUSR2, signal.SIG_IGN)\n",
            "",
        ),
    ],
)
def test_a_warning_before_the_handler_is_kept_not_fatal(
    project: Path, tmp_path: Path, evidence: Evidence
) -> None:
    """SIGUSR2 (a walltime warning, a platform's notice) reaches the job while it still imports
    its libraries.

    Protection: rgt_jupyter/remote/agent.py ``tie_to_parent`` starts the job with SIGUSR2
    ignored, so the early warning cannot kill it, and rgt_jupyter/remote/job.py ``_catch_up``
    reads the warning from ``signals.json`` when the job module sets its handlers. Without the
    first the job dies of the signal with nothing saved; without the second it never hears the
    warning and runs on until the grace period ends it; either way the case fails.
    """
    go = tmp_path / "go"
    req = LaunchRequest(program=LATE, name="late", grace_s=20.0, env={"GO": str(go)})
    job = submit(req, project)
    ckpt = Path(job.spec.ckpt_dir)
    status = wait_for(
        lambda: (
            (control_json(job, "status.json") or {}).get("job_pid")
            and control_json(job, "status.json")
        ),
        60,
        "the job's process",
    )
    os.kill(status["agent_pid"], signal.SIGUSR2)
    wait_for(lambda: control_json(job, "signals.json"), 60, "the forwarded warning's record")
    assert pid_alive(status["job_pid"]), "the warning killed the job before it could save"
    go.write_text("")
    assert job.wait(60) == "preempted"
    exit_rec = control_json(job, "exit.json")
    assert exit_rec is not None and exit_rec["exit_code"] == 0, exit_rec
    stopped = job.result()["stopped_at"]
    assert stopped == 1, stopped  # it stopped at its first step boundary
    assert list(ckpt.glob(f"ckpt-{stopped:010d}.*"))
    evidence.keep(ckpt)  # what it saved on the warning
    assert evidence.account(ckpt) == 0
