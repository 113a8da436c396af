"""What a job is doing, decided from its process and artifacts (never from log text).

``finished`` / ``failed`` / ``preempted`` come from ``exit.json``, the record the agent writes last,
after the job process has exited. Without it: the agent's process (pid + start time + boot id,
read from ``/proc`` through the transport) alive means ``running``; gone means ``lost``. Before
the agent's first ``status.json`` the job is ``queued``.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from .transport import Transport

STATES = ("queued", "running", "finished", "failed", "preempted", "lost")
#: A running job is ``stalled`` when neither its log, its checkpoints nor ``job.progress``
#: advanced for ``STALL_K`` x its own median step interval (and at least ``STALL_MIN_S``);
#: a job's spec may set ``stall_k`` and ``stall_min_s``.
STALL_K = 10.0
STALL_MIN_S = 120.0
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
TERMINAL = frozenset({"finished", "failed", "preempted", "lost"})
#: A launched job whose agent has not reported within this many seconds, and is gone, is lost.
START_GRACE_S = 60.0
MAX_LINE = 400


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

    @property
    def display_state(self) -> str:
        """The state, with ``stalled`` in place of ``running`` for a running job that stalled."""
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
        return (self.ended_at or self.observed_at) - self.started_at


def _json(transport: Transport, path: str) -> dict[str, Any] | None:
    text = transport.read_text(path)
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def clean_log(data: bytes, max_lines: int) -> list[str]:
    """Decode with replacement, drop ANSI codes, keep the last ``\\r`` segment, cap long lines."""
    text = data.decode("utf-8", errors="replace")
    lines = []
    for raw in text.split("\n"):
        line = ANSI_RE.sub("", raw.rstrip("\r").split("\r")[-1])
        if len(line) > MAX_LINE:
            line = line[:MAX_LINE] + f" ... [{len(line) - MAX_LINE} more characters]"
        lines.append(line)
    if lines and lines[-1] == "":
        lines.pop()
    return lines[-max_lines:] if max_lines > 0 else []


def last_progress(transport: Transport, control: str) -> dict[str, Any] | None:
    """The newest complete record of ``progress.jsonl``."""
    records = progress_records(transport, control)
    return records[-1] if records else None


def as_launched(spec: dict[str, Any]) -> Snapshot:
    """What a job that was launched a moment ago is known to be, without asking its host: queued,
    with its audit findings. (The watcher observes it from then on.)"""
    snap = new_snapshot(spec, "")
    snap.observed_at = float(spec.get("launched_at") or snap.observed_at)
    return snap


def observe(transport: Transport, spec: dict[str, Any], log_lines: int = 12) -> Snapshot:
    """Observe a job from its control dir; see the module docstring for the rules. A scheduler's
    job (Slurm, Kubernetes) is observed through its scheduler first."""
    if spec.get("launcher") == "sbatch":
        from .slurm_status import observe_slurm

        return observe_slurm(transport, spec, log_lines)
    if spec.get("launcher") == "k8s-job":
        from .k8s_launch import observe_k8s

        return observe_k8s(spec, log_lines)
    control = spec["control_dir"]
    snap = new_snapshot(spec, transport.host)
    now = snap.observed_at
    exit_rec = _json(transport, f"{control}/exit.json")
    status = _json(transport, f"{control}/status.json")
    if exit_rec is None and status is not None:
        alive = transport.proc_alive(int(status["agent_pid"]), status.get("agent_start_ticks"))
        same_boot = status.get("boot_id") in (None, transport.boot_id())
        if alive and same_boot:
            snap.state = "running"
        else:
            exit_rec = _json(transport, f"{control}/exit.json")  # it may have ended meanwhile
            if exit_rec is None:
                snap.state = "lost"
                snap.diagnosis = (
                    "the agent is gone without an exit record"
                    + ("" if same_boot else " (the machine rebooted)")
                    + ": the job was killed from outside (kill -9, OOM killer, reboot). "
                    "Re-run the cell or `rgt resume NAME` to continue from the last checkpoint."
                )
    elif exit_rec is None:
        agent_pid = spec.get("agent_pid")
        launched = float(spec.get("launched_at") or spec.get("created_at") or now)
        if agent_pid is not None and transport.proc_alive(int(agent_pid), None):
            snap.state = "queued"
        elif agent_pid is not None or now - launched > START_GRACE_S:
            exit_rec = _json(transport, f"{control}/exit.json")
            if exit_rec is None and _json(transport, f"{control}/status.json") is None:
                snap.state = "lost"
                snap.diagnosis = agent_never_reported(transport, control)
    fill_from_records(transport, snap, control, status, exit_rec, log_lines)
    check_stall(transport, spec, snap)
    return explain(snap)


def progress_records(
    transport: Transport, control: str, nbytes: int = 4096
) -> list[dict[str, Any]]:
    """The complete records among the last ``nbytes`` of ``progress.jsonl``, oldest first (a
    transport that already holds them parsed, the watcher's, gives its newest ones)."""
    held = getattr(transport, "records", {}).get(control)
    if held is not None:
        return list(held[-32:])
    from .fsutil import jsonl_records

    return jsonl_records(
        transport.tail(f"{control}/progress.jsonl", nbytes).decode("utf-8", errors="replace")
    )


def median_step_interval(records: list[dict[str, Any]]) -> float | None:
    """The median seconds per step between consecutive progress records (None with fewer than
    three records)."""
    rates = []
    for a, b in zip(records, records[1:], strict=False):
        try:
            dt, ds = float(b["t"]) - float(a["t"]), float(b["step"]) - float(a["step"])
        except (KeyError, TypeError, ValueError):
            continue
        if ds > 0 and dt >= 0:
            rates.append(dt / ds)
    if len(rates) < 2:
        return None
    rates.sort()
    mid = len(rates) // 2
    return rates[mid] if len(rates) % 2 else (rates[mid - 1] + rates[mid]) / 2


def check_stall(transport: Transport, spec: dict[str, Any], snap: Snapshot) -> None:
    """Mark a running job stalled when neither its log, its checkpoint dir nor its progress
    advanced for ``k`` x its median step interval (at least ``STALL_MIN_S``).

    Ages are taken on the job's machine's clock (its agent's last heartbeat), so a skewed clock
    here does not make a job look stalled."""
    if snap.state != "running":
        return
    control = spec["control_dir"]
    records = progress_records(transport, control)
    times = [float(snap.started_at or 0.0)]
    for path in (f"{control}/log", spec.get("ckpt_dir")):
        st = transport.stat(path) if path else None
        if st is not None:
            times.append(st.mtime)
    if records and isinstance(records[-1].get("t"), int | float):
        times.append(float(records[-1]["t"]))
    beat = _json(transport, f"{control}/heartbeat.json")
    now = float(beat["wall"]) if beat and beat.get("wall") else snap.observed_at
    median = median_step_interval(records)
    k = float(spec.get("stall_k", STALL_K))
    limit = max(float(spec.get("stall_min_s", STALL_MIN_S)), k * median if median else 0.0)
    idle = now - max(times)
    if idle < limit:
        return
    snap.stalled_s, snap.stall_limit_s = idle, limit
    pg = spec.get("pg_timeout_s")
    if pg is not None and idle >= float(pg):
        from .diagnose import classify

        found = classify(
            exit_code=None,
            signal=None,
            log_lines=snap.log_tail,
            stalled_s=idle,
            pg_timeout_s=float(pg),
            state="running",
        )
        if found is not None:
            snap.diagnosis = f"{found.summary}. Fix: {found.remedy}"
            return
    basis = f"{k:g} x its median step interval of {median:.3g} s" if median else "no step rate yet"
    snap.diagnosis = (
        f"stalled: no new log line, checkpoint or progress for {idle:.0f} s (limit {limit:.0f} s: "
        f"{basis}). A hang (deadlock, data loader, a collective) or a long phase that reports "
        "nothing: look at the process (py-spy dump --pid) before stopping it; it is not retried."
    )


def new_snapshot(spec: dict[str, Any], host: str) -> Snapshot:
    """A ``queued`` snapshot of the job, to be filled in from what is observed."""
    return Snapshot(
        job_id=spec["job_id"],
        name=spec["name"],
        state="queued",
        host=spec.get("host", host),
        observed_at=time.time(),
        resume_attempt=int(spec.get("attempt", 1)),
        audit=list((spec.get("audit") or {}).get("findings", [])),
    )


def fill_from_records(
    transport: Transport,
    snap: Snapshot,
    control: str,
    status: dict[str, Any] | None,
    exit_rec: dict[str, Any] | None,
    log_lines: int,
) -> None:
    """Times, exit, heartbeat, progress and log tail from the agent's records (the state is
    taken from ``exit_rec`` when given)."""
    now = snap.observed_at
    if status is not None:
        snap.started_at = status.get("started_at")
        snap.restarts = int(status.get("restart") or 0)
    snap.resources = _json(transport, f"{control}/resources.json")
    if exit_rec is not None:
        snap.resources = (snap.resources or {}) | {
            "oom_kill_start": exit_rec.get("oom_kill_start"),
            "oom_kill": exit_rec.get("oom_kill"),
        }
        snap.state = str(exit_rec["state"])
        snap.exit_code = exit_rec.get("exit_code")
        snap.signal = exit_rec.get("signal")
        snap.ended_at = exit_rec.get("ended_at")
        snap.started_at = exit_rec.get("started_at", snap.started_at)
        if snap.state == "failed":
            snap.error = _json(transport, f"{control}/error.json")
    beat = _json(transport, f"{control}/heartbeat.json")
    if beat is not None:
        snap.heartbeat_seq = beat.get("seq")
        snap.heartbeat_age = max(0.0, now - float(beat.get("wall", now)))
    snap.progress = last_progress(transport, control)
    held = getattr(transport, "log_lines", {}).get(control)
    if held is not None:  # the watcher's lines, cleaned once as they arrived
        snap.log_tail = list(held[-log_lines:]) if log_lines > 0 else []
    else:
        snap.log_tail = clean_log(transport.tail(f"{control}/log", 16384), log_lines)


def explain(snap: Snapshot) -> Snapshot:
    """Add the diagnosis of a failed or preempted job (unless one is already set)."""
    if snap.diagnosis is not None:
        return snap
    if snap.state == "failed":
        snap.diagnosis = diagnose_failure(snap)
    elif snap.state == "preempted":
        snap.diagnosis = (
            "preempted: the job saved at a step boundary and stopped. Re-run the cell (or "
            f"`rgt resume {snap.name}`) to continue from its latest checkpoint."
        )
    return snap


def agent_never_reported(transport: Transport, control: str, lines: int = 6) -> str:
    """Why a job whose agent died before its first report is lost: the end of ``agent.log``
    (where the interpreter wrote why it could not start), when it can be read."""
    where = f"{control}/agent.log"
    try:
        tail = clean_log(transport.tail(where, 4096), lines)
    except OSError:
        tail = []
    tail = [line for line in tail if line.strip()]
    if not tail:
        return f"the agent never reported; see {where}"
    return f"the agent never reported; {where} ends with: " + " | ".join(tail)


def diagnose_failure(snap: Snapshot) -> str:
    """A one-line diagnosis of a failed job with its fixed remedy (run.md's failure triage,
    :mod:`.diagnose`), from its exit record, error record, log tail and progress."""
    from .diagnose import classify

    if snap.error is not None and snap.error.get("kind") == "not_deployed":
        return str(snap.error.get("message"))
    res = snap.resources or {}
    found = classify(
        exit_code=snap.exit_code,
        signal=snap.signal,
        log_lines=snap.log_tail,
        error=snap.error,
        progress=[snap.progress] if snap.progress else None,
        oom_kills_before=res.get("oom_kill_start"),
        oom_kills_after=res.get("oom_kill"),
        state=snap.state,
    )
    if found is None:
        return f"exited with code {snap.exit_code}"
    return f"{found.summary}. Fix: {found.remedy}"
