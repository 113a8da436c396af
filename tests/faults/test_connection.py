"""Connection faults, injected for real: the SSH connection cut mid-push and between a launch and
its reply (a TCP proxy in front of the real sshd, with RST), a peer that goes silent with nothing
closed, sshd stopped with its connections and started again, and a host that reboots in effect
(the agent and the job SIGKILLed, a new boot id)."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter import remote, submit
from rgt_jupyter.api import Job
from rgt_jupyter.errors import LaunchError, PullError, UsageError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.watch.watcher import Watcher
from rgt_jupyter.store.registry import Registry
from rgt_jupyter.transport.ssh import SSHError, connect, stream

from ..conftest import control_json, pid_alive, wait_for
from ..sshbox import cutbox
from ..sshd import Sshd, start_sshd
from .evidence import Evidence, sha256

AGENT = remote.path("agent.py")


def _jobs_dir(tmp_path: Path) -> Path:
    """The profile ``box``'s job dirs on the (loopback) host."""
    return tmp_path / "remote home" / "proj" / "jobs"


def _processes(marker: str) -> list[list[str]]:
    """The command lines (argv) of live processes that mention ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or not pid_alive(int(entry)):
            continue
        try:
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in raw:
            found.append([a.decode(errors="replace") for a in raw.split(b"\0") if a])
    return found


def _bounded(call: Callable[[], Any], limit: float) -> tuple[BaseException | None, Any, float]:
    """Run ``call`` on a thread: (its exception, its value, seconds taken); the test fails when
    it is still running after ``limit`` seconds (a hang is a failure, never a stuck suite)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test to judge
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    start = time.monotonic()
    thread.start()
    thread.join(limit)
    took = time.monotonic() - start
    assert not thread.is_alive(), f"still blocked after {limit:g} s: it hangs"
    return out.get("error"), out.get("value"), took


def _alias(config_host: str, server: Sshd, known: Path) -> None:
    """Add ``config_host`` (a server of the test's own) to the ssh_config and known_hosts."""
    config = Path(os.environ["RGT_SSH_CONFIG"])
    known.write_text(known.read_text() + f"[127.0.0.1]:{server.port} {server.host_pub}\n")
    config.write_text(
        config.read_text()
        + f"\nHost {config_host}\n  HostName 127.0.0.1\n  Port {server.port}\n  User root\n"
        f"  IdentityFile {server.user_key}\n  UserKnownHostsFile {known}\n"
    )


def _why(job: Job) -> str:
    """What a job that did not finish left behind, for the failure message."""
    control = Path(job.spec.control_dir)
    names = sorted(p.name for p in control.iterdir()) if control.is_dir() else []
    agent_log = control / "agent.log"
    return (
        f"{job.snapshot().diagnosis}; control dir: {names}; agent.log: "
        f"{agent_log.read_text(errors='replace')[-500:] if agent_log.exists() else None}; "
        f"log: {job.log()[-500:]}"
    )


def _objects(store: Path) -> tuple[dict[str, Path], list[Path]]:
    """The object store's files: those under a sha256 name, and every other file."""
    named: dict[str, Path] = {}
    other: list[Path] = []
    for path in store.rglob("*") if store.exists() else []:
        if not path.is_file():
            continue
        name = path.name
        if len(name) == 64 and all(c in "0123456789abcdef" for c in name):
            named[name] = path
        else:
            other.append(path)
    return named, other


HASH_TREE = """\
import hashlib, os, rgt_jupyter.job as job
seen = {}
for root, dirs, files in os.walk("push tree"):
    for name in files:
        path = os.path.join(root, name)
        seen[os.path.relpath(path, "push tree")] = hashlib.sha256(open(path, "rb").read()).hexdigest()
job.save_results(seen)
"""


def _warm_up(project: Path) -> None:
    """One job through ``cutbox`` first: the host is audited, so a launch is one command now."""
    warm = submit(
        LaunchRequest("print('warm')\n", name="warm", profile="box", host="cutbox"), project
    )
    assert warm.wait(60) == "finished"


