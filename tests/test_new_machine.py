"""A rented machine is reclaimed mid-run and the job continues on a new one (``rgt resume JOB
--new-machine``): against RunPod's REST API as served by :class:`tests.fakeclouds.RunPodFake`,
whose pods are reached at real loopback sshd "boxes" (the second behind its own port, so its
host key is unknown until trusted), and a real S3 API server (moto) holding the checkpoints.

The machine's disappearance is done for real: the job and its agent are killed with SIGKILL,
every file the machine held is deleted, and the platform forgets the pod (404). A platform that
does not answer is an observation outage: nothing is created or relaunched. A replacement that
does not boot is kept and said so; the next try waits for that one instead of creating another.
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
from rgt_jupyter.api import Job, find
from rgt_jupyter.cli import main as rgt_main
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.store.registry import Registry

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


def test_a_reclaimed_machine_is_replaced_and_the_job_ends_bit_identical(
    project: Path,
    cloud: tuple[RunPodFake, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, remote = cloud
    straight = submit(
        LaunchRequest(
            program=STEPS.replace("not job.is_resume()", "False"),
            name="straight",
            profile="gpu",
            host="pod1",
        ),
        project,
    )
    assert straight.wait(180) == "finished", straight.log()
    expected = straight.result()["w"]

    job = submit(LaunchRequest(program=STEPS, name="cut", profile="gpu", host="pod1"), project)
    assert job.spec.instance_id == "runpod:pod0001xyz"
    wait_for(
        lambda: (control_json(job, "bucket.json") or {}).get("durable_step") == 3,
        180,
        "step 3 in the bucket",
    )
    _reclaimed(job, fake, remote)
    creates = len(fake.calls("POST", "/pods"))
    capsys.readouterr()

    # the platform does not answer: an observation outage, never taken for a preemption
    fake.drop_next = 1000
    assert rgt_main(["resume", "cut", "--new-machine"]) == 2
    assert "is not a lost one: nothing was created or relaunched" in capsys.readouterr().err
    assert len(fake.calls("POST", "/pods")) == creates
    assert Registry(project).get("cut")["id"] == job.id  # nothing relaunched
    fake.drop_next = 0

    # the replacement does not boot: it is kept (recorded, live) and said so
    fake.never_boot = {2}
    assert rgt_main(["resume", "cut", "--new-machine", "--boot-timeout", "2"]) == 2
    err = capsys.readouterr().err
    assert "the replacement runpod:pod0002xyz did not boot within 2 s" in err
    assert "It is kept, and may bill" in err
    live = Registry(project).instances(live_only=True)
    assert [i["id"] for i in live] == ["runpod:pod0002xyz"]
    assert Registry(project).instance("runpod:pod0001xyz")["ended_at"] is not None
    assert Registry(project).get("cut")["id"] == job.id

    # it boots: the next try takes that one (no other is created), trusts its key with consent
    fake.never_boot = set()
    shown: list[str] = []
    found = find("cut", project)
    assert isinstance(found, Job)
    resumed = found.resume_on_new_machine(
        lambda text: shown.append(text) or True, boot_timeout_s=120, interval_s=0.2
    )
    assert len(fake.calls("POST", "/pods")) == creates + 1
    assert fake.calls("POST", "/pods")[-1].body == fake.calls("POST", "/pods")[0].body
    assert resumed.spec.host_alias == "pod1-2" and resumed.spec.instance_id == "runpod:pod0002xyz"
    assert shown and "pod1-2" in shown[0] and "SHA256:" in shown[0]
    assert "Host pod1-2" in Path(os.environ["RGT_SSH_CONFIG"]).read_text()
    assert resumed.spec.resume and resumed.spec.lineage == job.spec.lineage
    assert resumed.spec.code_hash == job.spec.code_hash and not resumed.spec.code_changed
    assert resumed.wait(180) == "finished", resumed.log()
    assert resumed.result() == {"w": expected, "start": 3}  # bit-identical, from the bucket
    assert "restored ckpt-0000000003.pt (step 3) from s3://" in resumed.log()


def test_a_machine_still_there_or_a_job_without_a_bucket_is_not_moved(
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
