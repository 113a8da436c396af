"""A job launched from a notebook kernel outlives that kernel and is found by a new one."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from rgt_jupyter import submit
from rgt_jupyter.api import Job

from .conftest import pid_alive, wait_for
from .kernels import _execute, _kernel_spec_manager, _shutdown, _start_kernel

#: The job waits for the test's go (a file) before it steps: the cell must have returned, and
#: the kernel been killed, while the job still runs, whatever the machine's load.
JOB_CELL = """%%remote_run --name det
import os, time
import rgt_jupyter.job as job

while not os.path.exists({go!r}):
    time.sleep(0.1)
TOTAL = 8
for step in range(1, TOTAL + 1):
    time.sleep(0.5)
    job.progress(step, TOTAL)
job.save_results({{'answer': 42}})
"""


def test_job_outlives_killed_kernel_and_new_kernel_pulls_it(tmp_path: Path, project: Path) -> None:
    ksm = _kernel_spec_manager(tmp_path)

    km1 = kc1 = km2 = kc2 = None
    try:
        km1, kc1 = _start_kernel(project, ksm)
        out = _execute(kc1, "import sys; print('EXE=' + sys.executable)")
        assert f"EXE={sys.executable}" in out

        _execute(kc1, "%load_ext rgt_jupyter")
        go = tmp_path / "go"
        # The cell hands control back although the job cannot end before the go.
        _execute(kc1, JOB_CELL.format(go=str(go)))

        job = Job.from_registry("det", project)
        control = Path(job.spec.control_dir)
        wait_for(lambda: (control / "status.json").exists(), 30, "the agent's status.json")
        status = json.loads((control / "status.json").read_text())
        agent_pid = int(status["agent_pid"])
        job_pid = int(status["job_pid"])
        assert not (control / "exit.json").exists(), "the job ended before the kernel was killed"

        kernel_pid = km1.provisioner.process.pid
        os.kill(kernel_pid, signal.SIGKILL)
        km1.provisioner.process.wait(timeout=10)
        _shutdown(km1, kc1)
        km1 = kc1 = None

        # The kernel is gone; the agent and the job process it supervises are not.
        assert not pid_alive(kernel_pid)
        assert pid_alive(agent_pid), "the agent died with the kernel"
        assert pid_alive(job_pid), "the job process died with the kernel"
        assert not (control / "exit.json").exists()
        assert Job.from_registry("det", project).snapshot().state == "running"
        go.touch()

        km2, kc2 = _start_kernel(project, ksm)
        _execute(kc2, "%load_ext rgt_jupyter")
        _execute(kc2, "j = %watch det --wait --timeout 120", timeout=150)
        out = _execute(
            kc2,
            "r = %pull det\n"
            "import json\n"
            "print('RESULTS=' + json.dumps(r.results, sort_keys=True))\n"
            "print('VERIFIED=' + str(r.verified))\n"
            "print('STATE=' + j.state)\n",
            timeout=120,
        )
        assert 'RESULTS={"answer": 42}' in out, out
        assert "VERIFIED=True" in out, out
        assert "STATE=finished" in out, out

        snap = Job.from_registry("det", project).snapshot()
        assert snap.state == "finished"
        assert snap.exit_code == 0
        assert snap.progress is not None and snap.progress["step"] == 8
        exit_rec = json.loads((control / "exit.json").read_text())
        assert exit_rec["state"] == "finished"
        runs = [p for p in (project / "runs").iterdir() if not p.name.startswith(".")]
        assert len(runs) == 1
        assert json.loads((runs[0] / "results.json").read_text()) == {"answer": 42}
        wait_for(lambda: not pid_alive(agent_pid), 30, "the agent to exit")
    finally:
        _shutdown(km1, kc1)
        _shutdown(km2, kc2)


def test_tmux_launcher_shows_the_log_in_a_session_the_job_does_not_need(
    project: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    """``launcher = "tmux"``: a tmux session named after the job shows its log live (attach to
    watch); the job runs detached as ever, so killing the tmux server mid-run does not stop it."""
    import subprocess

    from rgt_jupyter.backends.detached import TmuxBackend
    from rgt_jupyter.jobs.request import LaunchRequest

    monkeypatch.setenv("TMUX_TMPDIR", str(tmp_path))  # a tmux server of this test's own
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    builtin = (Path(__file__).parent.parent / "profiles" / "local.toml").read_text()
    (profiles / "tm.toml").write_text(
        builtin.replace('name = "local"', 'name = "tm"').replace(
            'launcher = "detached"', 'launcher = "tmux"'
        )
    )
    program = (
        "import time, rgt_jupyter.job as job\n"
        "print('hello from the job', flush=True)\n"
        "time.sleep(4)\n"
        "job.save_results({'done': True})\n"
    )
    request = LaunchRequest(program=program, name="in.tmux", profile="tm")
    job = submit(request, project)
    session = TmuxBackend.session(job.spec.control_dir)
    assert session == f"rgt-{job.id.replace('.', '_')}"

    def pane() -> str:
        shown = subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", f"={session}:"],
            capture_output=True,
            text=True,
            check=False,
        )
        return shown.stdout

    wait_for(lambda: "hello from the job" in pane(), 30)
    subprocess.run(["tmux", "kill-server"], check=True)
    assert job.wait(60) == "finished", job.log()
    assert job.pull().results == {"done": True}
    # A second job: its session closes by itself once the job has ended.
    second = submit(LaunchRequest(program="print(1)\n", profile="tm"), project)
    assert second.wait(60) == "finished"
    wait_for(
        lambda: (
            subprocess.run(
                [
                    "tmux",
                    "has-session",
                    "-t",
                    f"={TmuxBackend.session(second.spec.control_dir)}",
                ],
                capture_output=True,
                check=False,
            ).returncode
            != 0
        ),
        10,
    )
