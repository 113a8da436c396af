"""Clock skew between the hosts, injected for real: the wall clock of one side reads an hour off
(``faultshim``'s ``RGT_FAULT_CLOCK_OFFSET_S``, preloaded into that side's processes only).

The job runs on the ``box`` SSH host (this machine's real sshd). The notebook host's side (a
long-lived process that launches, observes with one-off looks and a watcher, waits and pulls,
and ``rgt`` commands) runs with its clock +1 h or -1 h off; a running job must stay ``running``
with a heartbeat seconds old (and ageing when the agent stops beating), become ``lost`` soon
after its agent and job are killed, a finished job ``finished``, and its pull verify. The reverse
(the job host's clock off) preloads the shim into every process on the box side; there the file
times the kernel writes stay on the true clock, so only what does not compare a file time with
the agent's stamps is asserted.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.teardown import compute_gate
from rgt_jupyter.run.watch.watcher import Watcher
from rgt_jupyter.views.render import snapshot_text

from ..conftest import rgt, sigkill_job_and_agent, wait_for
from .evidence import Evidence
from .shim import env_with

#: Reports progress and prints until it is killed.
FOREVER = """\
import time
import rgt_jupyter.job as job
step = 0
while True:
    step += 1
    job.progress(step, loss=1.0 / step)
    print("step", step, flush=True)
    time.sleep(0.2)
"""

#: A short job with a checkpoint and results.
SHORT = """\
import time
import rgt_jupyter.job as job
for step in range(1, 6):
    job.progress(step, 5)
    time.sleep(0.1)
job.save_checkpoint({"step": 5}, 5)
job.save_results({"steps": 5})
"""

#: The notebook host's side: launches, looks, watches, waits and pulls on request (one JSON
#: command a line on stdin, one JSON answer a line on stdout), with the clock it was given.
OBSERVER = r"""
import json, sys, time
from pathlib import Path
from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.teardown import compute_gate
from rgt_jupyter.run.watch.watcher import Watcher

project = Path(sys.argv[1])


def fields(snap):
    return {
        "state": snap.state,
        "display_state": snap.display_state,
        "heartbeat_age": snap.heartbeat_age,
        "elapsed": snap.elapsed,
        "diagnosis": snap.diagnosis,
    }


def handle(cmd):
    op = cmd["op"]
    if op == "now":
        return {"time": time.time()}
    if op == "launch":
        req = LaunchRequest(program=cmd["program"], name=cmd["name"], profile="box",
                            host="testbox")
        return {"id": submit(req, project).id}
    job = Job.from_registry(cmd["name"], project)
    if op == "look":
        return fields(job.snapshot())
    if op == "watch":
        watcher = Watcher(min_interval=0.2, max_interval=0.5)
        seen = []
        watcher.subscribe(job, lambda snap: seen.append(fields(snap)))
        time.sleep(cmd["seconds"])
        last = fields(watcher.cached(job.id))
        watcher.stop()
        return {"seen": seen, "last": last, "error": watcher.error}
    if op == "wait":
        start = time.monotonic()
        state = job.wait(cmd["timeout"])
        return {"state": state, "took": time.monotonic() - start}
    if op == "pull":
        run = job.pull()
        return {"verified": run.verified, "path": str(run.path)}
    if op == "gate":
        gate = compute_gate(job._row, project)
        return {"passed": gate.passed, "text": gate.text()}
    raise ValueError(op)


for line in sys.stdin:
    try:
        answer = handle(json.loads(line))
    except Exception as exc:
        answer = {"exception": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(answer), flush=True)
"""


class Observer:
    """The notebook host's side, in its own process, with its own clock."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def ask(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the observer died: {self.proc.stderr.read() if self.proc.stderr else ''}"
        answer: dict[str, Any] = json.loads(line)
        assert "exception" not in answer, answer["exception"]
        return answer


@contextmanager
def observer(project: Path, tmp_path: Path, env: dict[str, str]) -> Iterator[Observer]:
    script = tmp_path / "observer.py"
    script.write_text(OBSERVER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(project)],
        cwd=project,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield Observer(proc)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _status(job: Job) -> dict[str, Any]:
    """The job's status.json (its control dir lies on this machine, under the box's home)."""
    path = Path(job.spec.control_dir) / "status.json"
    wait_for(path.exists, 60, "the agent's status.json")
    value: dict[str, Any] = json.loads(path.read_text())
    return value


