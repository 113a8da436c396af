"""True facts in the view: the disk a job really uses, a full disk told from one out of inodes,
NaN at exit 0, a stale heartbeat, a bug not resumed blindly, a stop not confirmed past the gate."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from rgt_jupyter import submit
from rgt_jupyter.cli import main as rgt_main
from rgt_jupyter.store.registry import Registry
from rgt_jupyter.views.render import snapshot_text

from ..conftest import rgt, wait_for
from ..machines import ON_THIS_MACHINE
from .evidence import Evidence

GUIDED = (
    'extends = "autodl"\n'
    + ON_THIS_MACHINE
    + '\n[[tiers]]\npath = "/"\nlabel = "data disk"\nsurvives_stop = true\n'
    + "survives_destroy = false\n"
)


@pytest.mark.fault(
    "R7-facts",
    asserts="with --ckpt-dir on a 5 MiB disk the job's audit gives that dir's free space (and "
    "warns that little is free), not the profile's default durable dir",
    mutation=(
        "rgt_jupyter/run/audit.py",
        "    durable_dir = ckpt_root or profile.expand(profile.durable_dir, project, home)",
        "    durable_dir = profile.expand(profile.durable_dir, project, home)",
    ),
)
def test_the_disk_facts_are_those_of_the_checkpoint_dir_in_use(
    project: Path,
    tmpfs: Callable[..., Path],
    evidence: Evidence,
) -> None:
    """Protection: rgt_jupyter/run/audit.py ``audit_host``: the disk audited for the job's
    checkpoints is the ``--ckpt-dir`` root when one is given; removed, the view reports the
    profile's durable dir (tens of GiB free) for a job whose checkpoints fill 5 MiB, and the
    case fails.
    """
    disk = tmpfs("small", size="5m")
    evidence.sentinel(disk)
    job = submit("print('ok')\n", project, name="small", ckpt_dir=str(disk))
    assert job.wait(120) == "finished", job.log()
    findings = job.spec.audit.get("findings", [])
    assert any(f.startswith(f"checkpoint dir {disk}: ") and "MiB free" in f for f in findings)
    assert any(f.startswith(f"{disk}: only ") for f in findings), findings
    assert not any(f.startswith("durable dir:") for f in findings), findings
    assert f"checkpoint dir {disk}" in snapshot_text(job.snapshot())
    assert evidence.account(disk) == 0


FILL_BYTES = """\
import rgt_jupyter.job as job
job.save_checkpoint({"w": [0.5] * (8 << 20)}, step=1)
"""
FILL_INODES = """\
import os
d = os.environ["RGT_CKPT_DIR"]
for i in range(10**6):
    open(os.path.join(d, "shard-%06d.bin" % i), "wb").close()
