"""The Slurm launcher's parts that need no cluster: the rendered batch script (golden), refused
values, the batched queue cache, the state mapping, the multi-node command."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter.backends.slurm.launcher import SlurmBackend
from rgt_jupyter.backends.slurm.queue import SlurmQueue, parse_squeue
from rgt_jupyter.backends.slurm.script import SlurmOptions, array_spec, render_script, time_seconds
from rgt_jupyter.errors import UsageError
from rgt_jupyter.store.names import parse_seeds

GOLDEN = Path(__file__).parent / "golden"
HOSTILE = "it's a $(touch pwned) dir;`x`"


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
    argv = SlurmBackend().render("/opt/py 3/bin/python", control)
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


def test_an_ended_job_costs_no_more_scheduler_calls() -> None:
    from rgt_jupyter.transport.base import ExecResult

    class Login:
        name, host = "fake", "login2"
        argvs: list[list[str]] = []
        answer = "7|RUNNING|None\n"

        def exec(self, argv: list[str], **_: Any) -> ExecResult:
            self.argvs.append(argv)
            return ExecResult(tuple(argv), 0, self.answer.encode(), b"")

    login = Login()
    queue = SlurmQueue(min_interval=0)
    assert queue.state(login, "7").raw == "RUNNING"  # type: ignore[arg-type, union-attr]
    login.answer = "7|COMPLETED|None\n"
    assert queue.state(login, "7").raw == "COMPLETED"  # type: ignore[arg-type, union-attr]
    calls = len(login.argvs)
    for _ in range(3):
        queue.state(login, "7")  # type: ignore[arg-type]
    assert len(login.argvs) == calls
    login.answer = "8|PREEMPTED|None\n"  # with --requeue, Slurm may run it again: keep asking
    queue.state(login, "8")  # type: ignore[arg-type]
    queue.state(login, "8")  # type: ignore[arg-type]
    assert len(login.argvs) == calls + 2


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
    from rgt_jupyter.backends.slurm import observe as slurm_status
    from rgt_jupyter.backends.slurm.queue import SchedState
    from rgt_jupyter.jobs.spec import JobSpec
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
    snap = slurm_status.observe_slurm(LocalTransport(), JobSpec.from_dict(spec))
    assert snap.state == state, snap
    assert snap.scheduler is not None and snap.scheduler.startswith(f"Slurm 9: {raw}")
    if words is not None:
        assert snap.diagnosis is not None and words in snap.diagnosis, snap.diagnosis


def test_multi_node_runs_one_torchrun_per_node_with_slurm_rendezvous(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--nodes 2: srun starts torchrun on each node; the rendezvous is Slurm's; NCCL recorded."""
    from rgt_jupyter.remote import agent

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
