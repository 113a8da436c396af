"""The Slurm launcher against a real one-node cluster (slurmctld + slurmd + munge on localhost),
reached over a real SSH session like a login node."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.errors import LaunchError
from rgt_jupyter.jobs.request import LaunchRequest

from .conftest import run_cell
from .slurm_cluster import SlurmCluster
from .sshd import Sshd

HOSTILE = "it's a $(touch pwned) dir;`x`"

#: A CPU training loop that checkpoints every step and stops at a step boundary when warned.
TRAIN = """\
import os, time, torch, rgt_jupyter.job as job
job.seed_everything(job.seed(3))
job.save_config({"lr": 0.05, "features": 8, "seed": job.seed(3)})
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(64, 8), torch.randn(64, 1)
state = job.load_latest()
start = 0
if state is not None:
    model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"]); start = state["step"]
STEPS = int(os.environ.get("STEPS", "12"))
for step in range(start + 1, STEPS + 1):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x + 0.01 * torch.randn_like(x)), y)
    loss.backward(); opt.step()
    job.save_checkpoint({"model": model.state_dict(), "opt": opt.state_dict(), "step": step},
                        step=step)
    job.progress(step, STEPS, loss=float(loss))
    if job.preempted():
        raise SystemExit(0)
    time.sleep(float(os.environ.get("RESUME_PAUSE" if job.is_resume() else "PAUSE", "0.3")))
torch.save(model.state_dict(), os.path.join(job.out_dir(), "final.pt"))
job.save_results({"loss": float(loss), "seed": job.seed(3)})
"""


@pytest.fixture
def cluster(
    slurm: SlurmCluster,
    sshd: Sshd,
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[SlurmCluster]:
    """The cluster's login node as ssh alias ``login``, and a project profile ``slurm`` that
    extends the built-in one with its dirs under tmp (a declared durable tier)."""
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {sshd.host_pub}\n")
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host login\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n"
        f"  IdentityFile {sshd.user_key}\n  UserKnownHostsFile {known}\n"
    )
    monkeypatch.setenv("RGT_SSH_CONFIG", str(config))
    shared = tmp_path / "cluster home"
    write_profile(project, "slurm", shared, "")
    yield slurm
    keep = set(KEEP_RUNNING)
    others = [j for j in slurm.active_jobs() if j not in keep]
    if others:
        subprocess.run(["scancel", *others], check=False)


#: Jobs that outlive single tests (the walltime job below runs while the others do).
KEEP_RUNNING: list[str] = []

IGNORES_WARNING = """import time, rgt_jupyter.job as job
for step in range(1, 100000):
    job.save_checkpoint({"step": step}, step=step)
    job.progress(step)
    time.sleep(1)
"""


@pytest.fixture(scope="module", autouse=True)
def ignored_walltime(
    slurm: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Job]:
    """A job that ignores the USR2 warning and runs into its one-minute --time. Slurm checks
    limits on a 30 s cycle, so it ends about 90 s later: it is submitted when this module starts
    and looked at by the module's last test."""
    root = tmp_path_factory.mktemp("walltime")
    project = root / "proj"
    project.mkdir()
    write_profile(
        project, "here", root / "shared", 'transport = "local"\n[sbatch]\nsignal_lead_s = 30\n'
    )
    slurm.wait_idle()
    req = LaunchRequest(program=IGNORES_WARNING, name="ignores", profile="here", time="1")
    job = submit(req, project)
    KEEP_RUNNING.append(job.spec.slurm_job_id)
    yield job
    KEEP_RUNNING.clear()


def write_profile(project: Path, name: str, shared: Path, extra: str, base: str = "slurm") -> None:
    """A project profile extending a built-in, with every dir under ``shared``."""
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    (profiles / f"{name}.toml").write_text(
        f'name = "{name}"\nextends = "{base}"\nsmoke_default = false\n'
        f'python = "{sys.executable}"\n'
        f'workdir = "{shared}/jobs"\ndurable_dir = "{shared}/durable"\n'
        f'scratch_dir = "{shared}/scratch"\n{extra}\n'
        f'[[tiers]]\npath = "{shared}"\nlabel = "cluster shared filesystem"\n'
        "survives_stop = true\nsurvives_destroy = true\n"
    )


def _final_weights(run: Any) -> dict[str, Any]:
    import torch

    return dict(torch.load(run.outputs / "final.pt", weights_only=True))


# -- on the cluster ------------------------------------------------------------------------------


