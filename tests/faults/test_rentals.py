"""Faults of rented machines and their object-storage tier: a kill mid-upload, a bucket that
refuses writes, wrong credentials (against a real S3 API server, moto's, over HTTP); a
platform that does not answer and a replacement that does not boot (against RunPod's REST API as
served by :class:`tests.fakeclouds.RunPodFake`, its pods the real loopback sshd)."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job, find
from rgt_jupyter.cli import main as rgt_main
from rgt_jupyter.errors import UsageError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.store.registry import Registry
from rgt_jupyter.transport.bucket import complete
from rgt_jupyter.views.render import snapshot_text

from ..conftest import control_json, wait_for
from ..fakeclouds import RunPodFake
from ..s3server import Bucket
from ..test_bucket import LARGE, STEPS, _cfg, _profile, _run
from ..test_new_machine import _reclaimed, cloud, cut_job  # noqa: F401 - the platform and its boxes
from .evidence import Evidence


@pytest.mark.fault(
    "F13-bucket-credentials",
    asserts="a profile naming wrong or unknown bucket credentials is refused before anything "
    "is registered, sent or run, saying which credentials and what to do",
    na="refused before anything exists: no data to lose",
    mutation=(
        "rgt_jupyter/run/launch.py",
        "            check_bucket(bucket)\n",
        "            pass\n",
    ),
)
def test_wrong_credentials_are_refused_before_anything_runs(project: Path, bucket: Bucket) -> None:
    """Protection: rgt_jupyter/run/launch.py checks the bucket with its credentials
    (``check_bucket``) in ``prepare``, before the job is registered; without it the job launches
    and learns only at its first upload that its checkpoints cannot outlive the machine."""
    _profile(project, bucket, credentials="rgt-bad")
    with pytest.raises(UsageError, match="refuses the credentials 'rgt-bad'"):
        _run(project, STEPS, "bad")
    assert Registry(project).jobs() == []
    _profile(project, bucket, credentials="rgt-nobody")
    with pytest.raises(UsageError, match=r"add a \[rgt-nobody\] profile"):
        _run(project, STEPS, "bad")
    assert Registry(project).jobs() == [] and bucket.keys() == []


@pytest.mark.fault(
    "F13-bucket-refuses-writes",
    asserts="a bucket that refuses writes is told to the job (its log) and shown in the view "
    "(checkpoints NOT durable in the bucket); the checkpoints on disk are kept",
    mutation=(
        "rgt_jupyter/remote/job.py",
        '            self._say(uploading=None, error="%s: %s" % (name, why), error_step=step)\n',
        "            self._say(uploading=None)\n",
    ),
)
def test_a_bucket_that_refuses_writes_is_told_to_the_job_and_shown(
    project: Path, bucket: Bucket, evidence: Evidence
) -> None:
    """Protection: rgt_jupyter/remote/job.py: a failed upload is written to ``bucket.json`` with
    its error (``_say(error=...)``), which the view reads; without it the view would go on
    saying nothing of the bucket while no checkpoint reaches it."""
    _profile(project, bucket, credentials="rgt-ro")  # may list and read, not write
    job = _run(project, STEPS.replace("not job.is_resume()", "False"), "ro")
    assert job.wait(120) == "finished", job.log()
    assert "was NOT uploaded to s3://" in job.log() and "refuses writes (AccessDenied)" in job.log()
    status = control_json(job, "bucket.json")
    assert status and status["durable_step"] is None and "AccessDenied" in status["error"]
    text = snapshot_text(job.snapshot())
    assert "NOT durable in the bucket" in text and "AccessDenied" in text
    assert bucket.keys() == []
    assert evidence.keep(job.spec.ckpt_dir) == 4  # the disk's two checkpoints and records
    assert evidence.account(job.spec.ckpt_dir) == 0


@pytest.mark.fault(
    "F13-upload-kill",
    asserts="SIGKILL mid-upload: the incomplete object is never counted complete nor restored; "
    "objects without a record or whose bytes differ from it are skipped, and a new machine "
    "restores the newest complete checkpoint",
    mutation=(
        "rgt_jupyter/remote/job.py",
        "            if _sha256_file(tmp) != want:\n",
        "            if False:\n",
    ),
)
def test_a_kill_mid_upload_never_leaves_a_newer_checkpoint_trusted(
    project: Path, bucket: Bucket, evidence: Evidence
) -> None:
    """Protection: the record is put only after the upload is checked (remote/job.py
    ``_upload``), ``complete`` counts an object only with a matching record, and
    ``_restore_from_bucket`` checks the downloaded bytes against the record before the file
    gets its name; without that check a damaged object is restored as the newest checkpoint."""
    from ..farlink import FarLink  # deferred: only this case needs the slow link

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
    s3 = bucket.server.client()
    name, prefix = bucket.name, lineage.split("/", 3)[3]
    evidence.keep_bytes(
        s3.get_object(Bucket=name, Key=f"{prefix}/ckpt-0000000001.pt")["Body"].read(),
        "ckpt-0000000001.pt in the bucket",
    )

    # what other tools can leave: a newer object without a record, and one whose record does
    # not match its bytes; neither is trusted, by this side or by the job's load_latest
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
    evidence.corrupt_trusted = int("got 1" not in log)
    assert "got 1" in log
    assert evidence.account(resumed.spec.ckpt_dir) == 0


@pytest.mark.fault(
    "F14-observe-outage",
    asserts="a platform that does not answer is an observation outage, never a preemption: "
    "`rgt resume --new-machine` creates nothing and relaunches nothing, and says why",
    na="nothing is created or moved: the bucket's checkpoints are untouched",
    mutation=(
        "rgt_jupyter/run/replace.py",
        '        seen = provider.status(old["platform_id"])\n    except ProviderError as exc:\n',
        '        seen = provider.status(old["platform_id"])\n    except ProviderError:\n'
        '        return provider.gone(old["platform_id"])\n    except KeyError as exc:\n',
    ),
)
def test_an_observation_outage_never_moves_a_job(
    project: Path,
    cloud: tuple[RunPodFake, Path],  # noqa: F811 - the fixture imported above
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Protection: rgt_jupyter/run/replace.py ``_confirm_gone`` refuses on any failure to ask
    the platform; only its word that the machine is gone (404) lets a replacement be created.
    Taking a failed look for a gone machine would pay for a second machine while the first
    may still run the job."""
    fake, remote = cloud
    job = cut_job(project, fake, remote)
    creates = len(fake.calls("POST", "/pods"))
    capsys.readouterr()
    fake.drop_next = 1000  # every GET goes unanswered
    assert rgt_main(["resume", "cut", "--new-machine"]) == 2
    assert "is not a lost one: nothing was created or relaunched" in capsys.readouterr().err
    assert len(fake.calls("POST", "/pods")) == creates
    assert Registry(project).get("cut")["id"] == job.id  # nothing relaunched
    assert Registry(project).instance("runpod:pod0001xyz")["ended_at"] is None


@pytest.mark.fault(
    "F14-replacement-no-boot",
    asserts="a replacement that does not boot is kept (recorded live, said to bill) and the "
    "next try waits for that one, creating no other; once it boots, the job continues there "
    "from the bucket and ends bit-identical to an uninterrupted run",
    na="the checkpoints are the bucket's; the end state is checked bit-identical instead",
    mutation=(
        "rgt_jupyter/run/replace.py",
        '        if row["data"].get("replaces") == old["id"]:\n',
        "        if False:\n",
    ),
)
def test_a_replacement_that_does_not_boot_is_kept_and_waited_for(
    project: Path,
    cloud: tuple[RunPodFake, Path],  # noqa: F811 - the fixture imported above
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Protection: rgt_jupyter/run/replace.py ``_replacement`` takes the live replacement
    already created for the gone machine before creating one; without it every try after a
    slow boot pays for one more machine."""
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
    job = cut_job(project, fake, remote)
    creates = len(fake.calls("POST", "/pods"))
    capsys.readouterr()

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
