"""Nothing lies under kill -9, races and a damaged registry: the agent killed alone, launches
and pulls of one name at once, a registry file emptied or garbled, secrets left behind."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.errors import TransportError, UsageError
from rgt_jupyter.run.watch.watcher import Watcher
from rgt_jupyter.store.registry import Registry

from ..conftest import pid_alive, rgt, wait_for
from ..sshbox import close_connections, cutbox
from ..sshd import Sshd
from .evidence import Evidence

#: Steps until it is told to stop; then saves, and keeps saving (a long save) until the flag.
SAVES_LONG = """\
import os, time, rgt_jupyter.job as job
state = job.load_latest()
start = state["step"] if state else 0
for step in range(start + 1, 10**6):
    job.progress(step)
    time.sleep(0.05)
    if job.preempted():
        job.save_checkpoint({{"step": step}}, step=step)
        while not os.path.exists({flag!r}):
            time.sleep(0.05)
        break
    if state and step >= start + 3:
        job.save_results({{"resumed_from": start}})
        break
"""


def _status(job: Job) -> dict[str, int]:
    path = Path(job.spec.control_dir) / "status.json"
    wait_for(lambda: path.exists() and json.loads(path.read_text()).get("job_pid"), 60, "status")
    return json.loads(path.read_text())


@pytest.mark.fault(
    "R1-agent-killed",
    asserts="an agent SIGKILLed alone ends its job too (SIGTERM: it saves), and while the job's "
    "process lives the job shows 'running, agent lost' (never lost), a relaunch under its name "
    "is refused, and rgt stop ends it; the resume then continues from its checkpoint",
    mutation=[
        (
            "rgt_jupyter/jobs/observe.py",
            "    elif (orphan := job_orphan(transport, spec, status, boot)) is not None:",
            "    elif (orphan := None) is not None:",
        ),
        (
            "rgt_jupyter/remote/agent.py",
            "            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)",
            "            pass",
        ),
    ],
)
def test_an_agent_killed_alone_never_leaves_its_job_running_unseen(
    project: Path, tmp_path: Path, evidence: Evidence
) -> None:
    """The agent of a running job is SIGKILLed; its job gets SIGTERM from the kernel (it was
    tied to its parent), saves a checkpoint and takes its time finishing the save.

    Protection: rgt_jupyter/remote/agent.py ``tie_to_parent``: the job's process asks the
    kernel for SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``); removed, the job never
    learns its agent is gone and saves nothing. And rgt_jupyter/jobs/observe.py ``job_orphan``:
    a job whose agent is gone but whose own process (pid and start time of status.json, command
    line naming the control dir) lives is ``running``, not ``lost``; removed, it reads lost and a
    second copy is launched into its checkpoint dir. Each removed, the case fails.
    """
    flag = tmp_path / "save-done"
    program = SAVES_LONG.format(flag=str(flag))
    job = submit(program, project, name="orphan")
    wait_for(lambda: (job.snapshot(log_lines=0).progress or {}).get("step", 0) >= 3, 60, "steps")
    status = _status(job)
    os.kill(int(status["agent_pid"]), signal.SIGKILL)
    control = Path(job.spec.control_dir)
    wait_for(lambda: (control / "preempt.json").exists(), 30, "the job to hear SIGTERM")
    ckpt = Path(job.spec.ckpt_dir)
    wait_for(
        lambda: [p for p in ckpt.glob("ckpt-*") if not p.name.endswith(".sha256")],
        30,
        "the checkpoint of its save",
    )
    evidence.keep(ckpt)
    snap = job.snapshot()
    assert snap.state == "running" and snap.display_state == "running, agent lost", snap
    assert snap.orphan_pid == int(status["job_pid"]) and pid_alive(snap.orphan_pid)
    assert "agent lost" in (snap.diagnosis or "") and "rgt stop orphan" in (snap.diagnosis or "")
    with pytest.raises(UsageError, match="still running"):
        submit(program, project, name="orphan")
    with pytest.raises(UsageError, match="still running"):
        job.resume()
    assert len([r for r in Registry(project).jobs() if r["name"] == "orphan"]) == 1
    said = rgt("stop", "orphan", "--signal", "SIGKILL", cwd=project)
    assert "sent SIGKILL" in said.stdout
    wait_for(lambda: not pid_alive(int(status["job_pid"])), 30, "the orphan to end")
    assert job.snapshot(log_lines=0).state == "lost"
    again = submit(program, project, name="orphan")
    assert isinstance(again, Job) and again.spec.resume and again.spec.ckpt_dir == str(ckpt)
    assert again.wait(120) == "finished", again.log()
    assert again.result()["resumed_from"] >= 1
    assert evidence.account(ckpt) == 0


#: One launch, started by the test's go: the race is real processes, not threads.
RACER = """\
import json, os, sys, time
from pathlib import Path
while not os.path.exists(sys.argv[2]):
    time.sleep(0.005)
