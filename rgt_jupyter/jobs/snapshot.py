"""What one look at a job found: :class:`Snapshot`, the record every backend's observation
returns and every view shows, with the job states of the public contract."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .spec import JobSpec

#: The job states (``Job.state``), decided from processes and artifacts, never from a log line.
STATES = ("queued", "running", "finished", "failed", "preempted", "lost")
#: The states a job does not leave.
TERMINAL = frozenset({"finished", "failed", "preempted", "lost"})


@dataclass
class Snapshot:
    """One observation of a job."""

    job_id: str
    name: str
    state: str
    host: str
    observed_at: float
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    signal: str | None = None
    heartbeat_age: float | None = None
    heartbeat_seq: int | None = None
    progress: dict[str, Any] | None = None
    log_tail: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None
    diagnosis: str | None = None
    resume_attempt: int = 1
    audit: list[str] = field(default_factory=list)
    cost: str | None = None
    #: How many times a scheduler restarted the job in place (Slurm requeue, a new pod).
    restarts: int = 0
    #: The scheduler's own word for the job (e.g. ``Slurm 1234: RUNNING``), when there is one.
    scheduler: str | None = None
    #: Seconds since the log, the checkpoints or ``job.progress`` last advanced, when that is
    #: past the job's stall limit (``stall_limit_s``); None while it makes progress.
    stalled_s: float | None = None
    stall_limit_s: float | None = None
    #: The agent's last sample of GPU utilisation and memory, and of cgroup memory use.
    resources: dict[str, Any] | None = None
    #: Who is watching the job and whether that watcher is still ticking.
    watcher: str | None = None
    #: How far the job's machine's wall clock is ahead of this one's (negative: behind), as its
    #: agent's heartbeat shows; None when not known.
    clock_offset: float | None = None
    #: The job's process when it runs on after its agent died (``agent lost``): nothing
    #: supervises or records it; it is not resumed or relaunched while it runs.
    orphan_pid: int | None = None
    #: The failure class of the diagnosis (:mod:`rgt_jupyter.jobs.diagnose`), when one is named.
    failure: str | None = None
    #: The agent's heartbeat is older than a few of its intervals while the job runs.
    heartbeat_stale: bool = False
    #: Where the job's checkpoints stand in its bucket (``bucket.json``: ``url``,
    #: ``durable_step``, ``uploading``, ``error``), for a job with one.
    bucket: dict[str, Any] | None = None
    #: What the training-debug probes (``findings.json``) and the loss curve showed: records
    #: with ``kind``, ``seen``, ``cause``, ``fix`` and ``step``.
    findings: list[dict[str, Any]] = field(default_factory=list)
    #: Checkpoint cadence advice (Young/Daly), when the job saves far from the optimum.
    cadence: str | None = None

    @property
    def display_state(self) -> str:
        """The state, with ``agent lost`` or ``stalled`` in place of ``running`` when it is so."""
        if self.state == "running" and self.orphan_pid is not None:
            return "running, agent lost"
        return "stalled" if self.state == "running" and self.stalled_s is not None else self.state

    @property
    def terminal(self) -> bool:
        """True for finished / failed / preempted / lost."""
        return self.state in TERMINAL

    @property
    def elapsed(self) -> float | None:
        """Seconds the job has been (or was) running."""
        if self.started_at is None:
            return None
        return (self.ended_at or self.observed_at + (self.clock_offset or 0.0)) - self.started_at


def as_launched(spec: JobSpec) -> Snapshot:
    """What a job that was launched a moment ago is known to be, without asking its host: queued,
    with its audit findings. (The watcher observes it from then on.)"""
    snap = new_snapshot(spec, "")
    snap.observed_at = float(spec.launched_at or snap.observed_at)
    return snap


def new_snapshot(spec: JobSpec, host: str = "") -> Snapshot:
    """A ``queued`` snapshot of the job, to be filled in from what is observed."""
    return Snapshot(
        job_id=spec.job_id,
        name=spec.name,
        state="queued",
        host=spec.host or host,
        observed_at=time.time(),
        resume_attempt=int(spec.attempt),
        audit=list((spec.audit or {}).get("findings", [])),
    )
