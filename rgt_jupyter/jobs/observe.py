"""What a job supervised by the agent is doing, decided from its process and artifacts (never
from log text): the rules every backend shares, and the whole of them for the backends whose
control dir the transport reads (``detached``, ``tmux``).

The agent's process (pid, start time and boot id from ``status.json``, or the pid the launch
reported; its command line must name the job's control dir, so a record naming another process
is never believed) alive means ``running``; ``finished`` / ``failed`` / ``preempted`` come from
``exit.json``, the record the agent writes last, and only once the agent is gone. Gone without a
readable exit record means ``lost``. Before the agent's first ``status.json`` the job is
``queued``. A record that cannot be read (truncated, wrong types, an unknown state) is said so
in the diagnosis and never taken for a state.

Ages (heartbeat, stall) are measured on the job's machine's own clocks (its boot-time clock for
the heartbeat, file times against its agent's stamps), so a clock here that is off does not make
a job look stalled or its heartbeat old.
"""

from __future__ import annotations

import math
from typing import Any

from ..remote.probe import process_kind
from ..transport import Transport
from .diagnose import REMEDIES, classify
from .records import (
    PID_MAX,
    REBOOTED,
    ExitRecord,
    StatusRecord,
    clean_log,
    finite,
    progress_lines,
    read_exit,
    read_json,
    read_record,
    read_status,
    whole,
)
from .snapshot import Snapshot, new_snapshot
from .spec import JobSpec

#: A launched job whose agent has not reported within this many seconds, and is gone, is lost.
START_GRACE_S = 60.0


def last_progress(transport: Transport, control: str) -> dict[str, Any] | None:
    """The newest complete record of ``progress.jsonl``."""
    records = progress_records(transport, control)
    return records[-1] if records else None


def process_of(transport: Transport, pid: int, ticks: int | None, control: str) -> str:
    """``agent`` when ``pid`` (started at ``ticks``, when given) is alive and its command line
    names the job's control dir, ``other`` when it is alive but another process, else ``gone``."""
    kinds = getattr(transport, "procs", None)
    if kinds is not None and pid in kinds:  # the watcher's probe looked already
        return str(kinds[pid])
    return process_kind(
        pid,
        ticks,
        control,
        transport.proc_alive,
        lambda p: transport.read_bytes(f"/proc/{p}/cmdline"),
    )


def agent_alive(
    transport: Transport, spec: JobSpec, status: StatusRecord | None, boot: str | None
) -> tuple[bool | None, str | None]:
    """Whether the job's agent runs (None: no agent is known yet), and a note when a record
    names a process that is not the agent. The agent is the process ``status.json`` names (on
    this boot), else the one the launch reported; either must name the control dir."""
    control = spec.control_dir
    note = None
    known = False
    if status is not None:
        known = True
        pid, ticks = status.agent_pid, status.agent_start_ticks
        if status.boot_id not in (None, boot):
            note = REBOOTED
        else:
            kind = process_of(transport, pid, ticks, control)
            if kind == "agent":
                return True, None
            if kind == "other":
                note = f"status.json names process {pid}, which is not this job's agent"
    launched = whole(spec.agent_pid, PID_MAX)
    if launched and (status is None or launched != status.agent_pid):
        known = True
        if process_of(transport, launched, None, control) == "agent":
            return True, note
    return (False if known else None), note


def job_orphan(
    transport: Transport, spec: JobSpec, status: StatusRecord | None, boot: str | None
) -> int | None:
    """The pid of the job's own process when it runs on although its agent is gone (on this
    boot, started when ``status.json`` says, its command line naming the control dir)."""
    if status is None or status.job_pid is None or status.boot_id not in (None, boot):
        return None
    kind = process_of(transport, status.job_pid, status.job_start_ticks, spec.control_dir)
    return status.job_pid if kind == "agent" else None


def agent_lost_text(spec: JobSpec, status: StatusRecord | None, orphan: int) -> str:
    """What a job whose agent died before it is shown with."""
    agent = f" {status.agent_pid}" if status is not None and status.agent_pid else ""
    return (
        f"agent lost: the job's agent{agent} is gone (killed from outside: kill -9, the OOM "
        f"killer) while the job's process {orphan} runs on, unsupervised: no heartbeat, log "
        f"capture of its end or exit record will come. `rgt stop {spec.name}` ends it; it is "
        "not resumed or relaunched while it runs."
    )