def _heartbeat_shown(text: str) -> float:
    found = re.search(r"heartbeat: ([0-9.]+)s ago", text)
    assert found, text
    return float(found.group(1))


@pytest.mark.fault(
    "F11-clock-skew",
    asserts="with the notebook host's clock 1 h ahead or behind the job host's, a running job "
    "is seen running (one-off looks, a watcher, `rgt watch`, `rgt jobs`), never lost or "
    "stalled, its heartbeat seconds old (not 3600 s, not stuck at 0: it ages while the agent "
    "is stopped) and its elapsed time true; after its agent and job are SIGKILLed it is lost "
    "within 30 s; a finished job is finished, its pull verifies with every file, and the gate "
    "then passes",
    mutation=[
        (
            "rgt_jupyter/jobs/observe.py",
            'if stamp is not None and isinstance(beat.get("boot_id"), str) and beat["boot_id"] == boot:',
            "if False:",
        ),
        (
            "rgt_jupyter/jobs/snapshot.py",
            "return (self.ended_at or self.observed_at + (self.clock_offset or 0.0)) - self.started_at",
            "return (self.ended_at or self.observed_at) - self.started_at",
        ),
        (
            "rgt_jupyter/jobs/observe.py",
            "    now = snap.observed_at + (snap.clock_offset or 0.0)\n",
            "    now = snap.observed_at\n",
        ),
    ],
)
@pytest.mark.parametrize("offset", [3600, -3600])
def test_the_notebook_hosts_clock_an_hour_off(
    project: Path,
    box: Path,
    tmp_path: Path,
    faultshim: Path,
    offset: int,
    evidence: Evidence,
) -> None:
    """The whole notebook side runs with its wall clock ``offset`` seconds off.

    Protection: rgt_jupyter/jobs/observe.py ``heartbeat_age``: the heartbeat is aged by the job
    host's uptime against the uptime the agent stamped (removed, the two hosts' wall clocks are
    compared and the age reads 3600 s, or 0 s however long the agent is silent);
    ``Snapshot.elapsed`` adds the job host's clock offset (removed, a running job's elapsed
    time is an hour off); ``check_stall`` takes "now" on the job host's clock (removed, a +1 h
    notebook host sees every running job stalled). Each removed, the case fails.
    """
    env = env_with(faultshim, RGT_FAULT_CLOCK_OFFSET_S=str(offset))
    env.pop("RGT_PROJECT", None)
    with observer(project, tmp_path, env) as obs:
        skew = obs.ask("now")["time"] - time.time()
        assert abs(skew - offset) < 60, f"the shim did not shift the observer's clock: {skew}"

        obs.ask("launch", name="forever", program=FOREVER)
        job = Job.from_registry("forever", project)
        look = wait_for(
            lambda: (a := obs.ask("look", name="forever"))["state"] == "running" and a,
            60,
            "the job seen running",
        )
        time.sleep(2.0)  # a few heartbeats and progress records later
        look = obs.ask("look", name="forever")
        assert look["state"] == look["display_state"] == "running", look
        assert 0 <= look["heartbeat_age"] < 30, look
        assert 1 <= look["elapsed"] < 300, look

        status = _status(job)
        os.kill(status["agent_pid"], signal.SIGSTOP)  # the agent stops beating
        try:
            time.sleep(3.0)
            stopped = obs.ask("look", name="forever")
        finally:
            os.kill(status["agent_pid"], signal.SIGCONT)
        assert stopped["state"] == stopped["display_state"] == "running", stopped
        assert 2.5 <= stopped["heartbeat_age"] < 60, stopped

        watched = obs.ask("watch", name="forever", seconds=3.0)
        assert watched["error"] is None
        states = {s["display_state"] for s in watched["seen"]} | {watched["last"]["state"]}
        assert states <= {"queued", "running"}, watched
        assert 0 <= watched["last"]["heartbeat_age"] < 30, watched

        for args in (["watch", "forever"], ["jobs"]):
            proc = rgt(*args, cwd=project, env=env, timeout=120)
            if args[0] == "watch":
                assert "[running]" in proc.stdout, proc.stdout
                assert _heartbeat_shown(proc.stdout) < 30, proc.stdout
            else:
                assert any(
                    "forever" in row and " running " in row for row in proc.stdout.splitlines()
                ), proc.stdout

        sigkill_job_and_agent(status)
        ended = obs.ask("wait", name="forever", timeout=30)
        assert ended["state"] == "lost", ended

        obs.ask("launch", name="short", program=SHORT)
        assert obs.ask("wait", name="short", timeout=120)["state"] == "finished"
        short = Job.from_registry("short", project)
        evidence.keep(Path(short.spec.out_dir), Path(short.spec.ckpt_dir))
        pulled = obs.ask("pull", name="short")
        assert pulled["verified"], pulled
        assert evidence.account(pulled["path"]) == 0
        gate = obs.ask("gate", name="short")
        evidence.teardown(reachable=gate["passed"], gate_should_pass=True)
        assert gate["passed"], gate["text"]