def test_cell_on_slurm_is_watched_from_pending_to_finished_and_matches_local(
    ip: Any, project: Path, cluster: SlurmCluster, tmp_path: Path
) -> None:
    write_profile(
        project, "slurm", tmp_path / "cluster home", '[sbatch]\ndirectives = ["--begin=now+3"]\n'
    )
    program = TRAIN.replace("job.seed(3)", "3")
    result, text = run_cell(ip, f"%%remote_run --profile slurm --host login --name fit\n{program}")
    assert result.error_in_exec is None, text
    job: Job = result.result
    assert job.spec.launcher == "sbatch" and job.spec.slurm_job_id.isdigit()
    assert (Path(job.spec.control_dir) / "job.sbatch").read_text().startswith("#!/bin/sh")
    seen: list[tuple[str, str | None]] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        snap = job.snapshot()
        if not seen or seen[-1][0] != snap.state:
            seen.append((snap.state, snap.scheduler))
        if snap.terminal:
            break
        time.sleep(0.2)
    states = [s for s, _ in seen]
    assert states[0] == "queued" and "PENDING" in (seen[0][1] or ""), seen
    assert "running" in states and states[-1] == "finished", seen
    result, text = run_cell(ip, "%pull fit")
    assert result.error_in_exec is None, text
    remote = result.result
    assert remote.verified, remote.text()
    assert remote.provenance["scheduler"]["slurm_job_id"] == job.spec.slurm_job_id
    result, _ = run_cell(ip, f"%%remote_run --name fit-local\n{program}")
    local_job = result.result
    assert local_job.wait(120) == "finished"
    local = local_job.pull()
    assert local.results == remote.results
    import torch

    a, b = _final_weights(remote), _final_weights(local)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_scontrol_requeue_resumes_bit_identical(
    project: Path, cluster: SlurmCluster, tmp_path: Path
) -> None:
    env = {"STEPS": "16", "PAUSE": "0.5"}
    req = LaunchRequest(program=TRAIN, name="rq", profile="slurm", host="login", env=env)
    job = submit(req, project)
    wait_for_step(job, 4)
    cluster.scontrol("requeue", job.spec.slurm_job_id)
    assert job.wait(300) == "finished", job.snapshot().diagnosis
    snap = job.snapshot()
    assert snap.restarts >= 1, snap
    assert "restarted" in (
        snap_text := __import__("rgt_jupyter.views.render").views.render.snapshot_text(snap)
    )
    attempts = Path(job.spec.control_dir) / "attempts"
    first = json.loads((attempts / "1" / "exit.json").read_text())
    assert first["state"] == "preempted" and first["agent_signals"][0]["signal"] == "SIGTERM"
    log = job.log()
    assert "resuming" in (Path(job.spec.control_dir) / "agent.log").read_text()
    requeued = job.pull()
    assert requeued.verified and requeued.provenance["scheduler"]["restarts"] >= 1
    plain = submit(LaunchRequest(program=TRAIN, name="plain", env=env), project)
    assert plain.wait(120) == "finished"
    import torch

    a, b = _final_weights(requeued), _final_weights(plain.pull())
    assert all(torch.equal(a[k], b[k]) for k in a), (log, snap_text)


