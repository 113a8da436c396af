"""Kubernetes Jobs: the rendered manifest (golden), hostile names, and the client against a local
fake of the Kubernetes REST API reached through a kubeconfig."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter.backends.k8s.client import K8sJobs, K8sState, job_state
from rgt_jupyter.backends.k8s.manifests import (
    ID_ANNOTATION,
    MAX_BUNDLE_BYTES,
    K8sJobSpec,
    k8s_name,
    render_bundle_secret,
    render_job,
)
from rgt_jupyter.errors import LaunchError, TransportError, UsageError

from .fakek8s import FakeK8s, Script
from .httpfake import Recorded

GOLDEN = Path(__file__).parent / "golden" / "k8s_job.json"
NS = "ml"
DIGEST = "sha256:" + "0123456789abcdef" * 4
IMAGE = f"registry.example.com/lab/train@{DIGEST}"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
BUNDLE = b"PK\x03\x04 launch bundle with secrets.json: hf_token=hf_s3cr3t_value\x00\xff"

GOLDEN_SPEC = K8sJobSpec(
    job_id="Train.v2_0001",
    name="train v2",
    image=IMAGE,
    namespace=NS,
    control_dir="/checkpoints/rgt/proj/jobs/Train.v2_0001",
    pvc="rgt-checkpoints",
    gpus=2,
    cpu="8",
    memory="32Gi",
    active_deadline_s=86400,
    labels={"team": "vision"},
)


def spec(**changes: Any) -> K8sJobSpec:
    return dataclasses.replace(GOLDEN_SPEC, **changes)


def container(manifest: dict[str, Any]) -> dict[str, Any]:
    containers = manifest["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


# -- rendering ---------------------------------------------------------------------------------


def test_job_manifest_golden() -> None:
    """The exact manifest for a fixed spec; regenerate with RGT_UPDATE_GOLDEN=1 (never in CI)."""
    text = json.dumps(render_job(GOLDEN_SPEC), indent=2, sort_keys=True) + "\n"
    if os.environ.get("RGT_UPDATE_GOLDEN"):
        assert not os.environ.get("CI"), "RGT_UPDATE_GOLDEN rewrites golden files: not in CI"
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


@pytest.mark.parametrize(
    "ids",
    [
        ["run-1", "Run-1", "run.1", "run_1", "RUN_1", "run-1-"],
        ["a" * 63, "a" * 64, "A" * 64, "a" * 62 + "_b", "x." * 40 + "y"],
        ["0", "A", "9.9.9", "Z_z-Z.z", "z-z-z-z"],
    ],
)
def test_hostile_job_ids_get_valid_distinct_names(ids: list[str]) -> None:
    names = [k8s_name(i) for i in ids]
    for job_id, name in zip(ids, names, strict=True):
        assert len(name) <= 63 and DNS_LABEL.fullmatch(name), (job_id, name)
        assert k8s_name(job_id) == name  # deterministic
        manifest = render_job(spec(job_id=job_id))
        assert manifest["metadata"]["name"] == name
        assert manifest["metadata"]["annotations"][ID_ANNOTATION] == job_id
        assert manifest["spec"]["template"]["metadata"]["annotations"][ID_ANNOTATION] == job_id
        assert render_bundle_secret(spec(job_id=job_id), b"x")["metadata"]["name"] == (
            f"{name}-bundle"
        )
    assert len(set(names)) == len(names)
    assert k8s_name("run-1") == "run-1"  # a valid name is kept as is


def test_invalid_job_id_refused() -> None:
    for bad in ("_x", "a b", "a/b", "a\nb"):
        with pytest.raises(UsageError, match="job id"):
            render_job(spec(job_id=bad))


@pytest.mark.parametrize(
    "control_dir",
    [
        "/checkpoints/rgt/my proj/jobs/a b",
        '/checkpoints/rgt/it\'s "quoted"/jobs/x',
        "/checkpoints/rgt/$(touch /tmp/pwned)/`id`/jobs/x",
        "/checkpoints/rgt/a;rm -rf ~;/jobs/x & echo | cat",
        "/checkpoints/rgt/ünï/jobs/\t*?[x]",
    ],
)
def test_hostile_control_dirs_passed_exactly(control_dir: str) -> None:
    manifest = render_job(spec(control_dir=control_dir))
    command = container(manifest)["command"]
    assert command == ["python3", "-u", "/rgt/bundle/bundle.zip", "run", control_dir]
    assert json.loads(json.dumps(manifest)) == manifest


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"control_dir": "/checkpoints/rgt/a\nb"}, "control_dir"),
        ({"control_dir": "/checkpoints/rgt/a\x00b"}, "control_dir"),
        ({"control_dir": "checkpoints/rgt/x"}, "control_dir"),
        ({"control_dir": "/root/rgt/x"}, "control_dir"),
        ({"control_dir": "/checkpoints/../root/x"}, "control_dir"),
        ({"pvc_mount": "data"}, "pvc_mount"),
        ({"pvc_mount": "/"}, "pvc_mount"),
        ({"namespace": "ML"}, "namespace"),
        ({"namespace": "my_ns"}, "namespace"),
        ({"namespace": "-ml"}, "namespace"),
        ({"namespace": "a" * 64}, "namespace"),
        ({"pvc": "Bad_PVC"}, "pvc"),
        ({"pvc": "ckpt "}, "pvc"),
        ({"service_account": "Trainer"}, "service_account"),
        ({"image": "registry.example.com/lab/train:v2"}, "image"),
        ({"image": "train"}, "image"),
        ({"image": f"registry.example.com/lab/train@{DIGEST} "}, "image"),
        ({"image": f"registry.example.com/lab train@{DIGEST}"}, "image"),
        ({"image": f"train@{DIGEST}\n"}, "image"),
        ({"image": "train@sha256:" + "A" * 64}, "image"),
        ({"labels": {"Team Name": "v"}}, "label key"),
        ({"labels": {"team": "computer vision"}}, "label value"),
        ({"labels": {"team": "x" * 64}}, "label value"),
        ({"labels": {"app.kubernetes.io/managed-by": "me"}}, "label key"),
        ({"labels": {"rgt-jupyter/job": "other"}}, "label key"),
        ({"labels": {"Example.com/team": "v"}}, "label key"),
        ({"gpus": -1}, "gpus"),
        ({"memory": "32 GB"}, "memory"),
        ({"scratch_size": "lots"}, "scratch_size"),
        ({"backoff_limit": -1}, "backoff_limit"),
        ({"active_deadline_s": 0}, "active_deadline_s"),
        ({"python": "python3\n"}, "python"),
    ],
)
def test_bad_fields_refused_by_name(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(UsageError, match=re.escape(field)) as caught:
        render_job(spec(**changes))
    if field == "image" and "train:" in str(changes["image"]):
        assert "digest" in str(caught.value)


def test_gpus_only_in_limits_and_settings_from_spec() -> None:
    manifest = render_job(spec(gpus=4, grace_s=120, backoff_limit=7, cpu=None, memory=None))
    resources = container(manifest)["resources"]
    assert resources == {"limits": {"nvidia.com/gpu": "4"}}
    pod = manifest["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 120
    assert pod["restartPolicy"] == "Never"
    assert manifest["spec"]["backoffLimit"] == 7
    assert "activeDeadlineSeconds" not in render_job(spec(active_deadline_s=None))["spec"]
    cpu_only = render_job(spec(gpus=0))
    assert "nvidia.com/gpu" not in json.dumps(cpu_only)
    both = container(render_job(spec(cpu="500m", memory="8Gi")))["resources"]
    assert both["requests"] == {"cpu": "500m", "memory": "8Gi"}
    assert "nvidia.com/gpu" not in both["requests"]


def test_no_secret_in_env_command_or_labels() -> None:
    manifest = render_job(GOLDEN_SPEC)
    c = container(manifest)
    assert c["env"] == [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "RGT_K8S", "value": "1"},
    ]
    assert "hf_s3cr3t_value" not in json.dumps(manifest)
    secret = render_bundle_secret(GOLDEN_SPEC, BUNDLE)
    assert base64.b64decode(secret["data"]["bundle.zip"]) == BUNDLE
    assert "hf_s3cr3t_value" not in json.dumps(secret["metadata"])
    assert secret["type"] == "Opaque" and secret["metadata"]["name"] == (
        f"{k8s_name(GOLDEN_SPEC.job_id)}-bundle"
    )
    volume = manifest["spec"]["template"]["spec"]["volumes"][2]["secret"]
    assert volume["defaultMode"] == 0o400 == 256
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/rgt/bundle"]["readOnly"] is True and "/scratch" in mounts


def test_big_bundle_refused() -> None:
    render_bundle_secret(GOLDEN_SPEC, b"x" * MAX_BUNDLE_BYTES)
    with pytest.raises(UsageError, match="into the image"):
        render_bundle_secret(GOLDEN_SPEC, b"x" * (MAX_BUNDLE_BYTES + 1))


def test_import_stays_cheap() -> None:
    code = "import sys, rgt_jupyter.backends.k8s; assert 'kubernetes' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- against the fake API server -----------------------------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeK8s]:
    server = FakeK8s().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kubeconfig(fake: FakeK8s, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = fake.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS)
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


@pytest.fixture
def k8s(kubeconfig: Path) -> K8sJobs:
    return K8sJobs(NS, timeout=(2.0, 5.0))


def header(rec: Recorded, name: str) -> str | None:
    return next((v for k, v in rec.headers.items() if k.lower() == name.lower()), None)


def poll(k8s: K8sJobs, name: str, until: set[str], limit: int = 30) -> list[K8sState]:
    seen = []
    for _ in range(limit):
        state = k8s.states([name])[name]
        seen.append(state)
        if state.state in until:
            return seen
    raise AssertionError(f"{name} never reached {until}: {seen}")


def test_submit_watch_logs_delete(fake: FakeK8s, k8s: K8sJobs) -> None:
    result = k8s.submit(GOLDEN_SPEC, BUNDLE)
    name = k8s_name(GOLDEN_SPEC.job_id)
    assert result == {"k8s_job": name, "namespace": NS, "uid": result["uid"]} and result["uid"]

    writes = [r for r in fake.requests if r.method != "GET"]
    assert [(r.method, r.path) for r in writes] == [
        ("POST", f"/api/v1/namespaces/{NS}/secrets"),
        ("POST", f"/apis/batch/v1/namespaces/{NS}/jobs"),
        ("PATCH", f"/api/v1/namespaces/{NS}/secrets/{name}-bundle"),
    ]
    assert writes[1].body == json.loads(GOLDEN.read_text())
    assert base64.b64decode(writes[0].body["data"]["bundle.zip"]) == BUNDLE
    patch = writes[2]
    assert header(patch, "Content-Type") == "application/strategic-merge-patch+json"
    owners = fake.secrets[(NS, f"{name}-bundle")]["metadata"]["ownerReferences"]
    assert owners == [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": result["uid"]}]
    assert all(header(r, "Authorization") == f"Bearer {fake.token}" for r in fake.requests)

    fake.logs[name] = "".join(f"step {i}\n" for i in range(1, 101))
    assert k8s.logs(name) == ""  # no pod yet
    seen = poll(k8s, name, {"finished"})
    assert [s.state for s in seen] == ["queued", "running", "finished"]
    assert seen[0].phase == "Pending" and seen[0].pod and seen[0].reason == "ContainerCreating"
    assert seen[1].phase == "Running" and seen[1].pod == seen[0].pod
    assert seen[2].phase == "Complete" and seen[2].restarts == 0
    assert k8s.logs(name, tail_lines=2) == "step 99\nstep 100\n"
    assert k8s.logs(name).count("\n") == 50
    assert fake.calls("GET", rf"/api/v1/namespaces/{NS}/pods/.*/log")[-1].query["container"] == [
        "job"
    ]

    k8s.delete(name)
    delete = fake.calls("DELETE", rf"/apis/batch/v1/namespaces/{NS}/jobs/{name}")
    assert len(delete) == 1 and delete[0].query.get("propagationPolicy") == ["Background"]
    assert not fake.pods_of(NS, name) and not fake.secrets and not fake.jobs
    k8s.delete(name)  # already gone: fine
    lost = k8s.states([name])[name]
    assert lost.state == "lost" and "ttlSecondsAfterFinished" in lost.diagnosis


def test_every_call_has_a_timeout(fake: FakeK8s, k8s: K8sJobs) -> None:
    seen: list[tuple[str, Any]] = []

    class Spy:
        def __init__(self, api: Any) -> None:
            self.api = api

        def __getattr__(self, name: str) -> Any:
            method = getattr(self.api, name)

            def call(*args: Any, **kwargs: Any) -> Any:
                seen.append((name, kwargs.get("_request_timeout")))
                return method(*args, **kwargs)

            return call

    k8s.batch, k8s.core = Spy(k8s.batch), Spy(k8s.core)
    name = k8s.submit(GOLDEN_SPEC, BUNDLE)["k8s_job"]
    poll(k8s, name, {"running"})
    k8s.logs(name)
    k8s.delete(name)
    assert {n for n, _ in seen} == {
        "create_namespaced_secret",
        "create_namespaced_job",
        "patch_namespaced_secret",
        "list_namespaced_job",
        "list_namespaced_pod",
        "read_namespaced_pod_log",
        "delete_namespaced_job",
        "delete_namespaced_secret",
    }
    assert all(timeout == (2.0, 5.0) for _, timeout in seen)


def test_states_batches_fifty_jobs_into_two_requests(fake: FakeK8s) -> None:
    from kubernetes import client

    config = client.Configuration()
    config.host = fake.url
    config.api_key = {"BearerToken": f"Bearer {fake.token}"}
    k8s = K8sJobs(NS, api_client=client.ApiClient(config), timeout=(2.0, 5.0))
    names = [k8s.submit(spec(job_id=f"sweep.{i:02d}"), b"b")["k8s_job"] for i in range(50)]
    before = len(fake.requests)
    states = k8s.states([*names, "not-there"])
    made = fake.requests[before:]
    assert [(r.method, r.path) for r in made] == [
        ("GET", f"/apis/batch/v1/namespaces/{NS}/jobs"),
        ("GET", f"/api/v1/namespaces/{NS}/pods"),
    ]
    assert all(
        r.query["labelSelector"] == ["app.kubernetes.io/managed-by=rgt-jupyter"] for r in made
    )
    assert {states[n].state for n in names} == {"queued"}
    assert len({states[n].pod for n in names}) == 50
    assert states["not-there"].state == "lost"
    assert k8s.states([]) == {} and len(fake.requests) == before + 2


def test_backoff_exhausted(fake: FakeK8s, k8s: K8sJobs) -> None:
    name = k8s_name(GOLDEN_SPEC.job_id)
    fake.scripts[name] = Script(failures=["OOMKilled"] * 5)
    k8s.submit(GOLDEN_SPEC, BUNDLE)
    seen = poll(k8s, name, {"failed", "finished", "preempted"})
    last = seen[-1]
    assert last.state == "failed" and last.reason == "BackoffLimitExceeded"
    assert last.restarts == 5 and "failed 5 times (backoffLimit 4)" in last.diagnosis
    assert "OOMKilled" in last.diagnosis
    retrying = [s for s in seen if s.state == "queued" and s.restarts]
    assert retrying and all("ran out of memory" in s.diagnosis for s in retrying)
    assert {s.restarts for s in seen} == {0, 1, 2, 3, 4, 5}
    assert len(fake.pods_of(NS, name)) == 5


def test_eviction_retried_then_finished(fake: FakeK8s, k8s: K8sJobs) -> None:
    name = k8s_name(GOLDEN_SPEC.job_id)
    fake.scripts[name] = Script(failures=["Evicted"])
    k8s.submit(GOLDEN_SPEC, BUNDLE)
    seen = poll(k8s, name, {"finished"})
    assert [s.state for s in seen] == [
        "queued",
        "running",
        "queued",
        "queued",
        "running",
        "finished",
    ]
    assert seen[2].phase == "Failed" and seen[2].reason == "Evicted"
    assert "evicted" in seen[2].diagnosis and "EmptyDir" in seen[2].diagnosis
    assert seen[3].phase == "Pending" and "evicted" in seen[3].diagnosis
    assert seen[3].pod != seen[0].pod and seen[-1].restarts == 1


def test_retries_spent_on_preemption_read_as_preempted(fake: FakeK8s, k8s: K8sJobs) -> None:
    job = spec(backoff_limit=1)
    name = k8s_name(job.job_id)
    fake.scripts[name] = Script(failures=["Preempted", "Evicted"])
    k8s.submit(job, BUNDLE)
    last = poll(k8s, name, {"failed", "finished", "preempted"})[-1]
    assert last.state == "preempted" and last.reason == "BackoffLimitExceeded"


def test_image_pull_backoff_and_unschedulable(fake: FakeK8s, k8s: K8sJobs) -> None:
    pulled, placed = spec(job_id="pull"), spec(job_id="place")
    fake.scripts["pull"] = Script(
        waiting="ImagePullBackOff", waiting_message=f'Back-off pulling image "{IMAGE}"'
    )
    fake.scripts["place"] = Script(
        unschedulable="0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    )
    k8s.submit(pulled, BUNDLE)
    k8s.submit(placed, BUNDLE)
    for _ in range(5):
        states = k8s.states(["pull", "place"])
    pull, place = states["pull"], states["place"]
    assert pull.state == "queued" and pull.reason == "ImagePullBackOff"
    assert "cannot pull its image" in pull.diagnosis and IMAGE in pull.diagnosis
    assert place.state == "queued" and place.reason == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in place.diagnosis
    assert k8s.logs("pull") == ""  # the container never started


def test_deadline_exceeded(fake: FakeK8s, k8s: K8sJobs) -> None:
    job = spec(active_deadline_s=60)
    name = k8s_name(job.job_id)
    fake.scripts[name] = Script(running=10, deadline_after=3)
    k8s.submit(job, BUNDLE)
    last = poll(k8s, name, {"failed", "finished"})[-1]
    assert last.state == "failed" and last.reason == "DeadlineExceeded"
    assert "activeDeadlineSeconds (60 s)" in last.diagnosis


def test_conflicts_never_replace_and_leave_nothing_behind(fake: FakeK8s, k8s: K8sJobs) -> None:
    name = k8s_name(GOLDEN_SPEC.job_id)
    first = k8s.submit(GOLDEN_SPEC, BUNDLE)
    with pytest.raises(LaunchError, match="submitted before") as caught:
        k8s.submit(GOLDEN_SPEC, b"other bundle")
    assert f"delete job {name}" in str(caught.value)
    secret = fake.secrets[(NS, f"{name}-bundle")]
    assert base64.b64decode(secret["data"]["bundle.zip"]) == BUNDLE  # the first one's, kept
    assert fake.jobs[(NS, name)]["metadata"]["uid"] == first["uid"]

    # A Job of that name whose Secret is gone: the new Secret must not stay behind.
    del fake.secrets[(NS, f"{name}-bundle")]
    with pytest.raises(LaunchError, match="already has a Job") as caught:
        k8s.submit(GOLDEN_SPEC, b"other bundle")
    assert "never replaces" in str(caught.value)
    assert (NS, f"{name}-bundle") not in fake.secrets
    assert fake.calls("DELETE", rf"/api/v1/namespaces/{NS}/secrets/{name}-bundle")
    assert fake.jobs[(NS, name)]["metadata"]["uid"] == first["uid"]


def test_refusals_become_errors_that_say_what_next(fake: FakeK8s, k8s: K8sJobs) -> None:
    name = k8s_name(GOLDEN_SPEC.job_id)
    jobs_path = rf"/apis/batch/v1/namespaces/{NS}/jobs"
    fake.refuse.append(("POST", jobs_path, 422, "Invalid"))
    with pytest.raises(LaunchError, match="422") as caught:
        k8s.submit(GOLDEN_SPEC, BUNDLE)
    assert "refused on purpose" in str(caught.value)
    assert not fake.secrets and not fake.jobs  # the Secret went with the refused Job

    fake.refuse[:] = [("PATCH", r".*/secrets/.*", 500, "InternalError")]
    result = k8s.submit(GOLDEN_SPEC, BUNDLE)
    assert result["k8s_job"] == name and "outlives" in result["warning"]
    assert (NS, name) in fake.jobs

    fake.refuse[:] = [("GET", jobs_path, 503, "ServiceUnavailable")]
    with pytest.raises(TransportError, match="503.*Retry in a minute"):
        k8s.states([name])
    fake.refuse[:] = [("GET", r".*/pods", 403, "Forbidden")]
    with pytest.raises(UsageError, match="forbade listing pods.*Role"):
        k8s.states([name])
    fake.refuse[:] = [("DELETE", jobs_path + "/.*", 403, "Forbidden")]
    with pytest.raises(UsageError, match="forbade deleting Job"):
        k8s.delete(name)


def test_lost_answer_to_job_create_is_looked_up(fake: FakeK8s, kubeconfig: Path) -> None:
    fake.slow.append(("POST", rf"/apis/batch/v1/namespaces/{NS}/jobs", 1.0))
    k8s = K8sJobs(NS, timeout=(0.5, 0.3))
    result = k8s.submit(GOLDEN_SPEC, BUNDLE)
    name = result["k8s_job"]
    assert result["uid"] == fake.jobs[(NS, name)]["metadata"]["uid"]
    owners = fake.secrets[(NS, f"{name}-bundle")]["metadata"]["ownerReferences"]
    assert owners[0]["uid"] == result["uid"]


def test_bad_credentials_named_without_the_token(
    fake: FakeK8s, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "wrong-token-9d8e7f6a5b4c"
    fake.echo_token = True  # the server repeats what it got: the client must not
    path = fake.write_kubeconfig(tmp_path / "kubeconfig", token=wrong, namespace=NS)
    monkeypatch.setenv("KUBECONFIG", str(path))
    k8s = K8sJobs(NS, timeout=(2.0, 5.0))
    for call in (lambda: k8s.submit(GOLDEN_SPEC, BUNDLE), lambda: k8s.states(["x"])):
        with pytest.raises(UsageError, match="credentials") as caught:
            call()
        text = str(caught.value)
        assert wrong not in text and fake.token not in text and "401" in text
        assert caught.value.__cause__ is None
    assert not fake.secrets and not fake.jobs


def test_unreachable_server_fails_fast(
    fake: FakeK8s, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = json.loads(fake.write_kubeconfig(tmp_path / "kubeconfig").read_text())
    config["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{port}"
    (tmp_path / "kubeconfig").write_text(json.dumps(config))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    with pytest.raises(TransportError, match="Could not reach the Kubernetes API"):
        K8sJobs(NS, timeout=(0.5, 0.5)).states(["x"])

    # A server that accepts and answers only after 30 s: the answer would be a success, so the
    # error says the client's own read timeout ended the call.
    fake.hang = 30.0
    monkeypatch.setenv("KUBECONFIG", str(fake.write_kubeconfig(tmp_path / "hung", namespace=NS)))
    with pytest.raises(TransportError, match="did not answer in time"):
        K8sJobs(NS, timeout=(0.5, 0.3)).states(["x"])


def test_missing_kubeconfig_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(UsageError, match="KUBECONFIG"):
        K8sJobs(NS)
    with pytest.raises(UsageError, match="get-contexts"):
        K8sJobs(NS, context="prod")
    with pytest.raises(UsageError, match="namespace"):
        K8sJobs("Bad_NS", api_client=object())


def test_names_checked_before_any_request(fake: FakeK8s, k8s: K8sJobs) -> None:
    for bad in ("../secrets", "Upper", "a/b"):
        with pytest.raises(UsageError, match="Job name"):
            k8s.states([bad])
        with pytest.raises(UsageError, match="Job name"):
            k8s.delete(bad)
    with pytest.raises(UsageError, match="namespace"):
        k8s.submit(spec(namespace="other"), BUNDLE)
    assert not fake.requests


def test_state_of_a_pod_done_before_its_job() -> None:
    job = {"metadata": {"name": "j", "uid": "u"}, "spec": {"backoffLimit": 4}, "status": {}}
    pod = {
        "metadata": {"name": "j-1", "creationTimestamp": "2026-06-01T00:00:01Z"},
        "status": {"phase": "Succeeded"},
    }
    state = job_state(job, [pod])
    assert state.state == "running" and state.phase == "Succeeded" and state.pod == "j-1"
    assert job_state(job, []).state == "queued"
