"""A rented machine is reclaimed mid-run and the job continues on a new one (``rgt resume JOB
--new-machine``): against RunPod's REST API as served by :class:`tests.fakeclouds.RunPodFake`,
whose pods are reached at real loopback sshd "boxes" (the second behind its own port, so its
host key is unknown until trusted), and a real S3 API server (moto) holding the checkpoints.

The machine's disappearance is done for real: the job and its agent are killed with SIGKILL,
every file the machine held is deleted, and the platform forgets the pod (404). A platform that
does not answer is an observation outage: nothing is created or relaunched. A replacement that
does not boot is kept and said so; the next try waits for that one instead of creating another.
Those faults, and the continuation on the replacement, are cases of the fault matrix
(``tests/faults/test_rentals.py``); this file holds the machines and what is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.cli import main as rgt_main
from rgt_jupyter.jobs.request import LaunchRequest

from .conftest import control_json, wait_for
from .fakeclouds import RunPodFake
from .faultproxy import FaultProxy
from .s3server import Bucket
from .sshbox import close_connections
from .sshd import Sshd
from .test_bucket import STEPS

PROFILE = """\
extends = "runpod"
name = "gpu"
smoke_default = false
grace_s = 20.0
python = "{python}"
workdir = "{remote}/jobs"
durable_dir = "{remote}/durable"
scratch_dir = "{remote}/scratch"
"""


@pytest.fixture
def cloud(
    sshd: Sshd,
    project: Path,
    bucket: Bucket,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[RunPodFake, Path]]:
    """The platform, its two boxes, the ``gpu`` profile (checkpoints also in the bucket), and
    ``pod1``: the first pod, brought up with ``rgt up`` and its Host block written."""
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {sshd.host_pub}\n")
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host pod1\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n"
        f"  IdentityFile {sshd.user_key}\n  UserKnownHostsFile {known}\n"
    )
    monkeypatch.setenv("RGT_SSH_CONFIG", str(config))
    remote = tmp_path / "machine"
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True)
    text = PROFILE.format(python=sys.executable, remote=remote) + bucket.table()
    (profiles / "gpu.toml").write_text(text)
    with FaultProxy(sshd.port) as second, RunPodFake() as fake:
        fake.boxes = [("127.0.0.1", sshd.port), ("127.0.0.1", second.port)]
        monkeypatch.setenv("RUNPOD_API_KEY", fake.api_key)
        monkeypatch.setenv("RGT_RUNPOD_API_URL", fake.url)
        assert rgt_main(["up", "gpu", "--ack-clocks", "--yes", "--host", "pod1"]) == 0
        yield fake, remote
    close_connections(project)


def _reclaimed(job: Job, fake: RunPodFake, remote: Path) -> None:
    """The machine goes away at once, as a spot reclaim does: processes killed, disk gone, the
    platform no longer knows the pod."""
    status = json.loads((Path(job.spec.control_dir) / "status.json").read_text())
    for pid in (status["job_pid"], status["agent_pid"]):
        try:
            os.killpg(os.getpgid(int(pid)), signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(remote)
    fake.preempt(str(job.spec.instance_id).split(":", 1)[1])


def cut_job(project: Path, fake: RunPodFake, remote: Path) -> Job:
    """A job on pod1 whose checkpoint of step 3 reached the bucket; then pod1 is reclaimed."""
    job = submit(LaunchRequest(program=STEPS, name="cut", profile="gpu", host="pod1"), project)
    wait_for(
        lambda: (control_json(job, "bucket.json") or {}).get("durable_step") == 3,
        180,
        "step 3 in the bucket",
    )
    _reclaimed(job, fake, remote)
    return job


def test_a_machine_the_platform_still_lists_is_not_moved(
    project: Path,
    cloud: tuple[RunPodFake, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake, _remote = cloud
    job = submit(LaunchRequest(program=STEPS, name="kept", profile="gpu", host="pod1"), project)
    wait_for(lambda: control_json(job, "bucket.json"), 180, "the job's first upload")
    capsys.readouterr()
    assert rgt_main(["resume", "kept", "--new-machine"]) == 2
    err = capsys.readouterr().err
    assert "says runpod:pod0001xyz is" in err and "not gone: the job is not moved" in err
    assert len(fake.calls("POST", "/pods")) == 1
    job.stop()
    assert job.wait(180) == "preempted"


def _auto(project: Path, host_key: Path | None) -> None:
    """The ``gpu`` profile in the automatic mode, with the host key its image carries."""
    profile = project / ".rgt" / "profiles" / "gpu.toml"
    pin = f'host_key = "{host_key}"\n' if host_key else ""
    profile.write_text(profile.read_text() + f'\n[up]\nnew_machine = "auto"\n{pin}')


def test_in_the_automatic_mode_the_watcher_moves_a_job_whose_machine_is_gone(
    project: Path, cloud: tuple[RunPodFake, Path], sshd: Sshd, tmp_path: Path
) -> None:
    """[up] new_machine = "auto": the watcher that sees the job lost asks the platform, which
    says the pod is gone; a replacement is made, its host key checked against the pinned one
    (no question asked), and the job goes on there from the bucket."""
    from rgt_jupyter.run.watch.watcher import watcher  # deferred: this test's watcher only
    from rgt_jupyter.store.registry import Registry  # deferred: this test only

    fake, remote = cloud
    pinned = tmp_path / "image_host_key.pub"
    pinned.write_text(sshd.host_pub + "\n")
    _auto(project, pinned)
    job = cut_job(project, fake, remote)
    watcher().follow(job)
    registry = Registry(project)
    row = wait_for(
        lambda: (r := registry.get("cut"))["id"] != job.id and r,
        90,
        f"the automatic new machine: {registry.history(job.id)[-3:]} {job.snapshot(log_lines=0)}",
    )
    moved = Job(row, project)
    assert moved.spec.instance_id == "runpod:pod0002xyz" and moved.spec.host_alias == "pod1-2"
    assert moved.spec.resume and moved.spec.lineage == job.spec.lineage
    assert moved.wait(180) == "finished", moved.log()
    assert moved.result()["start"] == 3  # it went on from the bucket's step 3
    trusted = (project / ".rgt" / "trusted_hosts.jsonl").read_text().splitlines()
    assert json.loads(trusted[-1])["trusted_by"] == "the profile's pinned host key"


def test_the_automatic_mode_without_a_pinned_key_trusts_nothing_and_moves_nothing(
    project: Path, cloud: tuple[RunPodFake, Path]
) -> None:
    from rgt_jupyter.run.replace import replace_if_gone  # deferred: this test only
    from rgt_jupyter.store.registry import Registry  # deferred: this test only

    fake, remote = cloud
    _auto(project, None)
    job = cut_job(project, fake, remote)
    assert replace_if_gone(job.spec, project) == "refused"
    assert len(fake.calls("POST", "/pods")) == 1  # nothing created
    events = [
        e for e in Registry(project).history(job.id) if e["kind"] == "auto_new_machine_refused"
    ]
    assert events and "needs [up] host_key" in json.dumps(events[-1])