def agent_pid(transport: Transport, spec: JobSpec) -> int | None:
    """The pid of the job's agent while it runs, checked as :func:`agent_alive` checks it (a
    process id, on this boot, whose command line names the control dir), else None: the only
    process a signal meant for the job may be sent to, whatever ``status.json`` says."""
    control = spec.control_dir
    status, _ = read_status(transport, control)
    if status is not None:
        pid, ticks = status.agent_pid, status.agent_start_ticks
        same_boot = status.boot_id in (None, transport.boot_id())
        if same_boot and process_of(transport, pid, ticks, control) == "agent":
            return pid
    launched = whole(spec.agent_pid, PID_MAX)
    if launched and process_of(transport, launched, None, control) == "agent":
        return launched
    return None


def observe_agent(transport: Transport, spec: JobSpec, log_lines: int = 12) -> Snapshot:
    """Observe a job from its control dir through ``transport``; see the module docstring for
    the rules."""
    control = spec.control_dir
    snap = new_snapshot(spec, transport.host)
    now = snap.observed_at
    status, status_bad = read_status(transport, control)
    notes = [f"cannot read status.json: {status_bad}"] if status_bad else []
    boot = transport.boot_id()
    alive, note = agent_alive(transport, spec, status, boot)
    notes += [note] if note else []
    exit_rec: ExitRecord | None = None
    if alive:
        # While the agent runs, the job runs: the agent writes exit.json once its job ended,
        # moments before it exits itself, so an exit record now is not (yet) the outcome.
        snap.state = "running" if status is not None or status_bad else "queued"
        if notes:
            snap.diagnosis = (
                "; ".join(notes) + ". The state comes from the agent's process: it runs."
            )
        notes = []
    elif (orphan := job_orphan(transport, spec, status, boot)) is not None:
        # The agent died alone (kill -9, the OOM killer) and its job runs on: running, never
        # lost (a resume now would start a second copy in the same checkpoint dir).
        snap.state, snap.orphan_pid = "running", orphan
        snap.diagnosis = agent_lost_text(spec, status, orphan)
        notes = []
    else:
        exit_rec, exit_bad = read_exit(transport, control)
        notes += [f"cannot read exit.json: {exit_bad}"] if exit_bad else []
        launched = finite(spec.launched_at or spec.created_at) or now
        if exit_rec is None and (status_bad or exit_bad):
            snap.state = "lost"
            snap.diagnosis = (
                "; ".join(notes) + ". The agent is gone and its records cannot be read, so how "
                "the job ended is unknown: look at its log (`rgt watch NAME`) and pull what it "
                "left (`rgt pull NAME`) before trusting any of it."
            )
            notes = []
        elif exit_rec is None and status is not None:
            snap.state = "lost"
            snap.diagnosis = (
                "the agent is gone without an exit record"
                + (f" ({'; '.join(notes)})" if notes else "")
                + ": the job was killed from outside (kill -9, OOM killer, reboot). "
                "Re-run the cell or `rgt resume NAME` to continue from the last checkpoint."
            )
            notes = []
        elif exit_rec is None and status is None and spec.not_started:
            snap.state = "failed"  # the launch found on the host that the job never started
            snap.diagnosis = spec.not_started
        elif exit_rec is None and (alive is False or now - launched > START_GRACE_S):
            snap.state = "lost"
            snap.diagnosis = agent_never_reported(transport, control)
        notes = [n for n in notes if n != REBOOTED]  # an ended job outlives a reboot
    fill_from_records(transport, snap, control, status, exit_rec, log_lines, boot=boot)
    check_stall(transport, spec, snap)
    check_heartbeat(spec, snap)
    check_finished_metrics(transport, spec, snap)
    explain(snap)
    if notes:  # records that could not be read, beside an outcome that could
        snap.diagnosis = "; ".join([*notes, *([snap.diagnosis] if snap.diagnosis else [])])
    return snap


