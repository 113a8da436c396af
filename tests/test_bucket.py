"""Checkpoints in object storage, against a real S3 API server (moto's server mode, IAM
enforced) spoken to over HTTP by boto3 on both sides: each checkpoint is uploaded with its
sha256 record once durable on disk, counts only once its upload is checked, and a job with an
empty checkpoint dir (a new machine) continues from the bucket."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.errors import PullError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.teardown import compute_gate
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
    gate = compute_gate(Registry(project).get(job.id), project)  # what outlives the machine
    assert any(f"checkpoint of step 3 in {lineage}" in line for line in gate.survives)
    assert f"checkpoint of step 3 in {lineage} (its upload verified)" in gate.text()

    # the machine is gone with its disk: only the bucket holds the checkpoints
    shutil.rmtree(job.spec.ckpt_dir)
    resumed = job.resume()
    assert resumed.wait(120) == "finished", resumed.log()
    assert resumed.result() == {"w": expected, "start": 3}
    assert "restored ckpt-0000000003.pt (step 3) from s3://" in resumed.log()
    steps = [c.step for c in complete(_cfg(bucket), lineage)]
    assert steps[-1] == 6 and len(steps) <= 2, resumed.log()


def test_a_job_whose_machine_is_gone_is_pulled_from_its_bucket_verified(
    project: Path, bucket: Bucket
) -> None:
    """The machine and its disks are gone; `%pull --from-bucket` brings home the newest complete
    checkpoint, checked against its record and loaded, and says that the outputs are not in it.
    A damaged copy in the bucket is refused, not kept."""
    _profile(project, bucket)
    job = _run(project, STEPS.replace("not job.is_resume()", "False"), "gone")
    assert job.wait(120) == "finished", job.log()
    lineage = job.spec.bucket["lineage_url"]
    wait_for(lambda: [c.step for c in complete(_cfg(bucket), lineage)][-1:] == [6], 60, "step 6")
    for path in (job.spec.ckpt_dir, job.spec.out_dir, job.spec.control_dir):
        shutil.rmtree(path, ignore_errors=True)  # the machine's disk, gone with it
    run = job.pull(from_bucket=True)
    assert run.verified, run.text()
    assert [r["path"] for r in run.verification["checkpoint_loads"]] == [
        "checkpoints/ckpt-0000000006.pt"
    ]
    assert run.verification["checkpoint_loads"][0]["ok"]
    assert run.provenance["source"]["kind"] == "bucket"
    assert "from the bucket (step 6)" in run.text(), run.text()
    assert "outputs ($RGT_OUT) were on its machine" in run.provenance["source"]["note"]
    assert Registry(project).runs(job.id)[-1]["path"] == str(run.path)

    # The newest object damaged in place (same size and stated sha256): refused, nothing kept.
    s3 = bucket.server.client()
    newest = complete(_cfg(bucket), lineage)[-1]
    body = bytearray(s3.get_object(Bucket=bucket.name, Key=newest.key)["Body"].read())
    body[-1] ^= 0xFF
    s3.put_object(
        Bucket=bucket.name, Key=newest.key, Body=bytes(body), Metadata={"sha256": newest.sha256}
    )
    with pytest.raises(PullError, match="does not match its sha256 record"):
        job.pull(from_bucket=True)
    assert len(Registry(project).runs(job.id)) == 1


def test_a_job_without_a_bucket_is_not_pulled_from_one(project: Path) -> None:
    job = submit(LaunchRequest(program="print(1)", name="plain"), project)
    assert job.wait(60) == "finished"
    with pytest.raises(PullError, match="has no bucket"):
        job.pull(from_bucket=True)
