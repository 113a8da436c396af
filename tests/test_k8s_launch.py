"""``%%remote_run --profile <kubernetes>``: submit, watch and delete through the official client,
against a local HTTP server that speaks the batch/v1 and core/v1 subset used (no cluster can run
here)."""

from __future__ import annotations

import base64
import io
import json
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.backends.k8s.manifests import K8sJobSpec, render_job
from rgt_jupyter.errors import UsageError
from rgt_jupyter.jobs.request import LaunchRequest

from .conftest import run_cell
from .fakek8s import FakeK8s

IMAGE = "registry.example/train@sha256:" + "ab" * 32
PROGRAM = "import rgt_jupyter.job as job\njob.save_results({'ok': 1})\n"


@pytest.fixture
def kube(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeK8s]:
    """The fake API server, a kubeconfig that reaches it, and a project profile ``kube``."""
    with FakeK8s() as fake:
        monkeypatch.setenv("KUBECONFIG", str(fake.write_kubeconfig(tmp_path / "kubeconfig")))
        profiles = project / ".rgt" / "profiles"
        profiles.mkdir(parents=True)
        (profiles / "kube.toml").write_text(
            'name = "kube"\nextends = "k8s"\nsmoke_default = false\n'
            f'[kubernetes]\nimage = "{IMAGE}"\npvc = "ckpt"\nnamespace = "default"\n'
        )
        yield fake


def test_cell_is_submitted_watched_and_its_body_is_the_rendered_manifest(
    ip: Any, project: Path, kube: FakeK8s, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret-77aa")
    result, text = run_cell(
        ip, f"%%remote_run --profile kube --name kjob --secret WANDB_API_KEY\n{PROGRAM}"
    )
    assert result.error_in_exec is None, text
    job: Job = result.result
    spec = job.spec
    assert spec.launcher == "k8s-job" and spec.namespace == "default"
    assert spec.control_dir.startswith("/checkpoints/rgt/proj/jobs/")
    [post] = kube.calls("POST", "/apis/batch/v1/namespaces/default/jobs")
    expected = render_job(
        K8sJobSpec(
            job_id=spec.job_id,
            name="kjob",
            image=IMAGE,
            namespace="default",
            python="python3",
            control_dir=spec.control_dir,
            pvc="ckpt",
            gpus=0,
            grace_s=30,
        )
    )
    assert post.body == expected
    command = post.body["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command == ["python3", "-u", "/rgt/bundle/bundle.zip", "run", spec.control_dir]
    assert "wandb-secret-77aa" not in json.dumps(post.body)
    [secret_post] = kube.calls("POST", "/api/v1/namespaces/default/secrets")
    bundle = base64.b64decode(secret_post.body["data"]["bundle.zip"])
    with zipfile.ZipFile(io.BytesIO(bundle)) as zf:
        assert json.loads(zf.read("launch.json"))["job_id"] == spec.job_id
        assert json.loads(zf.read("secrets.json")) == {"WANDB_API_KEY": "wandb-secret-77aa"}
        assert (zf.getinfo("secrets.json").external_attr >> 16) & 0o777 == 0o600
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        snap = job.snapshot()
        if not seen or seen[-1] != snap.state:
            seen.append(snap.state)
        if snap.terminal:
            break
        time.sleep(0.2)
    assert seen[0] == "queued" and "running" in seen and seen[-1] == "finished", seen
    assert snap.scheduler is not None and snap.scheduler.startswith("Kubernetes Job ")


def test_stop_deletes_the_job_and_its_pods(project: Path, kube: FakeK8s) -> None:
    job = submit(LaunchRequest(program=PROGRAM, name="gone", profile="kube"), project)
    assert job.snapshot().state == "queued"
    job.stop()
    [delete] = kube.calls("DELETE", f"/apis/batch/v1/namespaces/default/jobs/{job.spec.k8s_job}")
    assert delete.query.get("propagationPolicy") == ["Background"] or (
        (delete.body or {}).get("propagationPolicy") == "Background"
    )
    assert kube.pods_of("default", job.spec.k8s_job) == []
    assert not kube.secrets
    again = Job.from_registry("gone", project)
    assert again.snapshot().state == "preempted"


def test_a_kubernetes_profile_without_image_or_claim_is_refused(project: Path) -> None:
    with pytest.raises(UsageError, match="image and pvc"):
        submit(LaunchRequest(program=PROGRAM, name="x", profile="k8s"), project)


def test_push_is_refused_on_kubernetes(project: Path, kube: FakeK8s) -> None:
    (project / "data.txt").write_text("x")
    with pytest.raises(UsageError, match="baked into its image"):
        submit(LaunchRequest(program=PROGRAM, name="p", profile="kube", push=["data.txt"]), project)
    assert kube.calls("POST") == []
