"""Checkpoints in object storage, against a real S3 API server (moto's server mode, IAM
enforced) spoken to over HTTP by boto3 on both sides: each checkpoint is uploaded with its
sha256 record once durable on disk, counts only once its upload is checked, and a job with an
empty checkpoint dir (a new machine) continues from the bucket."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.errors import UsageError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.store.registry import Registry
from rgt_jupyter.transport.bucket import BucketConfig, complete
from rgt_jupyter.views.render import snapshot_text

from .conftest import control_json, wait_for
from .machines import ON_THIS_MACHINE
from .s3server import Bucket

#: Six steps of a small model, a checkpoint a step; waits at step 3 on the first attempt until
#: told to go on (or is stopped there). Its result depends on every step's state and RNG.
STEPS = """\
import os, time
import torch
import rgt_jupyter.job as job
torch.manual_seed(0)
state = job.load_latest()
w = state["w"] if state else torch.zeros(4)
start = int(state["step"]) if state else 0
for step in range(start + 1, 7):
    w = w * 0.9 + torch.randn(4)
    job.save_checkpoint({"w": w, "step": step}, step, keep=2)
    job.progress(step, 6)
    if step == 3 and not job.is_resume():
        go = os.path.join(os.environ["RGT_OUT"], "..", "go")
        while not os.path.exists(go) and not job.preempted():
            time.sleep(0.05)
        if job.preempted():
            raise SystemExit(0)
job.save_results({"w": [round(float(x), 6) for x in w], "start": start})
"""

#: One small checkpoint, then a large one, then waits (to be killed while it uploads).
LARGE = """\
import time
import torch
import rgt_jupyter.job as job
job.save_checkpoint({"w": torch.ones(4), "step": 1}, 1)
job.wait_for_uploads()
job.save_checkpoint({"w": torch.randn(12 << 20), "step": 2}, 2)
while True:
    time.sleep(1)