"""


@pytest.mark.fault(
    "R7-facts",
    asserts="a job that filled its disk's bytes is diagnosed disk full (df -h), one that used up "
    "its inodes is diagnosed out of inodes (df -i): told apart from the disks' numbers, not "
    "from whether an error message mentions inodes",
    mutation=(
        "rgt_jupyter/jobs/diagnose.py",
        "            full = _full_kind(kind, disks)",
        "            full = kind",
    ),
)
@pytest.mark.parametrize("what", ["bytes", "inodes"])
def test_a_full_disk_is_told_from_one_out_of_inodes(
    project: Path,
    tmpfs: Callable[..., Path],
    what: str,
    evidence: Evidence,
) -> None:
    """Protection: rgt_jupyter/jobs/diagnose.py ``_full_kind``: an ENOSPC ("No space left on
    device", the same words for both) is classed by the statvfs numbers the agent records at the
    end (``exit.json`` ``disks``); removed, a job out of inodes is sent to free disk space and
    the case fails.
    """
    disk = tmpfs(
        f"full-{what}",
        size="4m" if what == "bytes" else "64m",
        inodes=None if what == "bytes" else 40,
    )
    evidence.sentinel(project.parent / "beside")
    program = FILL_BYTES if what == "bytes" else FILL_INODES
    job = submit(program, project, name=f"fill-{what}", ckpt_dir=str(disk))
    assert job.wait(120) == "failed", job.log()
    snap = job.snapshot()
    if what == "bytes":
        assert snap.failure == "disk_full", snap.diagnosis
        assert (
            "df -h" in (snap.diagnosis or "")
            and "inodes" not in (snap.diagnosis or "").split("Fix:")[1]
        )
    else:
        assert snap.failure == "inodes_full", snap.diagnosis
        assert "df -i" in (snap.diagnosis or ""), snap.diagnosis
    exit_rec = json.loads((Path(job.spec.control_dir) / "exit.json").read_text())
    assert str(Path(job.spec.ckpt_dir)) in exit_rec["disks"]
    assert evidence.account(project.parent / "beside") == 0


@pytest.mark.fault(
    "R7-facts",
    asserts="a run whose loss became NaN (in job.progress) or whose results.json holds a NaN, "
    "though it exited 0, is finished with the NaN diagnosis beside it, never a silent finished",
    mutation=(
        "rgt_jupyter/jobs/observe.py",
        "    check_finished_metrics(transport, spec, snap)\n",
        "",
    ),
)
@pytest.mark.parametrize("where", ["progress", "results"])
def test_nan_at_exit_0_is_diagnosed_beside_finished(
    project: Path, where: str, evidence: Evidence
) -> None:
    """Protection: rgt_jupyter/jobs/observe.py ``check_finished_metrics``: a finished job's
    progress records and results are looked at for NaN and infinity; removed, a diverged run
    reads plain finished and the case fails.
    """
    program = "import rgt_jupyter.job as job\njob.progress(1, 2, loss=1.5)\n" + (
        "job.progress(2, 2, loss=float('nan'))\njob.save_results({'loss': 0.1})\n"
        if where == "progress"
        else "job.progress(2, 2, loss=0.9)\njob.save_results({'val': {'loss': float('nan')}})\n"
    )
    job = submit(program, project, name=f"nan-{where}")
    assert job.wait(120) == "finished", job.log()
    evidence.keep(Path(job.spec.out_dir))
    snap = job.snapshot()
    assert snap.state == "finished" and snap.failure == "nan_metrics", snap.diagnosis
    said = "metric 'loss' became nan" if where == "progress" else "results.json holds val.loss"
    assert (snap.diagnosis or "").startswith("finished, but") and said in (snap.diagnosis or "")
    assert said in snapshot_text(snap)
    assert evidence.account(Path(job.spec.out_dir)) == 0


@pytest.mark.fault(
    "R7-facts",
    asserts="the heartbeat of a stopped (SIGSTOP) agent is flagged stale after a few of its "
    "intervals while the job stays running; it is fresh again once the agent beats",
    mutation=("rgt_jupyter/jobs/observe.py", "    check_heartbeat(spec, snap)\n", ""),
)
def test_a_stale_heartbeat_is_flagged(project: Path, evidence: Evidence) -> None:
    """Protection: rgt_jupyter/jobs/observe.py ``check_heartbeat``: a running job's heartbeat
    older than max(3 intervals, interval + 10 s) is flagged; removed, a stopped agent's
    heartbeat ages with no word and the case fails.
    """
    job = submit("import time\nfor i in range(600):\n    time.sleep(0.1)\n", project, name="beat")
    control = Path(job.spec.control_dir)
    wait_for(lambda: (control / "heartbeat.json").exists(), 60, "a first heartbeat")
    evidence.keep(control / "launch.json")
    agent = json.loads((control / "status.json").read_text())["agent_pid"]
    os.kill(agent, signal.SIGSTOP)
    try:
        snap = wait_for(
            lambda: s if (s := job.snapshot()).heartbeat_stale else None, 120, "a stale flag"
        )
        assert snap.state == "running" and "heartbeat stale" in (snap.diagnosis or "")
        assert "(stale)" in snapshot_text(snap)
    finally:
        os.kill(agent, signal.SIGCONT)
    wait_for(lambda: not job.snapshot().heartbeat_stale, 60, "a fresh heartbeat")
    job.stop("SIGKILL")
    assert evidence.account(control) == 0


@pytest.mark.fault(
    "R7-facts",
    asserts="rgt resume of a job that failed with a bug in its code is refused with why and "
    "what to do (--force); with --force it relaunches",
    mutation=(
        "rgt_jupyter/api.py",
        '        if snap.failure == "python_exception" and not force:',
        "        if False:",
    ),
)
def test_resuming_a_code_bug_asks_for_force(project: Path, evidence: Evidence) -> None:
    """Protection: rgt_jupyter/api.py ``Job.resume``: a job diagnosed as a bug in its code
    (``python_exception``) is relaunched only with ``force``; removed, the same code is run
    again to fail the same way, and the case fails.
    """
    (project / "bug.py").write_text("raise ValueError('a bug')\n")
    rgt("run", "bug.py", "--name", "bug", cwd=project)
    rgt("watch", "bug", "--wait", "--timeout", "120", cwd=project, check=False)
    evidence.sentinel(project.parent / "beside")
    said = rgt("resume", "bug", cwd=project, check=False)
    assert said.returncode == 2 and "bug in its code" in said.stderr, said.stderr
    assert "rgt resume bug --force" in said.stderr
    assert len(Registry(project).jobs()) == 1
    rgt("resume", "bug", "--force", cwd=project)
    assert [r["attempt"] for r in Registry(project).jobs()] == [1, 2]
    assert evidence.account(project.parent / "beside") == 0


@pytest.mark.fault(
    "R7-facts",
    asserts="rgt down --confirm-stopped while the gate fails (a job never pulled) records "
    "nothing unless the instance id is typed; typed, it records the user's word",
    mutation=(
        "rgt_jupyter/run/teardown.py",
        "    if not gate.passed and typed != gate.machine.platform_id:",
        "    if False:",
    ),
)
def test_confirming_a_stop_the_gate_refuses_needs_the_instance_id(
    project: Path, capsys: pytest.CaptureFixture[str], evidence: Evidence
) -> None:
    """Protection: rgt_jupyter/run/teardown.py ``confirm_guided``: while the gate fails the
    machine's instance id must be typed to record its meter as stopped; removed, a machine
    whose work was never pulled is recorded stopped by a flag, and the case fails.
    """
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "box.toml").write_text(GUIDED)
    assert rgt_main(["up", "box", "--ack-clocks"]) == 0
    connection = "ssh -p 41022 root@connect.westb.seetacloud.com"
    assert rgt_main(["up", "box", "--connection", connection, "--yes"]) == 0
    inst = Registry(project).instances()[0]
    job = submit(
        "import rgt_jupyter.job as job\njob.save_results({'a': 1})\n",
        project,
        name="g",
        profile="box",
    )
    assert job.wait(120) == "finished"
    evidence.keep(Path(job.spec.out_dir))
    typed = inst["platform_id"]
    assert rgt_main(["down", "g", "--override", typed]) == 0  # a guided stop: do it in the console
    capsys.readouterr()
    assert rgt_main(["down", "g", "--confirm-stopped"]) == 2
    err = capsys.readouterr().err
    assert "gate" in err and f"--confirm-stopped --override {typed}" in err, err
    assert Registry(project).instance(inst["id"])["ended_at"] is None
    assert rgt_main(["down", "g", "--confirm-stopped", "--override", typed]) == 0
    assert Registry(project).instance(inst["id"])["ended_at"] is not None
    assert evidence.account(Path(job.spec.out_dir)) == 0
