"""Reconciliation under real faults, seen through the batched watcher: a job killed with its
agent is ``lost``, a silent hang is ``stalled`` (or an NCCL timeout once it outlasts the
process-group timeout), a real cgroup OOM kill is named, a watcher that stopped says so, GPU use
comes from the agent's ``nvidia-smi`` samples, and logs are read by byte offset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.jobs.snapshot import Snapshot
from rgt_jupyter.remote.probe import probe, read_from
from rgt_jupyter.run.watch.reads import Lines
from rgt_jupyter.run.watch.watcher import Watcher, watcher_note
from rgt_jupyter.store.registry import Registry
from rgt_jupyter.views.render import snapshot_text

from ..conftest import control_json, sigkill_job_and_agent, wait_for
from .evidence import Evidence

HANG = """
import time
import rgt_jupyter.job as job
for step in range(1, 21):
    job.progress(step, 100, loss=1.0 / step)
    print("step", step, flush=True)
    time.sleep(0.05)
time.sleep(600)  # a silent hang: no log, no checkpoint, no progress
"""


def _follow(job: Job, watcher: Watcher) -> list[Snapshot]:
    seen: list[Snapshot] = []
    watcher.subscribe(job, seen.append)
    return seen


def _launch(project: Path, program: str, name: str, **spec: Any) -> Job:
    row = submit(LaunchRequest(program=program, name=name), project)
    if spec:
        Registry(project).update_spec(row.id, **spec)
    return Job(Registry(project).get(row.id), project)


def _kill(job: Job) -> None:
    status = control_json(job, "status.json")
    assert status is not None
    sigkill_job_and_agent(status)


@pytest.mark.fault(
    "F4-sigkill",
    asserts="the watcher following a job whose agent and job are SIGKILLed reports lost (with "
    "the diagnosis), never running, and the registry records lost",
    mutation=(
        "rgt_jupyter/jobs/observe.py",
        "alive, note = agent_alive(transport, spec, status, boot)",
        "alive, note = True, None",
    ),
)
def test_job_and_agent_killed_is_lost_never_running(project: Path, evidence: Evidence) -> None:
    """The watcher's view of a job killed from outside.

    Protection: rgt_jupyter/jobs/observe.py ``observe_agent``: a status.json that says running is believed
    only while the agent it names is alive on this boot; removed, the watcher shows running
    forever and the case fails.
    """
    job = _launch(project, HANG, "killed")
    watcher = Watcher(min_interval=0.2, max_interval=0.5)
    seen = _follow(job, watcher)
    wait_for(lambda: seen and seen[-1].state == "running", 60, "running")
    control = Path(job.spec.control_dir)
    wait_for(lambda: (control / "log").stat().st_size > 0, 30, "the first log line")
    evidence.keep_prefix(control / "log")
    _kill(job)
    wait_for(lambda: seen[-1].state == "lost", 30, "lost after SIGKILL of agent and job")
    assert "without an exit record" in (seen[-1].diagnosis or "")
    assert Registry(project).get(job.id)["state"] == "lost"
    watcher.stop()
    assert evidence.account(control) == 0


def test_silent_hang_is_stalled_after_k_median_step_intervals(project: Path) -> None:
    # Steps take 0.05 s, so 10 x the median interval is 0.5 s; the floor is lowered to 2 s.
    job = _launch(project, HANG, "hang", stall_min_s=2.0)
    watcher = Watcher(min_interval=0.2, max_interval=0.5)
    seen = _follow(job, watcher)
    wait_for(lambda: seen and seen[-1].state == "running", 60, "running")
    assert seen[-1].display_state == "running"
    snap = wait_for(
        lambda: seen[-1] if seen[-1].display_state == "stalled" else None, 30, "stalled"
    )
    assert snap.state == "running" and snap.stalled_s is not None and snap.stalled_s >= 2.0
    assert snap.stall_limit_s == pytest.approx(2.0)
    assert "stalled: no new log line, checkpoint or progress" in (snap.diagnosis or "")
    assert "[stalled]" in snapshot_text(snap)
    _kill(job)
    watcher.stop()


def test_a_stall_as_long_as_the_process_group_timeout_is_an_nccl_timeout(project: Path) -> None:
    job = _launch(project, HANG, "nccl", stall_min_s=1.0, pg_timeout_s=2.0)
    watcher = Watcher(min_interval=0.2, max_interval=0.5)
    seen = _follow(job, watcher)
    snap = wait_for(
        lambda: seen[-1] if seen and "NCCL" in (seen[-1].diagnosis or "") else None,
        30,
        "the NCCL diagnosis",
    )
    assert snap.display_state == "stalled" and (snap.stalled_s or 0) >= 2.0
    assert "process-group timeout" in (snap.diagnosis or "")
    _kill(job)
    watcher.stop()


def test_a_watcher_that_stopped_is_reported(project: Path) -> None:
    job = _launch(project, HANG, "orphaned")
    watcher = Watcher(min_interval=0.2, max_interval=0.5)
    seen = _follow(job, watcher)
    wait_for(lambda: seen and seen[-1].state == "running", 60, "running")
    assert watcher.alive and "last look" in (watcher_note(project, job.id) or "")

    def broken() -> bool:
        raise RuntimeError("the transport hung up")

    watcher.tick = broken  # type: ignore[method-assign]
    wait_for(lambda: not watcher.alive, 10, "the watcher thread to die")
    # The view is told, the registry says so to any other reader (CLI, server, new kernel) ...
    assert "watcher stopped: RuntimeError: the transport hung up" in (seen[-1].watcher or "")
    assert "run %watch again" in (seen[-1].watcher or "")
    assert "stopped: RuntimeError" in (watcher_note(project, job.id) or "")
    # ... and a watcher that simply stopped ticking (hung, or its process frozen) is late.
    hung = Watcher(kind="server")
    hung.follow(job)
    wait_for(lambda: hung.ticks > 0, 30, "one tick")
    frozen = threading.Event()
    hung.tick = lambda: frozen.wait() and False  # type: ignore[method-assign]
    later = time.time() + 2 * hung.interval + 60
    assert "server watcher" in (watcher_note(project, job.id, now=later) or "")
    assert "stopped ticking" in (watcher_note(project, job.id, now=later) or "")
    assert "last look" in (watcher_note(project, job.id) or "")  # not late yet
    frozen.set()
    hung.stop()
    assert "server watcher" in (watcher_note(project, job.id) or "")
    _kill(job)


def test_gpu_use_comes_from_the_agents_nvidia_smi_samples(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in nvidia-smi printing the documented CSV of the query the agent makes.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in *--query-gpu=index,utilization.gpu*) '
        'echo "0, 87, 12288, 81920"; echo "1, 3, 512, 81920";; esac\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    program = "import time\nfor i in range(30):\n    print(i, flush=True)\n    time.sleep(0.1)\n"
    job = _launch(project, program, "gpu")
    watcher = Watcher(min_interval=0.2, max_interval=0.5)
    seen = _follow(job, watcher)
    snap = wait_for(
        lambda: seen[-1] if seen and (seen[-1].resources or {}).get("gpus") else None,
        30,
        "a GPU sample",
    )
    assert snap.resources is not None
    gpus = snap.resources["gpus"]
    assert gpus[0] == {"index": 0, "util": 87.0, "mem_used_mib": 12288.0, "mem_total_mib": 81920.0}
    # The newest samples' mean utilisation, kept for the throughput finding.
    assert snap.resources["gpu_util_recent"][0] == 45.0
    assert "GPU 0: 87% · 12.0/80.0 GiB" in snapshot_text(snap)
    assert "GPU 1: 3%" in snapshot_text(snap)
    wait_for(lambda: seen[-1].state == "finished", 30, "the end")
    watcher.stop()


def _memory_cgroup(name: str) -> Path:
    v1 = Path("/sys/fs/cgroup/memory")
    root = v1 if (v1 / "memory.limit_in_bytes").exists() else Path("/sys/fs/cgroup")
    path = root / name
    path.mkdir()
    limit = str(96 << 20)
    if root == v1:
        (path / "memory.limit_in_bytes").write_text(limit)
        swap = path / "memory.memsw.limit_in_bytes"
        if swap.exists():
            swap.write_text(limit)
    else:
        (path / "memory.max").write_text(limit)
        (path / "memory.swap.max").write_text("0")
    return path


def test_a_real_cgroup_oom_kill_is_diagnosed(project: Path) -> None:
    """The job runs in a memory cgroup of 96 MiB and allocates far more: the kernel's OOM
    killer ends it, and the diagnosis names the cgroup limit from the oom_kill counter."""
    assert os.geteuid() == 0, "this test makes a memory cgroup: run the suite as root (CI does)"
    cgroup = _memory_cgroup(f"rgt-oom-{os.getpid()}")
    hog = textwrap.dedent(
        """
        import time
        blocks = []
        for i in range(200):
            blocks.append(bytearray(8 << 20))  # 8 MiB, touched
            time.sleep(0.01)
        print("survived", flush=True)
        """
    )
    # The launch runs in a process that first enters the cgroup, so the agent and the job do.
    launcher = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        Path({str(cgroup / "cgroup.procs")!r}).write_text(str(__import__("os").getpid()))
        from rgt_jupyter import submit
        job = submit({hog!r}, Path({str(project)!r}), name="hog")
        print(json.dumps({{"id": job.id}}))
        """
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", launcher], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        job = Job.from_registry(json.loads(done.stdout.strip().splitlines()[-1])["id"], project)
        watcher = Watcher(min_interval=0.2, max_interval=0.5)
        seen = _follow(job, watcher)
        wait_for(lambda: seen and seen[-1].terminal, 60, "the end of the job")
        snap = seen[-1]
        assert snap.state == "failed" and snap.signal == "SIGKILL", snapshot_text(snap)
        assert "killed by the kernel OOM killer" in (snap.diagnosis or ""), snap.diagnosis
        assert "oom_kill 0 -> 1" in (snap.diagnosis or "")
        watcher.stop()
    finally:
        for _ in range(50):
            try:
                cgroup.rmdir()
                break
            except OSError:
                time.sleep(0.2)