from rgt_jupyter import submit
from rgt_jupyter.errors import RgtError
try:
    job = submit("import time\\ntime.sleep(4)\\n", Path(sys.argv[1]), name="same")
    print(json.dumps({"launched": job.id}))
except RgtError as exc:
    print(json.dumps({"refused": str(exc)}))
"""


@pytest.mark.fault(
    "R2-name-race",
    asserts="four processes launching one name at the same moment in a new project start "
    "exactly one job; the others are refused saying it is queued or running",
    mutation=(
        "rgt_jupyter/run/launch.py",
        "    with names_claimed(project, [job_name(req)]):",
        "    with contextlib.nullcontext():",
    ),
)
def test_simultaneous_launches_of_one_name_start_one_job(
    project: Path, tmp_path: Path, evidence: Evidence
) -> None:
    """Protection: rgt_jupyter/run/launch.py ``names_claimed``: the job's name is held (a file
    lock, across processes) from the check that no job of that name runs to the registration of
    the new one; removed, every racer passes the check before any registers and several jobs
    run under one name, so the case fails.
    """
    evidence.sentinel(tmp_path / "beside")
    go = tmp_path / "go"
    env = {k: v for k, v in os.environ.items() if k != "RGT_PROJECT"}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(project), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(4)
    ]
    go.touch()
    answers = []
    for proc in racers:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        answers.append(json.loads(out.strip().splitlines()[-1]))
    launched = [a["launched"] for a in answers if "launched" in a]
    refused = [a["refused"] for a in answers if "refused" in a]
    assert len(launched) == 1, answers
    assert len(refused) == 3 and all("is still" in r for r in refused), refused
    assert [r["id"] for r in Registry(project).jobs()] == launched
    controls = list((project / ".rgt" / "local" / "jobs").glob("same-*"))
    assert len(controls) == 1
    assert evidence.account(tmp_path / "beside") == 0


def _damage(path: Path, how: str) -> None:
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = path.read_bytes()
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    if how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 3])
    else:
        path.write_bytes(os.urandom(len(data)))


@pytest.mark.fault(
    "R3-registry-damaged",
    asserts="an empty, truncated or garbage registry is never replaced silently: every command "
    "says which file is damaged and how to rebuild it (exit 2, no traceback), nothing is "
    "launched; `rgt jobs --rebuild` keeps the damaged file aside and restores every job, its "
    "state and its pulled run from the control dirs, run folders and journal",
    mutation=(
        "rgt_jupyter/store/registry.py",
        "        if problem is not None:\n            raise self._damaged(problem)",
        "        if False:\n            raise self._damaged(problem)",
    ),
)
@pytest.mark.parametrize("how", ["empty", "truncated", "garbage"])
def test_a_damaged_registry_is_refused_then_rebuilt_from_disk(
    project: Path, how: str, evidence: Evidence
) -> None:
    """Protection: rgt_jupyter/store/registry.py ``Registry.__init__``: a registry file that
    exists but is empty or not SQLite is refused with :class:`RegistryDamaged` (``damage``);
    removed, SQLite takes an empty file for a new database, ``rgt jobs`` says there are no jobs
    and a running job's name launches again, so the case fails.
    """
    (project / "train.py").write_text(
        "import rgt_jupyter.job as job\njob.save_checkpoint({'w': 1}, step=1)\n"
        "job.save_results({'acc': 0.5})\n"
    )
    (project / "long.py").write_text("import time\ntime.sleep(60)\n")
    rgt("run", "train.py", "--name", "done", cwd=project)
    rgt("watch", "done", "--wait", "--timeout", "120", cwd=project)
    rgt("pull", "done", cwd=project)
    rgt("run", "long.py", "--name", "long", cwd=project)
    (run,) = [p for p in (project / "runs").iterdir() if not p.name.startswith(".")]
    evidence.keep(run)
    registry = project / ".rgt" / "registry.sqlite3"
    before = {r["id"]: r for r in Registry(project).jobs()}
    _damage(registry, how)
    damaged = registry.read_bytes()
    for args in (["jobs"], ["watch", "long"], ["run", "long.py", "--name", "long"]):
        said = rgt(*args, cwd=project, check=False)
        assert said.returncode == 2, (args, said.stdout, said.stderr)
        assert str(registry) in said.stderr and "rgt jobs --rebuild" in said.stderr, said.stderr
        assert "Traceback" not in said.stderr
    assert registry.read_bytes() == damaged  # left as it was
    said = rgt("jobs", "--rebuild", cwd=project)
    assert "rebuilt the registry: 2 job(s), 1 run(s)" in said.stdout, said.stdout
    (kept,) = registry.parent.glob("registry.sqlite3.damaged-*")
    assert kept.read_bytes() == damaged
    rows = {r["id"]: r for r in Registry(project).jobs()}
    assert set(rows) == set(before)
    for job_id, row in rows.items():
        spec, old = row["spec"], before[job_id]["spec"]
        assert {k: spec.get(k) for k in old} == old, job_id  # the spec as the launch left it
    assert {r["name"]: r["state"] for r in rows.values()} == {"done": "finished", "long": "running"}
    done = next(r for r in rows.values() if r["name"] == "done")
    assert [r["path"] for r in Registry(project).runs(done["id"])] == [str(run)]
    refused = rgt("run", "long.py", "--name", "long", cwd=project, check=False)
    assert refused.returncode == 2 and "still running" in refused.stderr
    rgt("stop", "long", "--signal", "SIGKILL", cwd=project)
    assert evidence.account(project / "runs") == 0


@pytest.mark.fault(
    "R4-pull-race",
    asserts="two pulls of one job at once (two real processes) take turns: one lands a verified "
    "run, the other waits, says so, and returns that same run; no traceback, one run",
    mutation=(
        "rgt_jupyter/run/pull/__init__.py",
        '    with held(lock, f"the pull of job {spec.job_id}", on_wait=on_wait) as waited:',
        "    with contextlib.nullcontext(False) as waited:",
    ),
)
def test_two_pulls_of_one_job_at_once_land_one_verified_run(
    project: Path, evidence: Evidence
) -> None:
    """Protection: rgt_jupyter/run/pull/__init__.py ``pull``: the pulls of a job hold one lock
    (``held(lock_path(project, "pull", job_id))``), and a pull that waited returns the run the
    other one landed meanwhile; removed, both write the same partial folder and one dies in a
    rename (or two runs land), so the case fails.
    """
    program = textwrap.dedent(
        """\
        import os, rgt_jupyter.job as job
        for i in range(120):
            with open(os.path.join(os.environ["RGT_OUT"], "part-%03d.bin" % i), "wb") as fh:
                fh.write(os.urandom(200000))
        job.save_checkpoint({"w": [1.0] * 1000}, step=1)
        job.save_results({"ok": 1})
        """
    )
    job = submit(program, project, name="twice")
    assert job.wait(120) == "finished", job.log()
    evidence.keep(Path(job.spec.out_dir), Path(job.spec.ckpt_dir))
    env = {k: v for k, v in os.environ.items() if k != "RGT_PROJECT"}
    pulls = [
        subprocess.Popen(
            [sys.executable, "-m", "rgt_jupyter", "pull", "twice"],
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in pulls]
    for proc, (out, err) in zip(pulls, outs, strict=True):
        assert proc.returncode == 0, out + err
        assert "Traceback" not in err and "verified: yes" in out, out + err
    runs = [p for p in (project / "runs").iterdir() if not p.name.startswith(".")]
    assert len(runs) == 1 and all(str(runs[0]) in out for out, _ in outs), outs
    assert len(Registry(project).runs(job.id)) == 1
    assert any("waiting for it" in err for _, err in outs), outs
    assert evidence.account(runs[0]) == 0


@pytest.mark.fault(
    "R5-secrets",
    asserts="a secret is in no agent's environment; a secrets file left by an agent killed "
    "from outside is removed by the next look at the job, which says so; its resume leaves no "
    "second copy behind",
    mutation=[
        (
            "rgt_jupyter/backends/base.py",
            '        return ["env", *[a for name in sorted(unset) for a in ("-u", name)], *argv]',
            "        return argv",
        ),
        (
            "rgt_jupyter/run/secrets.py",
            '        transport.exec(["rm", "-f", "--", path], timeout=60).check()',
            "        pass",
        ),
    ],
)
def test_secrets_live_only_where_and_while_the_job_needs_them(
    project: Path, monkeypatch: pytest.MonkeyPatch, evidence: Evidence
) -> None:
    """Protection: rgt_jupyter/backends/base.py ``Backend.command``: the launch command runs
    without the secrets' variables (``env -u NAME``), so the agent never holds them in its
    environment; and rgt_jupyter/run/secrets.py ``drop_leftover_secrets``: the look at an ended
    job removes the secrets file its killed agent left. Each removed, the case fails.
    """
    value = "s3cr3t-" + os.urandom(8).hex()
    monkeypatch.setenv("WANDB_API_KEY", value)
    program = (
        "import time, rgt_jupyter.job as job\n"
        "assert job.secret('WANDB_API_KEY')\n"
        "state = job.load_latest()\n"
        "if not state:\n"
        "    job.save_checkpoint({'n': 1}, step=1)\n"
        "    time.sleep(60)\n"
    )
    job = submit(program, project, name="keyed", secrets=["WANDB_API_KEY"])
    status = _status(job)
    agent_env = Path(f"/proc/{status['agent_pid']}/environ").read_bytes()
    assert value.encode() not in agent_env and b"WANDB_API_KEY" not in agent_env
    job_env = Path(f"/proc/{status['job_pid']}/environ").read_bytes()
    assert value.encode() not in job_env  # the job reads it from its 0600 file
    control = Path(job.spec.control_dir)
    assert (control / "secrets.json").exists()
    ckpt = Path(job.spec.ckpt_dir)
    wait_for(
        lambda: [p for p in ckpt.glob("ckpt-*") if not p.name.endswith(".sha256")],
        30,
        "the checkpoint",
    )
    evidence.keep(ckpt)
    for pid in (status["job_pid"], status["agent_pid"]):
        os.kill(int(pid), signal.SIGKILL)
    wait_for(
        lambda: not any(pid_alive(int(status[k])) for k in ("agent_pid", "job_pid")),
        60,
        "the agent and the job to die",
    )
    assert (control / "secrets.json").exists()  # what a killed agent leaves
    snap = Job.from_registry("keyed", project).snapshot()
    assert snap.state == "lost" and "removed its leftover secrets file" in (snap.diagnosis or "")
    assert not (control / "secrets.json").exists()
    again = job.resume()
    assert again.wait(120) == "finished", again.log()
    jobs_dir = project / ".rgt" / "local" / "jobs"
    assert not list(jobs_dir.rglob("secrets.json"))
    assert value.encode() not in b"".join(p.read_bytes() for p in jobs_dir.rglob("*.json"))
    assert evidence.account(ckpt) == 0


@pytest.mark.fault(
    "R6-host-away",
    asserts="with one SSH host unreachable, rgt jobs still lists every job (the others observed, "
    "the away one with its last known state and age), Job.wait waits through the outage saying "
    "so, and the watcher shows the away job as it was last known, never queued",
    mutation=[
        (
            "rgt_jupyter/cli/jobs.py",
            "                away[where] = str(exc)",
            "                raise",
        ),
        (
            "rgt_jupyter/run/watch/watcher.py",
            "            prev.state if prev else job.recorded_state,",
            '            prev.state if prev else "queued",',
        ),
    ],
)
def test_one_unreachable_host_hides_no_other_job(
    project: Path, box: Path, sshd: Sshd, tmp_path: Path, evidence: Evidence
) -> None:
    """Protection: rgt_jupyter/cli/jobs.py ``_jobs``: a host that cannot be reached is noted and
    its jobs listed with their recorded state (``away[where] = str(exc)``), the others observed;
    and rgt_jupyter/run/watch/watcher.py ``Watcher._unreachable``: a job first seen while its
    host is away keeps its recorded state. Each removed, the case fails (rgt jobs exits 2 with
    no table; the view calls a running job queued).
    """
    here = submit(
        "import rgt_jupyter.job as job\njob.save_results({'a': 1})\n", project, name="here"
    )
    assert here.wait(120) == "finished"
    evidence.keep(Path(here.spec.out_dir))
    with cutbox(sshd, box) as proxy:
        far = submit(
            "import time\ntime.sleep(120)\n", project, name="far", profile="box", host="cutbox"
        )
        wait_for(lambda: far.snapshot(log_lines=0).state == "running", 60, "far to run")
        proxy.cut(refuse=True)
        close_connections(project)
        said = rgt("jobs", cwd=project, timeout=300)
        rows = {line.split()[1]: line for line in said.stdout.splitlines()[1:]}
        assert "finished" in rows["here"], said.stdout
        assert "running? (not observed; recorded" in rows["far"], said.stdout
        assert "not observed now: cutbox" in said.stderr, said.stderr
        outages: list[BaseException] = []
        away = Job.from_registry("far", project)
        with pytest.raises(TransportError):
            away.wait(timeout=3, poll=0.5, on_outage=outages.append)
        assert len(outages) == 1
        watcher = Watcher(min_interval=0.2, max_interval=0.5)
        seen: list[Any] = []
        watcher.subscribe(Job.from_registry("far", project), seen.append)
        snap = wait_for(
            lambda: next((s for s in seen if "cannot observe" in (s.diagnosis or "")), None),
            60,
            "the watcher to report the host away",
        )
        assert snap.state == "running" and "last recorded running" in (snap.diagnosis or "")
        watcher.stop()
        proxy.admit()
    assert evidence.account(Path(here.spec.out_dir)) == 0
