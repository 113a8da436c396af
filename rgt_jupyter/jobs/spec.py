"""The job's spec: everything one attempt of a job is, as it is stored and shipped.

A :class:`JobSpec` is written once at launch (by :func:`rgt_jupyter.run.launch.prepare`), kept as
JSON in the project's registry and in the job's ``launch.json`` (which the agent reads on the job's
machine), and completed by what the launch and later actions learn (the launch record, a stop).
The registry stores it as a JSON object; :meth:`JobSpec.from_dict` reads one back, keeping any
key this version does not know in :attr:`JobSpec.extra`, so nothing written by another version is
lost on the next write. Every field is documented where it is declared.

The fields the agent reads from ``launch.json`` (:data:`AGENT_FIELDS`) are part of the contract
with the shipped side; a test checks that every key the agent reads is one of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict


class AuditRecord(TypedDict, total=False):
    """What the host audit found before the launch (``spec.audit``)."""

    #: One line per finding (interpreter, disk, GPU, clock), shown in the status view.
    findings: list[str]
    #: The interpreter's version on the host (``3.11.4``), when it could be read.
    python: str | None
    #: When the audit ran (the notebook host's clock).
    at: float


class GroupRecord(TypedDict, total=False):
    """The seed group a job belongs to (``spec.group``)."""

    #: ``<name>-<stamp>-<hex>``: one launch of the group.
    id: str
    #: The group's name (the members are ``<name>-s<seed>``).
    name: str
    #: Every seed of the group, in launch order.
    seeds: list[int]
    #: This member's seed (``RGT_SEED``).
    seed: int


class DistributedRecord(TypedDict, total=False):
    """A multi-node launch (``spec.distributed``): one torchrun per node."""

    nodes: int
    nproc_per_node: int
    #: The process-group timeout the job runs with (``RGT_PG_TIMEOUT_S``).
    pg_timeout_s: int


#: The spec keys the agent reads from ``launch.json`` on the job's machine.
AGENT_FIELDS = frozenset(
    {
        "budgets",
        "ckpt_dir",
        "cwd",
        "deployed",
        "distributed",
        "env",
        "grace_s",
        "heartbeat_s",
        "infer_progress",
        "inputs_dir",
        "job_id",
        "lib_dir",
        "out_dir",
        "program",
        "python",
        "requeue",
        "resources_s",
        "resume",
        "secret_names",
        "slurm",
    }
)


@dataclass(kw_only=True)
class JobSpec:
    """One attempt of a job: what was launched, where, and what the launch recorded."""

    # -- identity
    #: ``<name>-<stamp>-<hex>``: unique in the project, one per attempt.
    job_id: str
    #: The job's name (``--name``): attempts of one job share it.
    name: str
    #: ``<stamp>-<hex>``: the attempts that share one checkpoint dir (a resume keeps it).
    lineage: str = ""
    #: 1 for the first attempt, +1 per resume.
    attempt: int = 1
    #: The job before this attempt (``job_id``), when this one resumes or replaces it.
    previous_job: str | None = None
    #: True when this attempt resumes the lineage's checkpoints (``RGT_RESUME=1``).
    resume: bool = False
    #: The resumed attempt runs other code than the one before (its code hash differs).
    code_changed: bool = False

    # -- where
    #: The profile it was launched on.
    profile: str = ""
    #: The machine, as its transport names it (``local``, ``user@host:port``, ``k8s/<ns>``).
    host: str = ""
    #: The ``--host`` alias (an ``~/.ssh/config`` Host), the namespace on Kubernetes.
    host_alias: str | None = None
    #: The profile's transport kind (``local``, ``ssh``, ``kubernetes``).
    transport: str = "local"
    #: The backend that started it (a name of :mod:`rgt_jupyter.backends`).
    launcher: str = "detached"
    #: The project (local folder) the job belongs to.
    project: str = ""
    #: The machine ``rgt up`` made that the job runs on, when there is one.
    instance_id: str | None = None
    #: The profile's price of the machine in USD per hour at launch, when it names one (a
    #: machine from ``rgt up`` has its own, which wins).
    cost_per_hour: float | None = None
    #: The interpreter on the machine.
    python: str = "python3"

    # -- paths on the machine
    #: The job's control dir: bundle, agent records, log, code.
    control_dir: str = ""
    #: ``$RGT_OUT``: everything the job writes here is pulled.
    out_dir: str = ""
    #: ``$RGT_CKPT_DIR``: the lineage's checkpoints, on a durable tier.
    ckpt_dir: str = ""
    #: ``--ckpt-dir``: the root the checkpoint dir was placed under, when not the profile's.
    ckpt_root: str | None = None
    #: The bucket the checkpoints are also uploaded to (``url``, ``endpoint``, ``credentials``
    #: by name, ``region``, and ``lineage_url``: this lineage's prefix), when there is one.
    bucket: dict[str, Any] | None = None
    #: Budgets its agent holds it to: ``of`` (``job`` or ``machine``), ``usd``, ``rate`` (USD
    #: per hour), and ``spent_usd`` (a job's earlier attempts) or ``since`` (the machine's
    #: creation time). At the first reached, the job is told to save and stop.
    budgets: list[dict[str, Any]] = field(default_factory=list)
    #: The profile's spot facts at launch (``grace_s``, ``reclaims_per_day``), for the
    #: checkpoint cadence advice; empty where the machine is not reclaimed.
    spot: dict[str, Any] = field(default_factory=dict)
    #: The job's working directory (its code dir).
    cwd: str = ""
    #: Where the program and the pushed files lie.
    code_dir: str = ""
    #: Where the job API (``rgt_jupyter/job.py``) lies, put on ``PYTHONPATH``.
    lib_dir: str = ""
    #: Where ``--inputs`` variables lie.
    inputs_dir: str = ""
    #: The program's path.
    program: str = ""
    #: The durability verdict on the checkpoint dir (see :mod:`rgt_jupyter.machines.durability`).
    durability: dict[str, Any] = field(default_factory=dict)

    # -- what runs
    #: Environment variables of the job (``--env``, ``CUDA_VISIBLE_DEVICES``, ``RGT_SEED``).
    env: dict[str, str] = field(default_factory=dict)
    #: Names of the ``--secret`` variables (their values travel in the bundle only).
    secret_names: list[str] = field(default_factory=list)
    #: sha256 over the program and every pushed file.
    code_hash: str = ""
    #: ``{path: sha256}`` of every file the job was given (code, inputs, job API).
    deployed: dict[str, str] = field(default_factory=dict)
    #: Relative paths of the ``--push`` files.
    pushed: list[str] = field(default_factory=list)
    #: Names of the ``--inputs`` variables.
    inputs: list[str] = field(default_factory=list)
    #: Whether a CPU smoke run passed before the launch.
    smoke: bool = False
    #: The host audit before the launch.
    audit: AuditRecord = field(default_factory=lambda: AuditRecord())
    #: How the cell is shown in tracebacks: its label and the line of its first program line.
    label: str = ""
    line_offset: int = 0

    # -- how it is supervised
    #: Seconds between SIGTERM and SIGKILL when the job is stopped or preempted.
    grace_s: float = 30.0
    #: Seconds between the agent's heartbeats.
    heartbeat_s: float = 10.0
    #: Seconds between the agent's GPU and memory samples.
    resources_s: float = 10.0
    #: Whether the agent reads progress from the job's tqdm bars and TensorBoard events while
    #: the job does not call ``job.progress``.
    infer_progress: bool = True
    #: A running job is stalled after ``stall_k`` x its median step interval without progress,
    #: and never before ``stall_min_s`` seconds (see :func:`rgt_jupyter.jobs.observe.check_stall`).
    stall_k: float = 10.0
    stall_min_s: float = 120.0
    #: A stall this long is diagnosed as a process-group (NCCL) timeout; for a multi-node job,
    #: the timeout it runs with (:attr:`distributed`).
    pg_timeout_s: float | None = None

    # -- a backend's own fields
    #: Slurm: requeue on preemption or node failure; the batch script's options.
    requeue: bool = False
    slurm: dict[str, Any] = field(default_factory=dict)
    #: Slurm multi-node: the rendezvous the agent sets up.
    distributed: DistributedRecord | None = None
    #: Kubernetes: the GPUs asked for, and the profile's ``[kubernetes]`` table.
    gpus_request: str | None = None
    kubernetes: dict[str, Any] = field(default_factory=dict)
    #: Ray: the profile's ``[ray]`` table (the Jobs API address, entrypoint resources).
    ray: dict[str, Any] = field(default_factory=dict)
    #: The seed group (``--seeds``), and the task of a Slurm job array.
    group: GroupRecord | None = None
    array_task: int | None = None

    # -- what the launch recorded
    created_at: float = 0.0
    launched_at: float | None = None
    #: The agent's pid and the machine's boot id (detached, tmux).
    agent_pid: int | None = None
    boot_id: str | None = None
    #: Slurm's job id (``1234`` or ``1234_7`` for an array task).
    slurm_job_id: str | None = None
    #: The Kubernetes Job, its namespace and uid, and a warning the submit returned.
    k8s_job: str | None = None
    namespace: str | None = None
    uid: str | None = None
    warning: str | None = None
    #: Why the launch established that nothing of the job started.
    not_started: str | None = None
    #: When ``Job.stop`` deleted the Kubernetes Job.
    k8s_deleted_at: float | None = None
    #: The Ray job's submission id (its job id: one submission per attempt).
    ray_job: str | None = None

    # -- which notebook cell launched it
    notebook: str | None = None
    cell_id: str | None = None
    cell_digest: str | None = None

    #: Keys this version does not know, kept as they were.
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        """The spec a JSON object holds (missing fields take their defaults)."""
        known = {k: v for k, v in data.items() if k in _FIELDS and k != "extra"}
        extra = {k: v for k, v in data.items() if k not in _FIELDS}
        return cls(**known, extra=extra)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> JobSpec:
        """The spec of a registry row (its id and name fill a spec that lacks them)."""
        return cls.from_dict({"job_id": row["id"], "name": row["name"], **row["spec"]})

    def to_dict(self) -> dict[str, Any]:
        """The JSON object that is stored and shipped (``launch.json``)."""
        out = {f: getattr(self, f) for f in _FIELDS if f != "extra"}
        return {**self.extra, **out}

    def replace(self, **fields: Any) -> JobSpec:
        """A copy with ``fields`` changed; unknown names are refused (see :func:`check_fields`)."""
        check_fields(fields)
        return dataclasses.replace(self, **fields)

    @property
    def stall_pg_timeout_s(self) -> float | None:
        """The process-group timeout a stall is measured against: the spec's own, else the one
        a multi-node job runs with."""
        if self.pg_timeout_s is not None:
            return float(self.pg_timeout_s)
        dist = self.distributed or {}
        return float(dist["pg_timeout_s"]) if "pg_timeout_s" in dist else None


_FIELDS = frozenset(f.name for f in dataclasses.fields(JobSpec))


def check_fields(fields: Mapping[str, Any]) -> None:
    """Refuse names that are not spec fields (a typo would otherwise be stored and never read)."""
    unknown = sorted(set(fields) - _FIELDS)
    if unknown:
        raise TypeError(f"not fields of a job spec: {', '.join(unknown)}")