def test_the_log_is_read_by_byte_offset(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(b"old line\n" * 100_000)  # about 0.9 MB already there
    lines = Lines(-65536)
    first = read_from(str(log), lines.offset, encode=False)
    lines.feed(first)
    assert len(first["data"]) <= 65536  # the first look reads the tail, not the whole file
    with log.open("ab") as fh:
        fh.write(b"new \x1b[31mred\x1b[0m line\nhalf a li")
    chunk = read_from(str(log), lines.offset, encode=False)
    assert chunk["data"] == b"new \x1b[31mred\x1b[0m line\nhalf a li"  # only the new bytes
    got = lines.feed(chunk)
    assert [raw for raw, _ in got] == [b"new \x1b[31mred\x1b[0m line"]
    assert got[0][1] == log.stat().st_size - len(b"half a li")
    with log.open("ab") as fh:
        fh.write(b"ne\n")
    assert [raw for raw, _ in lines.feed(read_from(str(log), lines.offset, encode=False))] == [
        b"half a line"
    ]
    # One look at many jobs: each job's answer carries only its own new bytes.
    control = tmp_path / "job"
    control.mkdir()
    (control / "log").write_bytes(b"a\nb\n")
    (control / "exit.json").write_text(json.dumps({"state": "finished"}))
    answer = probe([{"control": str(control), "log_offset": 2, "progress_offset": 0}])
    assert answer["boot_id"] and answer["jobs"][0]["exit"]
    assert answer["jobs"][0]["log"]["offset"] == 2 and answer["jobs"][0]["log"]["data"] == "Ygo="
