"""The ``ray`` backend against a real Ray cluster: a head and a worker node started by the suite
(tests/ray_cluster.py), jobs submitted through the Ray Jobs REST API by ``%%remote_run --profile
ray``, watched, stopped, resumed after a real node loss and pulled verified."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.backends.ray.client import RayJobs
from rgt_jupyter.backends.ray.launcher import entrypoint, gpus_of
from rgt_jupyter.errors import LaunchError, ProfileError, UsageError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.relaunch import retries_left
from rgt_jupyter.run.watch.watcher import watcher
from rgt_jupyter.store.registry import Registry

from .conftest import run_cell, wait_for
from .ray_cluster import STOP_WAIT_S, WORKER_RESOURCE, RayCluster, ray_cluster  # noqa: F401
from .sshd import Sshd
from .test_slurm import HOSTILE, TRAIN, text_of, wait_for_step


def write_ray_profile(
    project: Path, shared: Path, address: str, extra: str = "", transport: str = "local"
) -> None:
    """The project's ``ray`` profile: the built-in one, this cluster's address, every dir on the
    path its nodes share (here: this machine's disk), the job kept off the head."""
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    (profiles / "ray.toml").write_text(
        f'name = "ray"\nextends = "ray"\ntransport = "{transport}"\nsmoke_default = false\n'
        f'python = "{sys.executable}"\n'
        f'workdir = "{shared}/jobs"\ndurable_dir = "{shared}/durable"\n'
        f'scratch_dir = "{shared}/scratch"\n{extra}\n'
        f'[ray]\naddress = "{address}"\nresources = {{ {WORKER_RESOURCE} = 1 }}\n'
        f"stop_wait_s = {STOP_WAIT_S}\n"
        f'[[tiers]]\npath = "{shared}"\nlabel = "the cluster\'s shared filesystem"\n'
        "survives_stop = true\nsurvives_destroy = true\n"
    )


@pytest.fixture
def cluster(ray_cluster: RayCluster, project: Path, tmp_path: Path) -> RayCluster:  # noqa: F811
    write_ray_profile(project, tmp_path / "shared", ray_cluster.address)
    if ray_cluster.worker_raylet() is None:  # a test before this one lost it
        ray_cluster.start_worker()
    return ray_cluster


def _final_weights(run: Any) -> dict[str, Any]:
    import torch  # deferred: the tests that compare weights only

    return dict(torch.load(run.outputs / "final.pt", weights_only=True))


def _same_weights(a: Any, b: Any) -> bool:
    import torch  # deferred: the tests that compare weights only

    x, y = _final_weights(a), _final_weights(b)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def _plain(project: Path, env: dict[str, str]) -> Any:
    """The same program run uninterrupted on this machine."""
    job = submit(LaunchRequest(program=TRAIN, name="plain", env=env), project)
    assert job.wait(180) == "finished", job.snapshot().diagnosis
    return job.pull()


def test_a_cell_on_ray_runs_on_the_worker_is_watched_and_pulled_verified(
    ip: Any, project: Path, cluster: RayCluster
) -> None:
    env = "--env STEPS=8 --env PAUSE=0.3"
    result, text = run_cell(ip, f"%%remote_run --profile ray --name fit {env}\n{TRAIN}")
    assert result.error_in_exec is None, text
    job: Job = result.result
    assert job.spec.launcher == "ray" and job.spec.ray_job == job.id
    seen: list[str] = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        snap = job.snapshot()
        if not seen or seen[-1] != snap.state:
            seen.append(snap.state)
        if snap.terminal:
            break
        time.sleep(0.2)
    assert "running" in seen and seen[-1] == "finished", (seen, job.snapshot().diagnosis)
    assert (job.snapshot().scheduler or "").startswith(f"Ray job {job.id}: SUCCEEDED")
    info = cluster.api(f"/api/jobs/{job.id}")
    assert isinstance(info, dict) and info["driver_node_id"] == cluster.worker_node_id()
    assert info["metadata"]["rgt_name"] == "fit"
    result, text = run_cell(ip, "%pull fit")
    assert result.error_in_exec is None, text
    run = result.result
    assert run.verified, run.text()
    assert any(r["ok"] for r in run.verification["checkpoint_loads"])
    assert _same_weights(run, _plain(project, {"STEPS": "8", "PAUSE": "0"}))


def test_a_node_loss_fails_the_job_and_a_resume_ends_bit_identical(
    project: Path, cluster: RayCluster
) -> None:
    env = {"STEPS": "16", "PAUSE": "0.5", "RESUME_PAUSE": "0.05"}
    job = submit(LaunchRequest(program=TRAIN, name="lossy", profile="ray", env=env), project)
    wait_for_step(job, 4, timeout=240)
    node = cluster.worker_node_id()
    cluster.kill_worker()
    state = wait_for(lambda: (s := job.snapshot()).terminal and s, 180, "Ray to fail the job")
    assert state.state == "failed" and state.failure == "node_lost", state
    assert "node lost" in (state.diagnosis or "") and "rgt resume lossy" in state.diagnosis
    assert node in (state.diagnosis or "")
    cluster.start_worker()
    again = job.resume()
    assert again.spec.resume and again.spec.attempt == 2 and again.spec.ray_job == again.id
    assert again.wait(300) == "finished", again.snapshot().diagnosis
    control = Path(again.spec.control_dir)
    assert "[rgt] loaded ckpt-" in (control / "log").read_text()
    first = json.loads((control / "progress.jsonl").read_text().splitlines()[0])
    assert first["step"] > 1  # it went on from a checkpoint of the lost attempt
    run = again.pull()
    assert run.verified, run.text()
    assert _same_weights(run, _plain(project, {**env, "PAUSE": "0"}))


def test_a_seed_sweep_through_the_head_over_ssh_is_one_submission_per_seed_and_verified(
    ip: Any,
    project: Path,
    cluster: RayCluster,
    sshd: Sshd,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The profile's default shape: the transport is SSH to the head (here the loopback sshd),
    which mounts the shared path; the bundles go and the runs come back through it."""
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {sshd.host_pub}\n")
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host head\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n"
        f"  IdentityFile {sshd.user_key}\n  UserKnownHostsFile {known}\n"
    )
    monkeypatch.setenv("RGT_SSH_CONFIG", str(config))
    write_ray_profile(project, tmp_path / "shared", cluster.address, transport="ssh")
    result, text = run_cell(
        ip,
        f"%%remote_run --profile ray --host head --name sweep --seeds 0-2 --env STEPS=4\n{TRAIN}",
    )
    assert result.error_in_exec is None, text
    group = result.result
    assert group.seeds == [0, 1, 2]
    submissions = [j.spec.ray_job for j in group.jobs]
    assert {j.spec.transport for j in group.jobs} == {"ssh"}
    assert submissions == [j.id for j in group.jobs] and len(set(submissions)) == 3
    assert set(group.wait(300).values()) == {"finished"}
    result, text = run_cell(ip, "%pull sweep")
    assert result.error_in_exec is None, text
    runs = result.result
    assert len(runs) == 3 and all(r.verified for r in runs)
    assert {r.provenance["group"]["id"] for r in runs} == {group.id}
    assert [r.results["seed"] for r in runs] == [0, 1, 2]
    assert len({r.results["loss"] for r in runs}) == 3
    assert "configs differ only in the seed" in text_of(runs)


def test_a_stop_through_the_jobs_api_saves_and_ends_preempted(
    project: Path, cluster: RayCluster
) -> None:
    env = {"STEPS": "100000", "PAUSE": "0.3"}
    job = submit(LaunchRequest(program=TRAIN, name="stopme", profile="ray", env=env), project)
    wait_for_step(job, 2, timeout=240)
    with pytest.raises(UsageError, match="Jobs API"):
        job.stop("SIGKILL")
    job.stop()
    assert job.wait(STOP_WAIT_S + 120) == "preempted", job.snapshot().diagnosis
    snap = job.snapshot()
    assert "stopped through the Ray Jobs API" in (snap.diagnosis or ""), snap
    assert (snap.scheduler or "").endswith("STOPPED")
    run = job.pull()
    assert run.verified, run.text()
    assert run.verification["checkpoint_loads"]


def test_a_cluster_that_does_not_answer_is_refused_before_anything_is_registered(
    project: Path, tmp_path: Path
) -> None:
    import socket  # deferred: this test's closed port only

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    write_ray_profile(project, tmp_path / "shared", f"http://127.0.0.1:{closed}")
    req = LaunchRequest(program="print(1)", name="nowhere", profile="ray")
    with pytest.raises(LaunchError, match="did not answer.*nothing was registered"):
        submit(req, project)
    assert Registry(project).jobs() == []
    assert not (tmp_path / "shared" / "jobs").exists()


def test_with_retries_the_watcher_resumes_a_job_whose_node_was_lost(
    project: Path, cluster: RayCluster, tmp_path: Path
) -> None:
    """[ray] retries = 1: the watcher that sees Ray fail the job on a lost node launches the
    next attempt itself, once; it goes on from the newest checkpoint and finishes."""
    write_ray_profile(project, tmp_path / "shared", cluster.address, "")
    profile = project / ".rgt" / "profiles" / "ray.toml"
    profile.write_text(profile.read_text().replace("[ray]\n", "[ray]\nretries = 1\n"))
    env = {"STEPS": "12", "PAUSE": "0.5", "RESUME_PAUSE": "0.05"}
    job = submit(LaunchRequest(program=TRAIN, name="auto", profile="ray", env=env), project)
    followed = watcher().follow(job)
    wait_for_step(job, 3, timeout=240)
    cluster.kill_worker()
    wait_for(lambda: followed.done, 180, "the watcher to see the job end")
    assert followed.snap is not None and followed.snap.failure == "node_lost", followed.snap
    cluster.start_worker()  # the retry waits in Ray's queue until a node has the resource
    registry = Registry(project)
    row = wait_for(
        lambda: (r := registry.get("auto"))["id"] != job.id and r, 120, "the retry's launch"
    )
    again = Job(row, project)
    assert again.spec.resume and again.spec.attempt == 2 and again.spec.previous_job == job.id
    assert again.wait(300) == "finished", again.snapshot().diagnosis
    # Its retry spent, a second loss would not be retried: the profile allows one.
    assert retries_left(again.spec) == 0
    with pytest.raises(UsageError, match="newer attempt"):
        job.resume()  # the lost attempt's own handle cannot start a second lineage branch


def test_the_entrypoint_runs_hostile_paths_exactly_and_says_when_a_node_lacks_the_share(
    tmp_path: Path,
) -> None:
    """What Ray runs with ``sh -c``: every path quoted, and a control dir the node does not see
    said in Ray's job log (exit 3) instead of a Python error."""
    import subprocess  # deferred: this test's shell runs only

    control = tmp_path / HOSTILE
    proc = subprocess.run(
        ["sh", "-c", entrypoint(sys.executable, str(control))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 3 and "is not on this node" in proc.stderr
    assert "filesystem every node of the cluster mounts" in proc.stderr
    control.mkdir()
    (control / "agent.py").write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    proc = subprocess.run(
        ["sh", "-c", entrypoint(sys.executable, str(control))], cwd=tmp_path, check=False
    )
    assert proc.returncode == 0
    assert json.loads((control / "agent.log").read_text()) == ["run", str(control)]
    assert not list(tmp_path.glob("pwned"))


def test_gpus_on_ray_are_a_number_and_a_token_is_named_never_held(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert gpus_of("2") == 2.0 and gpus_of("0.5") == 0.5 and gpus_of("none") == 0.0
    with pytest.raises(UsageError, match="number of GPUs"):
        gpus_of("a100:2")
    for name in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    conf = {"address": "http://127.0.0.1:9", "token_env": "RGT_TEST_RAY_TOKEN"}
    monkeypatch.delenv("RGT_TEST_RAY_TOKEN", raising=False)
    with pytest.raises(ProfileError, match="RGT_TEST_RAY_TOKEN.*not set"):
        RayJobs(conf)
    monkeypatch.setenv("RGT_TEST_RAY_TOKEN", "s3cr3t-token")
    api = RayJobs(conf)
    assert "s3cr3t" not in repr(api.http) and "s3cr3t" not in api.http.clean("x s3cr3t-token")
    with pytest.raises(ProfileError, match="no Ray Jobs API address"):
        RayJobs({})