def progress_records(
    transport: Transport, control: str, nbytes: int = 4096
) -> list[dict[str, Any]]:
    """The complete, showable records among the last ``nbytes`` of ``progress.jsonl``, oldest
    first (a transport that already holds them parsed, the watcher's, gives its newest ones)."""
    held = getattr(transport, "records", {}).get(control)
    if held is not None:
        return list(held[-32:])
    text = transport.tail(f"{control}/progress.jsonl", nbytes).decode("utf-8", errors="replace")
    return progress_lines(text.splitlines())


def median_step_interval(records: list[dict[str, Any]]) -> float | None:
    """The median seconds per step between consecutive progress records (None with fewer than
    three records)."""
    rates = []
    for a, b in zip(records, records[1:], strict=False):
        try:
            dt, ds = float(b["t"]) - float(a["t"]), float(b["step"]) - float(a["step"])
        except (KeyError, TypeError, ValueError, OverflowError):
            continue
        if ds > 0 and dt >= 0 and math.isfinite(dt / ds):
            rates.append(dt / ds)
    if len(rates) < 2:
        return None
    rates.sort()
    mid = len(rates) // 2
    return rates[mid] if len(rates) % 2 else (rates[mid - 1] + rates[mid]) / 2


def check_stall(transport: Transport, spec: JobSpec, snap: Snapshot) -> None:
    """Mark a running job stalled when neither its log, its checkpoint dir nor its progress
    advanced for ``spec.stall_k`` x its median step interval (and at least ``spec.stall_min_s``).

    Ages are taken on the job's machine's clock (file times against the time there now, as its
    agent's heartbeat shows it), so a clock here that is off does not make a job look stalled."""
    if snap.state != "running":
        return
    control = spec.control_dir
    records = progress_records(transport, control)
    times = [t for t in (finite(snap.started_at),) if t is not None]
    for path in (f"{control}/log", spec.ckpt_dir):
        st = transport.stat(path) if path else None
        if st is not None:
            times.append(st.mtime)
    if records and finite(records[-1].get("t")) is not None:
        times.append(float(records[-1]["t"]))
    if not times:
        return
    now = snap.observed_at + (snap.clock_offset or 0.0)
    median = median_step_interval(records)
    k = float(spec.stall_k)
    limit = max(float(spec.stall_min_s), k * median if median else 0.0)
    idle = now - max(times)
    if idle < limit:
        return
    snap.stalled_s, snap.stall_limit_s = idle, limit
    pg = spec.stall_pg_timeout_s
    if pg is not None and idle >= pg:
        found = classify(
            exit_code=None,
            signal=None,
            log_lines=snap.log_tail,
            stalled_s=idle,
            pg_timeout_s=pg,
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


#: ``boot`` not given to :func:`fill_from_records`: read it when needed.
_ASK = "?"


def host_uptime(transport: Transport) -> float | None:
    """Seconds since the job's machine booted, on its boot-time clock (``/proc/uptime``)."""
    try:
        text = transport.read_bytes("/proc/uptime").decode("ascii", errors="replace")
        return finite(float(text.split()[0]))
    except (OSError, ValueError, IndexError):
        return None


def heartbeat_age(
    transport: Transport, beat: dict[str, Any], now: float, boot: str | None
) -> tuple[float | None, float | None]:
    """Seconds since the agent's last heartbeat, and how far the job's machine's wall clock is
    ahead of this one's (None when not known).

    The age is the machine's uptime now less the uptime the agent stamped, both on its own
    boot-time clock, so no clock here enters it; only a heartbeat without that stamp (another
    boot, an older agent) is aged by the wall clocks of both machines."""
    wall = finite(beat.get("wall"))
    stamp = finite(beat.get("uptime"))
    if stamp is not None and isinstance(beat.get("boot_id"), str) and beat["boot_id"] == boot:
        uptime = host_uptime(transport)
        if uptime is not None:
            age = max(0.0, uptime - stamp)
            return age, None if wall is None else wall + age - now
    return (None if wall is None else max(0.0, now - wall)), None


def fill_from_records(
    transport: Transport,
    snap: Snapshot,
    control: str,
    status: StatusRecord | None,
    exit_rec: ExitRecord | None,
    log_lines: int,
    boot: str | None = _ASK,
) -> None:
    """Times, exit, heartbeat, progress and log tail from the agent's records (the state is
    taken from ``exit_rec`` when given). Values of the wrong type are left out, never shown or
    computed with. ``boot``: the machine's boot id, when already read."""
    now = snap.observed_at
    if status is not None:
        snap.started_at = status.started_at
        snap.restarts = status.restart
    snap.resources = read_json(transport, f"{control}/resources.json")
    if exit_rec is not None:
        snap.resources = (snap.resources or {}) | {
            "oom_kill_start": exit_rec.oom_kill_start,
            "oom_kill": exit_rec.oom_kill,
            "disks": [facts for _, facts in exit_rec.disks],
        }
        snap.state = exit_rec.state
        snap.exit_code = exit_rec.exit_code
        snap.signal = exit_rec.signal
        snap.ended_at = exit_rec.ended_at
        snap.started_at = exit_rec.started_at or snap.started_at
        if snap.state == "failed":
            snap.error = read_json(transport, f"{control}/error.json")
        if snap.state == "preempted" and exit_rec.reason == "budget":
            snap.failure = "budget"
            snap.diagnosis = (
                "preempted at its budget: the job reached its budget and was told to save and "
                f"stop. Fix: {REMEDIES['budget'][0].replace('JOB', snap.name)}"
            )
    beat = read_json(transport, f"{control}/heartbeat.json")
    if beat is not None:
        snap.heartbeat_seq = whole(beat.get("seq"))
        if boot == _ASK:
            boot = transport.boot_id()
        snap.heartbeat_age, snap.clock_offset = heartbeat_age(transport, beat, now, boot)
    snap.progress = last_progress(transport, control)
    held = getattr(transport, "log_lines", {}).get(control)
    if held is not None:  # the watcher's lines, cleaned once as they arrived
        snap.log_tail = list(held[-log_lines:]) if log_lines > 0 else []
    else:
        snap.log_tail = clean_log(transport.tail(f"{control}/log", 16384), log_lines)


def check_heartbeat(spec: JobSpec, snap: Snapshot) -> None:
    """Flag a running job whose agent has not beaten for a few of its intervals (a stopped
    agent, SIGSTOP, a machine too loaded to schedule it): said, never taken for an end."""
    every = float(spec.heartbeat_s or 1.0)
    limit = max(3 * every, every + 10.0)
    age = snap.heartbeat_age
    if snap.state != "running" or snap.orphan_pid is not None or age is None or age <= limit:
        return
    snap.heartbeat_stale = True
    note = (
        f"heartbeat stale: the agent has not beaten for {age:.0f} s (it beats every {every:g} s):"
        " it may be stopped (SIGSTOP) or starved; the job is not judged from this"
    )
    snap.diagnosis = f"{snap.diagnosis}; {note}" if snap.diagnosis else note


def non_finite(value: Any, where: str = "") -> tuple[str, Any] | None:
    """The first NaN or infinity in a JSON value (``("val.loss", nan)``), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "value", value
    if isinstance(value, dict):
        for key, item in value.items():
            found = non_finite(item, f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value[:10000]):
            found = non_finite(item, f"{where}[{i}]")
            if found is not None:
                return found
    return None


def check_finished_metrics(transport: Transport, spec: JobSpec, snap: Snapshot) -> None:
    """A job that exited 0 but whose metrics became NaN or infinite (in ``job.progress`` or its
    ``results.json``) is shown ``finished`` with the diagnosis beside it, never hidden."""
    if snap.state != "finished" or snap.diagnosis is not None:
        return
    records = progress_records(transport, spec.control_dir)
    found = classify(
        exit_code=0, signal=None, log_lines=snap.log_tail, progress=records, state="finished"
    )
    if found is not None and found.kind == "nan_metrics":
        snap.failure = found.kind
        snap.diagnosis = f"finished, but {found.summary}. Fix: {found.remedy}"
        return
    results, _ = read_record(transport, f"{spec.out_dir}/results.json")
    bad = non_finite(results) if results is not None else None
    if bad is not None:
        remedy = REMEDIES["nan_metrics"][0]
        snap.failure = "nan_metrics"
        snap.diagnosis = f"finished, but results.json holds {bad[0]} = {bad[1]}. Fix: {remedy}"


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
        disks=res.get("disks"),
    )
    if found is None:
        return f"exited with code {snap.exit_code}"
    snap.failure = found.kind
    return f"{found.summary}. Fix: {found.remedy}"