@pytest.mark.fault(
    "F1-push-cut",
    asserts="a push cut by RST mid-file fails with a launch error that says what to do, "
    "registers and starts nothing, leaves every object under a sha256 name whole (the part-sent "
    "one removed, or only under a temporary name), and a launch again runs on exactly the local "
    "bytes",
    mutation=(
        "rgt_jupyter/remote/ship.py",
        "                disk.drop(tmp)\n                cut = sha\n",
        "                disk.done(tmp, os.path.join(folder, sha), sha)\n                cut = sha\n",
    ),
)
def test_push_cut_mid_file_leaves_nothing_half_written_trusted(
    project: Path, box: Path, sshd: Sshd, tmp_path: Path, evidence: Evidence
) -> None:
    """The connection is reset (RST) by the proxy after 2 MiB of a ~4.5 MiB push went up
    (throttled, so the cut falls inside a file) and the host then refuses connections.

    Protection: rgt_jupyter/remote/ship.py: ``recv`` (the pushed objects' one stream) writes each
    object under a temporary name (``.SHA.tmp-PID``), names it only once whole and hashed, and
    drops the one a cut stream left short (``disk.drop(tmp)``), so an object of the store is
    complete or absent; with the part-sent object named instead, it sits under its sha256 name
    and the case fails.
    """
    tree = tmp_path / "push tree"
    rng = random.Random(11)
    for i in range(6):
        sub = tree / f"part {i % 2}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"shard-{i}.bin").write_bytes(rng.randbytes(768 << 10))
    (tree / "notes.txt").write_text("pushed with the job\n")
    evidence.keep(tree)
    local = {
        p.relative_to(tree).as_posix(): sha256(p) for p in sorted(tree.rglob("*")) if p.is_file()
    }
    request = LaunchRequest(
        program=HASH_TREE, name="pc", profile="box", host="cutbox", push=[str(tree)]
    )
    jobs = _jobs_dir(tmp_path)
    with cutbox(sshd, box) as proxy:
        proxy.throttle(3 << 20)
        proxy.arm(2 << 20, up=True, reset=True, refuse=True)
        with pytest.raises(LaunchError) as info:
            submit(request, project)
        message = str(info.value)
        assert proxy.resets == 1, "the cut did not happen during the push"
        assert "push to cutbox was interrupted" in message, message
        assert "Nothing was started" in message and "Launch again" in message, message
        # Nothing is registered, nothing was started from the half-pushed tree.
        assert Registry(project).jobs() == []
        for trace in ("bundle.zip", "agent.log", "status.json", "launch.json"):
            assert not list(jobs.glob(f"pc-*/{trace}")), trace
        assert not _processes(str(jobs / "pc-"))
        # Objects under a sha256 name are whole; the one cut short is only under a temp name.
        named, other = _objects(jobs / ".objects")
        for sha, path in named.items():
            assert sha256(path) == sha, f"{path.name}: a half-written object under its name"
        assert set(named) < set(local.values()), "the cut fell outside the objects"
        stamps = [p for p in other if p.name.endswith(".ok") and p.name[:-3] in named]
        rest = [p for p in other if p not in stamps]
        assert all(p.name.startswith(".") and ".tmp-" in p.name for p in rest), rest
        # The host answers again: a launch again sends what is missing and runs on those bytes.
        proxy.throttle(None)
        proxy.disarm()
        proxy.admit()
        job = submit(request, project)
        assert job.wait(60) == "finished", _why(job)
        assert job.result() == local
        named, _other = _objects(jobs / ".objects")
        assert set(local.values()) <= set(named)
        assert all(sha256(path) == sha for sha, path in named.items())
    assert evidence.account(Path(job.spec.code_dir) / "push tree") == 0


STEPS = """\
import os, time, rgt_jupyter.job as job
state = job.load_latest()
start = state["step"] if state else 0
for step in range(start + 1, STEPS + 1):
    job.save_checkpoint({"step": step, "w": [step] * 2000}, step=step, keep=100)
    job.progress(step, STEPS)
    time.sleep(PAUSE)
with open(os.path.join(os.environ["RGT_OUT"], "out.bin"), "wb") as fh:
    fh.write(bytes(range(256)) * 4096)
job.save_results({"steps": STEPS, "resumed_from": start})
"""


def _steps(steps: int, pause: float) -> str:
    return STEPS.replace("STEPS", str(steps)).replace("PAUSE", str(pause))