def wait_for_step(job: Job, step: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        snap = job.snapshot(log_lines=0)
        if snap.progress and snap.progress.get("step", 0) >= step:
            return
        assert not snap.terminal, snap
        time.sleep(0.2)
    raise AssertionError(f"job {job.id} never reached step {step}")


def test_walltime_warns_with_usr2_then_fails_as_timeout(
    project: Path, cluster: SlurmCluster, tmp_path: Path
) -> None:
    write_profile(project, "short", tmp_path / "cluster home", "[sbatch]\nsignal_lead_s = 40\n")
    env = {"STEPS": "100000", "PAUSE": "0.5"}
    req = LaunchRequest(
        program=TRAIN, name="wall", profile="short", host="login", env=env, time="1"
    )
    job = submit(req, project)
    assert "--time=1\n" in (Path(job.spec.control_dir) / "job.sbatch").read_text()
    assert job.wait(240) == "failed"
    snap = job.snapshot()
    assert snap.diagnosis is not None and snap.diagnosis.startswith("walltime (TIMEOUT)"), snap
    assert "SIGUSR2 warned it" in snap.diagnosis and "checkpoint file(s)" in snap.diagnosis
    run = job.pull()
    assert run.verified, run.text()  # every checkpoint loaded (weights_only, own process)
    assert any(r["ok"] for r in run.verification["checkpoint_loads"])


def test_timeout_requeues_carry_a_long_job_past_its_walltime(
    project: Path, cluster: SlurmCluster, tmp_path: Path
) -> None:
    """[sbatch] timeout_requeues = 1: warned before --time, the job saves, requeues itself and
    goes on from its checkpoint in a new allocation (submitit's pattern)."""
    write_profile(
        project,
        "chain",
        tmp_path / "cluster home",
        "[sbatch]\nsignal_lead_s = 40\ntimeout_requeues = 1\n",
    )
    env = {"STEPS": "150", "PAUSE": "0.5", "RESUME_PAUSE": "0.01"}
    req = LaunchRequest(
        program=TRAIN, name="chain", profile="chain", host="login", env=env, time="1"
    )
    job = submit(req, project)
    assert job.wait(240) == "finished", job.snapshot().diagnosis
    first = json.loads((Path(job.spec.control_dir) / "attempts" / "1" / "exit.json").read_text())
    assert first["reason"] == "walltime, requeued" and first["state"] == "preempted"
    assert 0 < first["checkpoints"]
    snap = job.snapshot()
    assert snap.restarts == 1 and snap.progress is not None and snap.progress["step"] == 150
    assert job.pull().verified


def test_three_seeds_are_one_array_grouped_and_verified(
    ip: Any, project: Path, cluster: SlurmCluster
) -> None:
    result, text = run_cell(
        ip, f"%%remote_run --profile slurm --host login --name sweep --seeds 0-2\n{TRAIN}"
    )
    assert result.error_in_exec is None, text
    group = result.result
    assert group.seeds == [0, 1, 2] and len({j.id for j in group.jobs}) == 3
    ids = [j.spec.slurm_job_id for j in group.jobs]
    array = ids[0].split("_")[0]
    assert ids == [f"{array}_{s}" for s in (0, 1, 2)]  # one sbatch: one array
    assert set(group.wait(240).values()) == {"finished"}
    result, text = run_cell(ip, "%pull sweep")
    assert result.error_in_exec is None, text
    runs = result.result
    assert len(runs) == 3 and all(r.verified for r in runs)
    groups = {r.provenance["group"]["id"] for r in runs}
    assert groups == {group.id}
    assert [r.provenance["seed"] for r in runs] == [0, 1, 2]
    assert [r.results["seed"] for r in runs] == [0, 1, 2]
    assert len({r.results["loss"] for r in runs}) == 3
    assert runs.differences == [] and "configs differ only in the seed" in text_of(runs)


def text_of(obj: Any) -> str:
    return str(obj._repr_mimebundle_()["text/plain"])


def test_scancel_stop_saves_and_ends_preempted(project: Path, cluster: SlurmCluster) -> None:
    env = {"STEPS": "100000", "PAUSE": "0.3"}
    req = LaunchRequest(program=TRAIN, name="stopme", profile="slurm", host="login", env=env)
    job = submit(req, project)
    wait_for_step(job, 2)
    job.stop()
    assert job.wait(120) == "preempted"
    assert job.pull().verified


def test_missing_interpreter_is_refused_before_submitting(
    project: Path, cluster: SlurmCluster
) -> None:
    before = cluster.squeue("-h", "-t", "all", "-o", "%i")
    req = LaunchRequest(
        program="print(1)\n", name="nopy", profile="slurm", host="login", python="/nope/python3"
    )
    with pytest.raises(LaunchError, match=r"needs Python 3.8\+ there: pass --python"):
        submit(req, project)
    assert cluster.squeue("-h", "-t", "all", "-o", "%i") == before


def test_hostile_paths_run_exactly_on_the_cluster(
    project: Path, cluster: SlurmCluster, tmp_path: Path
) -> None:
    shared = tmp_path / HOSTILE
    write_profile(project, "odd", shared, "")
    program = "import rgt_jupyter.job as job\njob.save_results({'ok': 1})\n"
    job = submit(LaunchRequest(program=program, name="odd", profile="odd", host="login"), project)
    assert job.wait(120) == "finished", job.snapshot().diagnosis
    assert job.spec.control_dir.startswith(str(shared))
    assert (Path(job.spec.out_dir) / "results.json").exists()
    assert not (Path.home() / "pwned").exists() and not Path("pwned").exists()


def test_a_job_that_ignores_the_warning_is_ended_by_slurm_as_timeout(
    ignored_walltime: Job,
) -> None:
    """Runs last in this module: by now Slurm has ended the job at its limit (TIMEOUT)."""
    job = ignored_walltime
    assert job.wait(180) == "failed"
    snap = job.snapshot()
    assert snap.scheduler is not None and "TIMEOUT" in snap.scheduler, snap
    assert snap.diagnosis is not None and snap.diagnosis.startswith("walltime (TIMEOUT)")
    checkpoints = list(Path(job.spec.ckpt_dir).glob("ckpt-*"))
    assert checkpoints, "the job checkpointed every step until Slurm ended it"