"""


def _profile(
    project: Path, bucket: Bucket, credentials: str = "rgt-rw", endpoint: str = ""
) -> None:
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    # RunPod's container disk does not outlive the pod: the bucket is the durable tier
    head = 'extends = "runpod"\nname = "s3box"\ngrace_s = 20.0\n'
    text = head + ON_THIS_MACHINE + bucket.table(credentials, endpoint or None)
    (profiles / "s3box.toml").write_text(text.format(project=project))


def _run(project: Path, program: str, name: str, **kw: object) -> Job:
    return submit(LaunchRequest(program=program, name=name, profile="s3box", **kw), project)  # type: ignore[arg-type]


def _cfg(bucket: Bucket) -> BucketConfig:
    return BucketConfig(bucket.url, bucket.server.endpoint, "rgt-rw", "us-east-1")


def test_checkpoints_reach_the_bucket_and_a_new_machine_continues_from_it_bit_identical(
    project: Path, bucket: Bucket
) -> None:
    _profile(project, bucket)
    straight = _run(project, STEPS.replace("not job.is_resume()", "False"), "straight")
    assert straight.wait(120) == "finished", straight.log()
    expected = straight.result()["w"]

    job = _run(project, STEPS, "cut")
    assert job.spec.bucket and job.spec.bucket["lineage_url"].startswith(bucket.url + "/cut/")
    assert "RGT_BUCKET_SECRET_KEY" in job.spec.secret_names  # credentials as secrets, by name
    assert all("SECRET" not in k for k in job.spec.env) and bucket.server.keys["rw"][
        1
    ] not in json.dumps(job.spec.to_dict())
    wait_for(
        lambda: (control_json(job, "bucket.json") or {}).get("durable_step") == 3,
        120,
        "step 3 in the bucket",
    )
    lineage = job.spec.bucket["lineage_url"]
    # the newest is there; one saved while another uploaded may be skipped; keep=2, as on disk
    steps = [c.step for c in complete(_cfg(bucket), lineage)]
    assert steps[-1] == 3 and len(steps) <= 2
    snap = job.snapshot()
    assert "durable in the bucket" in snapshot_text(snap) and "step 3" in snapshot_text(snap)
    job.stop()
    assert job.wait(120) == "preempted"

    # the machine is gone with its disk: only the bucket holds the checkpoints
    shutil.rmtree(job.spec.ckpt_dir)
    resumed = job.resume()
    assert resumed.wait(120) == "finished", resumed.log()
    assert resumed.result() == {"w": expected, "start": 3}
    assert "restored ckpt-0000000003.pt (step 3) from s3://" in resumed.log()
    steps = [c.step for c in complete(_cfg(bucket), lineage)]
    assert steps[-1] == 6 and len(steps) <= 2, resumed.log()


def test_wrong_credentials_are_refused_before_anything_runs(project: Path, bucket: Bucket) -> None:
    _profile(project, bucket, credentials="rgt-bad")
    with pytest.raises(UsageError, match="refuses the credentials 'rgt-bad'"):
        _run(project, STEPS, "bad")
    assert Registry(project).jobs() == []
    _profile(project, bucket, credentials="rgt-nobody")
    with pytest.raises(UsageError, match=r"add a \[rgt-nobody\] profile"):
        _run(project, STEPS, "bad")
    assert Registry(project).jobs() == [] and bucket.keys() == []


def test_a_bucket_that_refuses_writes_is_told_to_the_job_and_shown(
    project: Path, bucket: Bucket
) -> None:
    _profile(project, bucket, credentials="rgt-ro")  # may list and read, not write
    job = _run(project, STEPS.replace("not job.is_resume()", "False"), "ro")
    assert job.wait(120) == "finished", job.log()
    assert "was NOT uploaded to s3://" in job.log() and "refuses writes (AccessDenied)" in job.log()
    status = control_json(job, "bucket.json")
    assert status and status["durable_step"] is None and "AccessDenied" in status["error"]
    text = snapshot_text(job.snapshot())
    assert "NOT durable in the bucket" in text and "AccessDenied" in text
    assert bucket.keys() == []
    assert len(list(Path(job.spec.ckpt_dir).glob("ckpt-*.pt"))) == 2  # the disk's are kept


def test_a_kill_mid_upload_never_leaves_a_newer_checkpoint_trusted(
    project: Path, bucket: Bucket
) -> None:
    from .farlink import FarLink

    port = int(bucket.server.endpoint.rsplit(":", 1)[1])
    with FarLink(port, delay_s=0.005, rate=2e6) as slow:  # 48 MiB takes ~25 s: killed within
        _profile(project, bucket, endpoint=f"http://127.0.0.1:{slow.port}")
        job = _run(project, LARGE, "kill")
        wait_for(
            lambda: (
                (control_json(job, "bucket.json") or {}).get("uploading") == "ckpt-0000000002.pt"
            ),
            120,
            "the large checkpoint's upload to start",
        )
        status = json.loads((Path(job.spec.control_dir) / "status.json").read_text())
        os.killpg(os.getpgid(int(status["job_pid"])), signal.SIGKILL)
        wait_for(lambda: job.snapshot().terminal, 120, "the killed job to end")
    lineage = str(job.spec.bucket["lineage_url"])  # type: ignore[index]
    assert [c.step for c in complete(_cfg(bucket), lineage)] == [1]
    assert not any(k.endswith("ckpt-0000000002.pt.sha256") for k in bucket.keys())

    # what other tools can leave: a newer object without a record, and one whose record does
    # not match its bytes; neither is trusted, by this side or by the job's load_latest
    s3 = bucket.server.client()
    name, prefix = bucket.name, lineage.split("/", 3)[3]
    s3.put_object(Bucket=name, Key=f"{prefix}/ckpt-0000000004.pt", Body=b"half a checkpoint")
    s3.put_object(
        Bucket=name,
        Key=f"{prefix}/ckpt-0000000003.pt",
        Body=b"not these bytes",
        Metadata={"sha256": "0" * 64},
    )
    s3.put_object(
        Bucket=name,
        Key=f"{prefix}/ckpt-0000000003.pt.sha256",
        Body=("0" * 64 + "  ckpt-0000000003.pt\n").encode(),
    )
    assert [c.step for c in complete(_cfg(bucket), lineage)] == [1, 3]  # size/metadata agree...
    shutil.rmtree(job.spec.ckpt_dir)
    _profile(project, bucket)  # the slow link is gone: the resume reaches the bucket directly
    resumed = _run(
        project, "import rgt_jupyter.job as job\nprint('got', job.load_latest()['step'])\n", "kill"
    )
    assert resumed.wait(120) == "finished", resumed.log()
    log = resumed.log()
    assert "skipping ckpt-0000000004.pt in the bucket: no record" in log
    assert (
        "skipping ckpt-0000000003.pt in the bucket: bytes do not match its record" in log
    )  # ...bytes do not
    assert "got 1" in log