@pytest.mark.fault(
    "F11-clock-skew",
    asserts="with the job host's clock 1 h ahead (agent, job and probe preload the shim there), "
    "a running job is seen running by one-off looks and a watcher here, its heartbeat seconds "
    "old and ageing while the agent is stopped, its elapsed time true; killed, it is lost "
    "within 30 s; a finished job is finished and its pull verifies",
    mutation=(
        "rgt_jupyter/jobs/observe.py",
        'if stamp is not None and isinstance(beat.get("boot_id"), str) and beat["boot_id"] == boot:',
        "if False:",
    ),
)
def test_the_job_hosts_clock_an_hour_ahead(
    project: Path, box: Path, tmp_path: Path, faultshim: Path, evidence: Evidence
) -> None:
    """Every process of the job's side runs with its wall clock an hour ahead.

    Not asserted: whether the job looks stalled. The kernel stamps file times (the log's, the
    checkpoints') on the true clock while the agent stamps its records on the shifted one, which
    no real host with a wrong clock does, so a stall judged from both would mean nothing here.

    Protection: rgt_jupyter/jobs/observe.py ``heartbeat_age``: the heartbeat is aged on the job
    host's boot-time clock (removed, the agent's shifted stamps are compared with this host's
    clock: the age reads 0 however long the agent is silent, and the case fails).
    """
    python = tmp_path / "python-an-hour-ahead"
    python.write_text(
        "#!/bin/sh\n"
        f"export LD_PRELOAD={faultshim} RGT_FAULT_CLOCK_OFFSET_S=3600\n"
        f'exec /usr/bin/python3 "$@"\n'
    )
    python.chmod(0o755)

    def start(program: str, name: str) -> Job:
        req = LaunchRequest(
            program=program, name=name, profile="box", host="testbox", python=str(python)
        )
        return submit(req, project)

    job = start(FOREVER, "ahead")
    wait_for(lambda: job.snapshot().state == "running", 60, "the job seen running")
    time.sleep(2.0)
    status = _status(job)
    assert status["started_at"] - time.time() > 3000, "the shim did not shift the job's clock"
    snap = job.snapshot()
    age, elapsed = snap.heartbeat_age, snap.elapsed
    assert snap.state == "running", snapshot_text(snap)
    assert age is not None and 0 <= age < 30, snapshot_text(snap)
    assert elapsed is not None and 1 <= elapsed < 300, snapshot_text(snap)

    os.kill(status["agent_pid"], signal.SIGSTOP)
    try:
        time.sleep(3.0)
        stopped = job.snapshot()
    finally:
        os.kill(status["agent_pid"], signal.SIGCONT)
    age = stopped.heartbeat_age
    assert stopped.state == "running", snapshot_text(stopped)
    assert age is not None and 2.5 <= age < 60, snapshot_text(stopped)

    watcher = Watcher(min_interval=0.2, max_interval=0.5)
    seen: list[Any] = []
    watcher.subscribe(job, seen.append)
    time.sleep(3.0)
    last = watcher.cached(job.id)
    watcher.stop()
    assert last is not None and last.state == "running", seen
    assert {s.state for s in seen} <= {"queued", "running"}
    age = last.heartbeat_age
    assert age is not None and 0 <= age < 30, snapshot_text(last)

    sigkill_job_and_agent(status)
    assert job.wait(30) == "lost"

    short = start(SHORT, "ahead-short")
    assert short.wait(120) == "finished", short.log()
    evidence.keep(Path(short.spec.out_dir), Path(short.spec.ckpt_dir))
    run = short.pull()
    assert run.verified
    assert evidence.account(run.path) == 0
    gate = compute_gate(short._row, project)
    evidence.teardown(reachable=gate.passed, gate_should_pass=True)
    assert gate.passed, gate.text()
