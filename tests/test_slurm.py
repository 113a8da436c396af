"""The Slurm launcher against a real one-node cluster (slurmctld + slurmd + munge on localhost),
reached over a real SSH session like a login node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter.api import Job
from rgt_jupyter.errors import LaunchError, UsageError
from rgt_jupyter.launch import LaunchRequest, launch
from rgt_jupyter.names import parse_seeds
from rgt_jupyter.slurm import SlurmLauncher, SlurmOptions, array_spec, render_script, time_seconds
from rgt_jupyter.slurm_queue import SlurmQueue, parse_squeue

from .conftest import run_cell
from .slurm_cluster import SlurmCluster
from .sshd import Sshd

GOLDEN = Path(__file__).parent / "golden"
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
    time.sleep(float(os.environ.get("PAUSE", "0.3")))
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
    job = Job(launch(req, project), project)
    KEEP_RUNNING.append(job.spec["slurm_job_id"])
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


# -- rendering (no cluster) ---------------------------------------------------------------------


def test_sbatch_script_golden() -> None:
    """The batch script, pinned: resources as directives, the paths only as $1/$2."""
    single = render_script(
        SlurmOptions("train-1", time="2:00:00", partition="gpu", gpus="a100:2", signal_lead_s=180)
    )
    multi = render_script(
        SlurmOptions(
            "sweep",
            time="1-00:00",
            nodes=2,
            gpus="4",
            array=(0, 1, 2, 5),
            account="lab",
            directives=("--mem=64G", "--constraint=a100"),
        )
    )
    text = single + "----\n" + multi
    if os.environ.get("RGT_UPDATE_GOLDEN") == "1":
        assert not os.environ.get("CI"), "golden files are never rewritten in CI"
        (GOLDEN / "sbatch.txt").write_text(text)
    assert text == (GOLDEN / "sbatch.txt").read_text()


def test_submit_line_passes_hostile_paths_as_arguments() -> None:
    control = f"/srv/{HOSTILE}\nnext/job-1"
    argv = SlurmLauncher().render("/opt/py 3/bin/python", control)
    assert argv[:2] == ["sh", "-c"] and argv[3] == "rgt-submit"
    assert argv[4:] == [
        control,
        "/opt/py 3/bin/python",
        f"{control}/job.sbatch",
        control,
        "/opt/py 3/bin/python",
    ]
    assert HOSTILE not in argv[2]


@pytest.mark.parametrize(
    "opts",
    [
        SlurmOptions("a", time="2 hours"),
        SlurmOptions("a", partition="gpu; rm -rf ~"),
        SlurmOptions("a", gpus="2 --wrap=x"),
        SlurmOptions("a", nodes=0),
        SlurmOptions("a", time="1", signal_lead_s=90),
        SlurmOptions("a", directives=("--output=/tmp/x",)),
        SlurmOptions("a", directives=("--comment=two words",)),
        SlurmOptions("a", directives=("--mem=1G\n#SBATCH --uid=0",)),
    ],
)
def test_values_slurm_would_misread_are_refused(opts: SlurmOptions) -> None:
    with pytest.raises(UsageError):
        render_script(opts)


def test_time_and_arrays_and_seeds() -> None:
    assert [time_seconds(t) for t in ("30", "1:30", "1:00:00", "1-2", "1-0:0:5")] == [
        1800,
        90,
        3600,
        93600,
        86405,
    ]
    assert array_spec((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    assert parse_seeds("0-2,7") == [0, 1, 2, 7]
    for bad in ("a", "3-1", "0-5000", "-1"):
        with pytest.raises(UsageError):
            parse_seeds(bad)


def test_one_batched_squeue_per_poll_for_many_jobs() -> None:
    """The queue cache asks the scheduler once per interval, whatever the number of jobs."""
    from rgt_jupyter.transport.base import ExecResult

    class Login:
        name, host = "fake", "login"
        argvs: list[list[str]] = []

        def exec(self, argv: list[str], **_: Any) -> ExecResult:
            self.argvs.append(argv)
            lines = "".join(f"{i}|RUNNING|None\n" for i in range(100, 150))
            return ExecResult(tuple(argv), 0, lines.encode(), b"")

    login = Login()
    queue = SlurmQueue(min_interval=60)
    for i in range(100, 150):
        queue.follow("login", str(i))  # what each Job handle does when it is made
    for _ in range(5):
        states = [queue.state(login, str(i)) for i in range(100, 150)]  # type: ignore[arg-type]
    assert len(login.argvs) == 1
    assert login.argvs[0][-3] == "--jobs=" + ",".join(str(i) for i in range(100, 150))
    assert all(s is not None and s.raw == "RUNNING" for s in states)
    # A job not asked about yet: one squeue; squeue no longer lists it, so one sacct for it.
    assert queue.state(login, "150") is None  # type: ignore[arg-type]
    assert [a[0] for a in login.argvs] == ["squeue", "squeue", "sacct"]
    assert "--jobs=150" in login.argvs[2]
    queue.state(login, "150")  # type: ignore[arg-type]
    assert len(login.argvs) == 3
    assert parse_squeue("7_1|PENDING|BeginTime\n")["7_1"].reason == "BeginTime"


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
    assert job.spec["launcher"] == "sbatch" and job.spec["slurm_job_id"].isdigit()
    assert (Path(job.spec["control_dir"]) / "job.sbatch").read_text().startswith("#!/bin/sh")
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
    assert remote.provenance["scheduler"]["slurm_job_id"] == job.spec["slurm_job_id"]
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
    job = Job(launch(req, project), project)
    wait_for_step(job, 4)
    cluster.scontrol("requeue", job.spec["slurm_job_id"])
    assert job.wait(300) == "finished", job.snapshot().diagnosis
    snap = job.snapshot()
    assert snap.restarts >= 1, snap
    assert "restarted" in (snap_text := __import__("rgt_jupyter.render").render.snapshot_text(snap))
    attempts = Path(job.spec["control_dir"]) / "attempts"
    first = json.loads((attempts / "1" / "exit.json").read_text())
    assert first["state"] == "preempted" and first["agent_signals"][0]["signal"] == "SIGTERM"
    log = job.log()
    assert "resuming" in (Path(job.spec["control_dir"]) / "agent.log").read_text()
    requeued = job.pull()
    assert requeued.verified and requeued.provenance["scheduler"]["restarts"] >= 1
    plain = Job(launch(LaunchRequest(program=TRAIN, name="plain", env=env), project), project)
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
    job = Job(launch(req, project), project)
    assert "--time=1\n" in (Path(job.spec["control_dir"]) / "job.sbatch").read_text()
    assert job.wait(240) == "failed"
    snap = job.snapshot()
    assert snap.diagnosis is not None and snap.diagnosis.startswith("walltime (TIMEOUT)"), snap
    assert "SIGUSR2 warned it" in snap.diagnosis and "checkpoint file(s)" in snap.diagnosis
    run = job.pull()
    assert run.verified, run.text()  # every checkpoint loaded (weights_only, own process)
    assert any(r["ok"] for r in run.verification["checkpoint_loads"])


def test_three_seeds_are_one_array_grouped_and_verified(
    ip: Any, project: Path, cluster: SlurmCluster
) -> None:
    result, text = run_cell(
        ip, f"%%remote_run --profile slurm --host login --name sweep --seeds 0-2\n{TRAIN}"
    )
    assert result.error_in_exec is None, text
    group = result.result
    assert group.seeds == [0, 1, 2] and len({j.id for j in group.jobs}) == 3
    ids = [j.spec["slurm_job_id"] for j in group.jobs]
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


@pytest.mark.parametrize(
    ("raw", "reason", "exit_state", "state", "words"),
    [
        ("PENDING", "Priority", None, "queued", "waiting behind higher-priority jobs"),
        ("REQUEUED", "BeginTime", "preempted", "queued", "requeued (BeginTime)"),
        ("RUNNING", "None", None, "running", None),
        ("OUT_OF_MEMORY", "OutOfMemory", "failed", "failed", "out of memory (OUT_OF_MEMORY)"),
        ("NODE_FAIL", "NodeDown", None, "failed", "node failure (NODE_FAIL)"),
        ("PREEMPTED", "None", "preempted", "preempted", "preempted (PREEMPTED)"),
        ("TIMEOUT", "TimeLimit", "preempted", "failed", "walltime (TIMEOUT)"),
        ("CANCELLED", "None", None, "failed", "CANCELLED (scancel) before the agent"),
        ("COMPLETED", "None", "finished", "finished", None),
    ],
)
def test_slurm_states_in_the_contracts_words(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    raw: str,
    reason: str,
    exit_state: str | None,
    state: str,
    words: str | None,
) -> None:
    from rgt_jupyter import slurm_status
    from rgt_jupyter.slurm_queue import SchedState
    from rgt_jupyter.transport.local import LocalTransport

    control = tmp_path / "control"
    control.mkdir()
    (control / "status.json").write_text(json.dumps({"started_at": 1.0, "restart": 0}))
    if exit_state is not None:
        (control / "exit.json").write_text(
            json.dumps({"state": exit_state, "exit_code": 0, "agent_signals": []})
        )

    class Queue:
        def state(self, transport: Any, job_id: str) -> SchedState:
            return SchedState(raw, reason)

        def forget(self, transport: Any, job_id: str) -> None:
            pass

    monkeypatch.setattr(slurm_status, "slurm_queue", lambda: Queue())
    spec = {
        "job_id": "j",
        "name": "n",
        "control_dir": str(control),
        "slurm_job_id": "9",
        "ckpt_dir": str(tmp_path / "ckpt"),
    }
    snap = slurm_status.observe_slurm(LocalTransport(), spec)
    assert snap.state == state, snap
    assert snap.scheduler is not None and snap.scheduler.startswith(f"Slurm 9: {raw}")
    if words is not None:
        assert snap.diagnosis is not None and words in snap.diagnosis, snap.diagnosis


def test_scancel_stop_saves_and_ends_preempted(project: Path, cluster: SlurmCluster) -> None:
    env = {"STEPS": "100000", "PAUSE": "0.3"}
    req = LaunchRequest(program=TRAIN, name="stopme", profile="slurm", host="login", env=env)
    job = Job(launch(req, project), project)
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
        launch(req, project)
    assert cluster.squeue("-h", "-t", "all", "-o", "%i") == before


def test_hostile_paths_run_exactly_on_the_cluster(
    project: Path, cluster: SlurmCluster, tmp_path: Path
) -> None:
    shared = tmp_path / HOSTILE
    write_profile(project, "odd", shared, "")
    program = "import rgt_jupyter.job as job\njob.save_results({'ok': 1})\n"
    job = Job(
        launch(LaunchRequest(program=program, name="odd", profile="odd", host="login"), project),
        project,
    )
    assert job.wait(120) == "finished", job.snapshot().diagnosis
    assert job.spec["control_dir"].startswith(str(shared))
    assert (Path(job.spec["out_dir"]) / "results.json").exists()
    assert not (Path.home() / "pwned").exists() and not Path("pwned").exists()


def test_multi_node_runs_one_torchrun_per_node_with_slurm_rendezvous(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--nodes 2: srun starts torchrun on each node; the rendezvous is Slurm's; NCCL recorded."""
    from rgt_jupyter import agent

    spec = {
        "job_id": "mn-1",
        "python": "/opt/py/bin/python3",
        "program": "/ctl/code/rgt_cell.py",
        "lib_dir": "/ctl/lib",
        "out_dir": "/o",
        "ckpt_dir": "/c",
        "distributed": {"nodes": 2, "nproc_per_node": 4, "pg_timeout_s": 900},
    }
    (tmp_path / "launch.json").write_text(json.dumps(spec))
    for key, value in {
        "SLURM_JOB_ID": "4242",
        "SLURM_RESTART_COUNT": "1",
        "MASTER_ADDR": "node-a",
        "MASTER_PORT": "29742",
        "NCCL_SOCKET_IFNAME": "^docker0,lo",
        "NCCL_IB_DISABLE": "1",
    }.items():
        monkeypatch.setenv(key, value)
    sup = agent.Supervisor(str(tmp_path))
    argv = sup.child_argv()
    assert argv[:4] == ["srun", "--kill-on-bad-exit=1", "--nodes=2", "--ntasks-per-node=1"]
    assert argv[4:7] == ["/opt/py/bin/python3", "-m", "torch.distributed.run"]
    assert "--nnodes=2" in argv and "--nproc-per-node=4" in argv
    assert "--rdzv-endpoint=node-a:29742" in argv and "--rdzv-id=4242" in argv
    assert argv[-3:] == [os.path.abspath(agent.__file__), "cell", "/ctl/code/rgt_cell.py"]
    env = sup.job_env()
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1" and env["RGT_PG_TIMEOUT_S"] == "900"
    assert sup.slurm["nccl"] == {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "^docker0,lo"}
    assert sup.slurm["restart_count"] == 1


def test_a_job_that_ignores_the_warning_is_ended_by_slurm_as_timeout(
    ignored_walltime: Job,
) -> None:
    """Runs last in this module: by now Slurm has ended the job at its limit (TIMEOUT)."""
    job = ignored_walltime
    assert job.wait(180) == "failed"
    snap = job.snapshot()
    assert snap.scheduler is not None and "TIMEOUT" in snap.scheduler, snap
    assert snap.diagnosis is not None and snap.diagnosis.startswith("walltime (TIMEOUT)")
    checkpoints = list(Path(job.spec["ckpt_dir"]).glob("ckpt-*"))
    assert checkpoints, "the job checkpointed every step until Slurm ended it"