@pytest.mark.fault(
    "F1-launch-cut",
    asserts="a connection reset after the job started and before the launch's reply came back "
    "ends the launch normally (the job found running on the host, with a notice): one job "
    "process, one registry row, a second launch of the name refused, and the job finishes with "
    "its results pulled verified",
    mutation=[
        (
            "rgt_jupyter/run/launch.py",
            "        record = _reply_lost(tgt, backend, members, control, len(bundle), exc)\n",
            "        for job_id in ids:\n"
            "            tgt.registry.set_state(job_id, 'failed', reason=str(exc))\n"
            "        raise\n",
        ),
        (
            "rgt_jupyter/transport/ssh/__init__.py",
            "            if code == -1 and not transport.is_active():",
            "            if False:",
        ),
    ],
)
def test_launch_reply_lost_finds_the_started_job(
    project: Path, box: Path, sshd: Sshd, tmp_path: Path, evidence: Evidence
) -> None:
    """The proxy holds every server-to-client byte once half the launch bundle went up; when
    the job's status.json appears on the host, the connection is reset (RST).

    Protection: rgt_jupyter/run/launch.py: submit_prepared hands a transport failure of the launch
    command to _reply_lost, which asks the host (DetachedBackend.recover: status.json) before
    calling the job failed; and rgt_jupyter/transport/ssh/__init__.py: SSHTransport.exec raises when the
    connection closed before the exit status came (``code == -1 and not
    transport.is_active()``) instead of returning exit -1; removed, the launch fails and the
    job is recorded failed while it runs, and the case fails.
    """
    out_bytes = bytes(range(256)) * 4096
    evidence.keep_bytes(out_bytes, "out.bin, written by the job after the cut")
    jobs = _jobs_dir(tmp_path)
    with cutbox(sshd, box) as proxy:
        _warm_up(project)
        request = LaunchRequest(_steps(12, 0.25), name="lc", profile="box", host="cutbox")
        proxy.hold(after_up=AGENT.stat().st_size // 2)
        done: dict[str, Any] = {}

        def run() -> None:
            try:
                done["row"] = submit(request, project)
            except BaseException as exc:  # noqa: BLE001 - judged below
                done["error"] = exc

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        status = wait_for(lambda: next(iter(jobs.glob("lc-*/status.json")), None), 30, "status")
        control = status.parent
        spec = json.loads((control / "launch.json").read_text())
        ckpt = Path(spec["ckpt_dir"])
        wait_for(lambda: list(ckpt.glob("ckpt-*.json")), 30, "a first checkpoint")
        assert proxy.holding and thread.is_alive(), "the reply came back before the cut"
        evidence.keep(*[p for p in ckpt.glob("ckpt-*") if not p.name.startswith(".")])
        proxy.reset()
        thread.join(60)
        assert not thread.is_alive(), "the launch hangs after the cut"
        assert "error" not in done, f"the launch failed though the job started: {done['error']}"
        launched = done["row"]
        assert launched.recorded_state in ("queued", "running")
        assert launched.spec.control_dir == str(control)
        assert launched.spec.agent_pid == json.loads(status.read_text())["agent_pid"]
        assert any("dropped before the launch's reply" in n for n in launched.notices)
        kinds = [e["kind"] for e in Registry(project).history(launched.id)]
        assert "launch_reply_lost" in kinds and "launched" in kinds
        # Exactly one copy runs: one agent and one job process, under the one control dir.
        assert [d.name for d in jobs.glob("lc-*")] == [control.name]
        procs = _processes(str(jobs / "lc-"))
        assert len([p for p in procs if "run" in p]) == 1, procs
        assert len([p for p in procs if "cell" in p]) == 1, procs
        rows = [r for r in Registry(project).jobs() if r["name"] == "lc"]
        assert len(rows) == 1 and rows[0]["state"] in ("queued", "running"), rows
        with pytest.raises(UsageError, match="still (running|queued)"):
            submit(request, project)
        assert len([r for r in Registry(project).jobs() if r["name"] == "lc"]) == 1
        assert len([p for p in _processes(str(jobs / "lc-")) if "run" in p]) == 1
        job = launched
        assert job.wait(60) == "finished", _why(job)
        assert job.result() == {"steps": 12, "resumed_from": 0}
        run = job.pull()
    assert run.verified, run.text()
    assert evidence.account(run.path) == 0


@pytest.mark.fault(
    "F1-launch-cut",
    asserts="a connection reset while the launch bundle is still going up ends the launch with "
    "an error that says the job did not start (its bundle arrived cut short), the job recorded "
    "failed and nothing of it running; a launch again runs it and its results pull verified",
    mutation=(
        "rgt_jupyter/backends/detached/launcher.py",
        "if bundle is not None and bundle_size is not None and bundle.size < bundle_size:",
        "if False:",
    ),
)
def test_launch_cut_mid_bundle_is_reported_not_started(
    project: Path, box: Path, sshd: Sshd, tmp_path: Path, evidence: Evidence
) -> None:
    """The proxy resets the connection (RST) once half the launch bundle went up: the launch
    script on the host stores what came and starts the agent on it.

    Protection: rgt_jupyter/backends/detached/launcher.py: DetachedBackend.recover compares the stored
    ``bundle.zip`` with the size sent (``bundle.size < bundle_size``): a bundle cut short cannot
    run, so the job did not start; removed, the launch cannot tell, keeps the job queued and the
    case fails.
    """
    out_bytes = bytes(range(256)) * 4096
    evidence.keep_bytes(out_bytes, "out.bin, written by the job once launched again")
    jobs = _jobs_dir(tmp_path)
    with cutbox(sshd, box) as proxy:
        _warm_up(project)
        request = LaunchRequest(_steps(3, 0.1), name="lb", profile="box", host="cutbox")
        proxy.arm(AGENT.stat().st_size // 2, up=True, reset=True)
        with pytest.raises(LaunchError) as info:
            submit(request, project)
        message = str(info.value)
        assert proxy.resets == 1
        assert "did not start" in message and "arrived cut short" in message, message
        assert "launch it again" in message, message
        (row,) = [r for r in Registry(project).jobs() if r["name"] == "lb"]
        assert row["state"] == "failed"
        assert "launch_reply_lost" in [e["kind"] for e in Registry(project).history(row["id"])]
        (control,) = jobs.glob("lb-*")
        assert not (control / "status.json").exists()  # the agent never ran the job
        assert not (control / "bundle.zip").exists()  # what came of it is gone (secrets)
        assert not [p for p in _processes(str(control)) if "cell" in p]
        snap = Job(row, project).snapshot()  # every later look agrees: failed, and why
        assert snap.state == "failed" and "cut short" in (snap.diagnosis or ""), snap.diagnosis
        job = submit(request, project)
        assert job.wait(60) == "finished", _why(job)
        run = job.pull()
    assert run.verified, run.text()
    assert evidence.account(run.path) == 0


STOPPABLE = """\
import os, random, time, rgt_jupyter.job as job
for step in range(1, 4):
    job.save_checkpoint({"step": step, "w": [step] * 2000}, step=step, keep=100)
    job.progress(step, 3)
while not os.path.exists(os.environ["STOP_FILE"]):
    time.sleep(0.1)
with open(os.path.join(os.environ["RGT_OUT"], "big.bin"), "wb") as fh:
    fh.write(random.Random(5).randbytes(6 << 20))
job.save_results({"steps": 3})
"""
#: The longest a call may take on a silent host: 4 keepalive intervals of 1 s, a reconnect
#: held to the same limit, and slack for a loaded machine.
STALL_BOUND_S = 15.0


@pytest.mark.fault(
    "F2-stall",
    asserts="with the peer silent (nothing forwarded, nothing closed) a watcher look, a status "
    "look, a launch and a pull each end within a bound with a timeout error that says what to do; "
    "once the peer answers again the next call reconnects, the job finishes and its files, intact "
    "on the host, pull verified",
    mutation=(
        "rgt_jupyter/transport/ssh/__init__.py",
        "self._alive = Liveness(transport, sock, spec.alias)",
        "self._alive = None",
    ),
)
def test_silent_peer_is_detected_and_every_call_ends(
    project: Path,
    box: Path,
    sshd: Sshd,
    tmp_path: Path,
    evidence: Evidence,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The proxy stops forwarding both ways and keeps every socket open (no FIN, no RST), first
    while the job runs, then again in the middle of a pull.

    Protection: rgt_jupyter/transport/ssh/__init__.py: every connection gets a dead-peer watchdog
    (``Liveness``: a keepalive the server must answer once it is silent for RGT_SSH_ALIVE_S,
    the connection closed after 4 silent intervals); removed, a read on the silent connection
    waits forever and the case fails on its time bound.
    """
    monkeypatch.setenv("RGT_SSH_ALIVE_S", "1")
    # The OpenSSH client that carries large reads is held to the same limits.
    argv = stream.openssh_argv("ssh", "cutbox", tmp_path / "none", [], "true")
    for option in ("ServerAliveInterval=1", "ServerAliveCountMax=4", "ConnectTimeout=4"):
        assert option in argv, argv
    stop = tmp_path / "stop"
    with cutbox(sshd, box) as proxy:
        request = LaunchRequest(
            STOPPABLE, name="st", profile="box", host="cutbox", env={"STOP_FILE": str(stop)}
        )
        job = submit(request, project)
        ckpt = Path(job.spec.ckpt_dir)
        wait_for(lambda: len(list(ckpt.glob("ckpt-*.json"))) == 3, 30, "three checkpoints")
        evidence.keep(ckpt)
        seen: list[tuple[float, str, str]] = []
        watcher = Watcher(min_interval=0.2, max_interval=0.5)
        watcher.subscribe(
            job, lambda snap: seen.append((time.monotonic(), snap.state, snap.diagnosis or ""))
        )
        wait_for(lambda: any(s == "running" for _, s, _ in seen), 30, "the watcher's first look")

        proxy.stall()
        stalled_at = time.monotonic()
        blind = wait_for(
            lambda: next((t for t, _, d in seen if t > stalled_at and "cannot observe" in d), 0),
            STALL_BOUND_S,
            "the watcher to report that it cannot observe the job",
        )
        assert blind - stalled_at < STALL_BOUND_S
        assert all(s == "running" for t, s, _ in seen if t > stalled_at)  # not failed, not lost
        watcher.stop()

        error, _, _ = _bounded(job.snapshot, STALL_BOUND_S)
        assert isinstance(error, SSHError) and error.kind == "timeout", repr(error)
        assert "Try again once `ssh cutbox true` answers" in str(error), error

        other = LaunchRequest("print(1)\n", name="st2", profile="box", host="cutbox")
        error, _, _ = _bounded(lambda: submit(other, project), STALL_BOUND_S)
        assert isinstance(error, LaunchError), repr(error)
        assert "nothing was started" in str(error) and "[timeout]" in str(error), error
        assert Registry(project).get("st2")["state"] == "failed"
        assert not list(_jobs_dir(tmp_path).glob("st2-*/status.json"))

        proxy.release()  # the peer answers again: the next call reconnects
        assert job.snapshot().state == "running"
        stop.write_text("")
        assert job.wait(60) == "finished", _why(job)
        out = Path(job.spec.out_dir)
        evidence.keep(out)

        proxy.stall(after_bytes=3 << 20)  # silent again, in the middle of the pull's 6 MiB file
        error, _, _ = _bounded(job.pull, STALL_BOUND_S)
        assert isinstance(error, PullError), repr(error)
        assert "interrupted" in str(error) and "connection lost" in str(error), error
        assert "Pull again to resume" in str(error)
        proxy.release()
        run = job.pull()
    assert run.verified, run.text()
    assert evidence.account(ckpt, out) == 0  # intact on the host
    assert evidence.account(run.path) == 0  # and pulled


@pytest.mark.fault(
    "F3-sshd-restart",
    asserts="sshd stopped with every connection and started again while a job runs: the job's "
    "processes run on, the watcher reports the gap as 'cannot observe' (never failed or lost), "
    "job.wait and the watcher reconnect, the job finishes and its checkpoints pull verified",
    mutation=(
        "rgt_jupyter/run/watch/watcher.py",
        "prev.state if prev else job.recorded_state,",
        '"lost",',
    ),
)
def test_sshd_restart_while_the_job_runs(
    project: Path, box: Path, sshd: Sshd, evidence: Evidence
) -> None:
    """The real sshd (listener and every per-connection process) is stopped, stays down until
    the watcher has noticed, and is started again on the same port with the same host key.

    Protection: rgt_jupyter/run/watch/watcher.py: Watcher._unreachable keeps the last known state of a job
    whose host cannot be reached (``prev.state if prev else job.recorded_state``), with a diagnosis that
    says so; removed, the gap shows as a lost job and the case fails.
    """
    job = submit(LaunchRequest(_steps(16, 0.3), name="rs", profile="box", host="testbox"), project)
    seen: list[tuple[str, str]] = []
    watcher = Watcher(min_interval=0.2, max_interval=0.4)
    watcher.subscribe(job, lambda snap: seen.append((snap.state, snap.diagnosis or "")))
    ckpt = Path(job.spec.ckpt_dir)
    wait_for(lambda: len(list(ckpt.glob("ckpt-*.json"))) >= 3, 30, "three checkpoints")
    status = control_json(job, "status.json")
    assert status is not None
    pids = [int(status["agent_pid"]), int(status["job_pid"])]
    evidence.keep(*[p for p in ckpt.glob("ckpt-*") if not p.name.startswith(".")])
    try:
        restarts = sshd.restarts
        with sshd.down():
            with pytest.raises(SSHError) as info:
                connect("testbox", project).exec(["true"])
            assert info.value.kind in ("connection_refused", "transport_unavailable")
            wait_for(lambda: any("cannot observe" in d for _, d in seen), 20, "the gap")
            assert all(pid_alive(pid) for pid in pids), "the job died with sshd"
        assert sshd.restarts == restarts + 1
        assert all(pid_alive(pid) for pid in pids)
        assert job.wait(60) == "finished", _why(job)
        wait_for(lambda: seen and seen[-1][0] == "finished", 30, "the watcher to see the end")
    finally:
        watcher.stop()
    states = [s for s, _ in seen]
    assert "failed" not in states and "lost" not in states, states
    assert job.result() == {"steps": 16, "resumed_from": 0}
    run = job.pull()
    assert run.verified, run.text()
    assert evidence.account(run.path) == 0


@pytest.mark.fault(
    "F3-reboot",
    asserts="a host that reboots in effect (agent and job SIGKILLed, a new boot id, sshd "
    "restarted) shows the job lost, never running or finished, with the reboot named; the "
    "checkpoints written before stay, and a resume starts from the last of them",
    mutation=[
        (
            "rgt_jupyter/run/launch.py",
            'and previous["state"] in ("preempted", "failed", "lost")',
            'and previous["state"] in ("preempted", "failed")',
        ),
        (
            "rgt_jupyter/jobs/observe.py",
            "if status.boot_id not in (None, boot):",
            "if False:",
        ),
    ],
)
def test_reboot_leaves_the_job_lost_and_resumable(
    project: Path, box: Path, tmp_path: Path, evidence: Evidence
) -> None:
    """A server of the test's own runs in a mount namespace where the boot id is a file; the
    reboot stops the agent and the job (SIGSTOP), kills them (SIGKILL), writes a new boot id and
    restarts sshd. (The pids and the uptime of a real reboot are not simulated.)

    Protection: rgt_jupyter/run/launch.py: a job whose previous attempt ended ``lost`` is resumed
    into the same checkpoint dir (``previous["state"] in ("preempted", "failed", "lost")``);
    and rgt_jupyter/jobs/observe.py: a status.json from another boot is not taken for the running
    agent and the diagnosis names the reboot; removed, the resume starts over (or the reboot goes
    unnamed) and the case fails.
    """
    boot = tmp_path / "boot_id"
    first_boot = str(uuid.uuid4())
    boot.write_text(first_boot + "\n")
    root = tmp_path / "rebootd"
    root.mkdir()
    with start_sshd(root, boot_id=boot) as server:
        _alias("rebootbox", server, box)
        request = LaunchRequest(_steps(40, 0.1), name="rb", profile="box", host="rebootbox")
        job = submit(request, project)
        ckpt = Path(job.spec.ckpt_dir)
        wait_for(lambda: len(list(ckpt.glob("ckpt-*.json"))) >= 4, 30, "four checkpoints")
        status = control_json(job, "status.json")
        assert status is not None and status["boot_id"] == first_boot  # the host's own boot id
        agent, child = int(status["agent_pid"]), int(status["job_pid"])
        for pid in (agent, child):
            os.kill(pid, signal.SIGSTOP)  # everything stops at once, as the power goes
        written = sorted(p for p in ckpt.glob("ckpt-*.json"))
        evidence.keep(*written)
        last = int(written[-1].name.split("-")[1].split(".")[0])
        for pid in (agent, child):
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not pid_alive(agent) and not pid_alive(child), 10, "the kill")
        with server.down():
            boot.write_text(str(uuid.uuid4()) + "\n")  # in place: the bind mount follows
        assert job.wait(30) == "lost"
        snap = job.snapshot()
        assert snap.state == "lost" and "rebooted" in (snap.diagnosis or ""), snap.diagnosis
        assert Registry(project).get(job.id)["state"] == "lost"
        assert control_json(job, "exit.json") is None
        assert evidence.account(ckpt) == 0  # the checkpoints outlived the reboot
        again = job.resume()
        assert again.spec.ckpt_dir == job.spec.ckpt_dir and again.spec.resume
        assert again.wait(60) == "finished", _why(again)
        assert again.result() == {"steps": 40, "resumed_from": last}
        run = again.pull()
    assert run.verified, run.text()
    assert evidence.account(run.path) == 0
