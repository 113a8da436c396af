"""What a job is doing, decided from its process and artifacts (never from log text).

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

import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from .probe import process_kind
from .transport import Transport

STATES = ("queued", "running", "finished", "failed", "preempted", "lost")
#: A running job is ``stalled`` when neither its log, its checkpoints nor ``job.progress``
#: advanced for ``STALL_K`` x its own median step interval (and at least ``STALL_MIN_S``);
#: a job's spec may set ``stall_k`` and ``stall_min_s``.
STALL_K = 10.0
STALL_MIN_S = 120.0
#: Terminal control sequences: CSI (colours, cursor movement), OSC (titles, hyperlinks,
#: clipboard writes) up to BEL or ST (or the end of the line when unterminated), DCS/SOS/PM/APC
#: strings, the 8-bit CSI/OSC forms, and the other two-byte escapes.
ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b\][^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[PX^_][^\x1b\x9c\n]*(?:\x1b\\|\x9c)?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|\x9d[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
#: What is left of control characters once sequences are gone (tab aside), and the Unicode
#: direction overrides that reorder what a reader sees.
CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
TERMINAL = frozenset({"finished", "failed", "preempted", "lost"})
#: The states the agent writes in ``exit.json``; any other value is not an exit record.
EXIT_STATES = frozenset({"finished", "failed", "preempted"})
#: A launched job whose agent has not reported within this many seconds, and is gone, is lost.
START_GRACE_S = 60.0
MAX_LINE = 400
#: The agent's records are small; a larger one is not read (and said so).
MAX_RECORD = 1 << 20


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
        return (self.ended_at or self.observed_at + (self.clock_offset or 0.0)) - self.started_at


def finite(value: Any) -> float | None:
    """``value`` as a finite number of seconds (a time stamp, a duration), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _count(value: Any, high: int = 1 << 62) -> int | None:
    """``value`` when it is a whole number in ``0..high``, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        return None
    return value


def shown(value: Any, limit: int = 60) -> str:
    """A value from a record, quoted for a message: printable and short."""
    text = clean_text(repr(value))
    return text if len(text) <= limit else text[:limit] + "..."


def read_record(transport: Transport, path: str) -> tuple[dict[str, Any] | None, str | None]:
    """One of the agent's JSON records: ``(record, None)``; ``(None, None)`` when it does not
    exist (yet); ``(None, why)`` when it exists but is not a JSON object that can be read."""
    try:
        data = transport.read_bytes(path, 0, MAX_RECORD + 1)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"{path.rsplit('/', 1)[-1]} cannot be opened ({exc.strerror or exc})"
    if len(data) > MAX_RECORD:
        return None, f"it is larger than {MAX_RECORD >> 20} MiB"
    if not data.strip():
        return None, "it is empty"
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "it is not UTF-8 text"
    except (ValueError, RecursionError) as exc:
        return None, f"it is not valid JSON ({clean_text(str(exc))[:80]})"
    if not isinstance(value, dict):
        return None, f"it holds a JSON {type(value).__name__}, not an object"
    return value, None


def _json(transport: Transport, path: str) -> dict[str, Any] | None:
    """A JSON record of the control dir, or None when it is absent or cannot be read."""
    return read_record(transport, path)[0]


#: The largest process id Linux hands out.
PID_MAX = 1 << 22
#: Said of a job whose ``status.json`` was written before the machine last booted.
REBOOTED = "the machine rebooted"


def status_problem(rec: dict[str, Any]) -> str | None:
    """Why a ``status.json`` cannot be used to find the agent (None: it can)."""
    if _count(rec.get("agent_pid"), PID_MAX) in (None, 0):
        return f"its agent_pid {shown(rec.get('agent_pid'))} is not a process id"
    ticks = rec.get("agent_start_ticks")
    if ticks is not None and _count(ticks) is None:
        return f"its agent_start_ticks {shown(ticks)} is not a start time"
    boot = rec.get("boot_id")
    if boot is not None and not isinstance(boot, str):
        return f"its boot_id {shown(boot)} is not a boot id"
    return None


def exit_problem(rec: dict[str, Any]) -> str | None:
    """Why an ``exit.json`` is not an exit record the agent wrote (None: it is one)."""
    state = rec.get("state")
    if not isinstance(state, str) or state not in EXIT_STATES:
        return f"its state {shown(state)} is not one of {', '.join(sorted(EXIT_STATES))}"
    code = rec.get("exit_code")
    if code is not None and (isinstance(code, bool) or not isinstance(code, int)):
        return f"its exit_code {shown(code)} is not an exit code"
    return None


def clean_text(text: str) -> str:
    """``text`` without terminal control sequences (colours, cursor movement, titles,
    hyperlinks, clipboard writes) and control characters (tabs kept), so it is safe to show."""
    return CONTROL_RE.sub("", ANSI_RE.sub("", text))


def clean_line(line: str, cut_bytes: int = 0) -> str:
    """One log line as it is shown: the last state of a ``\\r`` progress line, cleaned
    (:func:`clean_text`), capped at ``MAX_LINE`` characters. ``cut_bytes``: bytes of the line
    already dropped where it was read (a line too long to keep whole)."""
    line = clean_text(line.rstrip("\r").rsplit("\r", 1)[-1])
    if cut_bytes:
        more = len(line[MAX_LINE:].encode("utf-8", errors="replace")) + cut_bytes
        return line[:MAX_LINE] + f" ... [{more} more bytes]"
    if len(line) > MAX_LINE:
        line = line[:MAX_LINE] + f" ... [{len(line) - MAX_LINE} more characters]"
    return line


def clean_log(data: bytes, max_lines: int) -> list[str]:
    """The last ``max_lines`` lines of a log: decoded with replacement, each cleaned by
    :func:`clean_line` (terminal sequences and control characters dropped, the last ``\\r``
    segment kept, long lines capped)."""
    if max_lines <= 0:
        return []
    raw = data.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    return [clean_line(r.decode("utf-8", errors="replace")) for r in raw[-max_lines:]]


def sane_progress(rec: Any) -> bool:
    """Whether a ``progress.jsonl`` record can be shown: an object whose ``step`` (and ``t``
    and ``total`` when present) are finite numbers."""
    if not isinstance(rec, dict) or finite(rec.get("step")) is None:
        return False
    if "t" in rec and finite(rec["t"]) is None:
        return False
    return rec.get("total") is None or finite(rec["total"]) is not None


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


def _process(transport: Transport, pid: int, ticks: int | None, control: str) -> str:
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
    transport: Transport, spec: dict[str, Any], status: dict[str, Any] | None, boot: str | None
) -> tuple[bool | None, str | None]:
    """Whether the job's agent runs (None: no agent is known yet), and a note when a record
    names a process that is not the agent. The agent is the process ``status.json`` names (on
    this boot), else the one the launch reported; either must name the control dir."""
    control = spec["control_dir"]
    note = None
    known = False
    if status is not None:
        known = True
        pid, ticks = int(status["agent_pid"]), status.get("agent_start_ticks")
        if status.get("boot_id") not in (None, boot):
            note = REBOOTED
        else:
            kind = _process(transport, pid, ticks, control)
            if kind == "agent":
                return True, None
            if kind == "other":
                note = f"status.json names process {pid}, which is not this job's agent"
    launched = _count(spec.get("agent_pid"), PID_MAX)
    if launched and (status is None or launched != status["agent_pid"]):
        known = True
        if _process(transport, launched, None, control) == "agent":
            return True, note
    return (False if known else None), note


def agent_pid(transport: Transport, spec: dict[str, Any]) -> int | None:
    """The pid of the job's agent while it runs, checked as :func:`agent_alive` checks it (a
    process id, on this boot, whose command line names the control dir), else None: the only
    process a signal meant for the job may be sent to, whatever ``status.json`` says."""
    control = spec["control_dir"]
    status, _ = read_record(transport, f"{control}/status.json")
    if status is not None and status_problem(status) is None:
        pid, ticks = int(status["agent_pid"]), status.get("agent_start_ticks")
        same_boot = status.get("boot_id") in (None, transport.boot_id())
        if same_boot and _process(transport, pid, ticks, control) == "agent":
            return pid
    launched = _count(spec.get("agent_pid"), PID_MAX)
    if launched and _process(transport, launched, None, control) == "agent":
        return launched
    return None


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
    status, status_bad = read_record(transport, f"{control}/status.json")
    if status is not None:
        status_bad = status_problem(status)
        status = None if status_bad else status
    notes = [f"cannot read status.json: {status_bad}"] if status_bad else []
    boot = transport.boot_id()
    alive, note = agent_alive(transport, spec, status, boot)
    notes += [note] if note else []
    exit_rec = None
    if alive:
        # While the agent runs, the job runs: the agent writes exit.json once its job ended,
        # moments before it exits itself, so an exit record now is not (yet) the outcome.
        snap.state = "running" if status is not None or status_bad else "queued"
        if notes:
            snap.diagnosis = (
                "; ".join(notes) + ". The state comes from the agent's process: it runs."
            )
        notes = []
    else:
        exit_rec, exit_bad = read_record(transport, f"{control}/exit.json")
        if exit_rec is not None:
            exit_bad = exit_problem(exit_rec)
            exit_rec = None if exit_bad else exit_rec
        notes += [f"cannot read exit.json: {exit_bad}"] if exit_bad else []
        launched = finite(spec.get("launched_at") or spec.get("created_at")) or now
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
        elif exit_rec is None and status is None and spec.get("not_started"):
            snap.state = "failed"  # the launch found on the host that the job never started
            snap.diagnosis = str(spec["not_started"])
        elif exit_rec is None and (alive is False or now - launched > START_GRACE_S):
            snap.state = "lost"
            snap.diagnosis = agent_never_reported(transport, control)
        notes = [n for n in notes if n != REBOOTED]  # an ended job outlives a reboot
    fill_from_records(transport, snap, control, status, exit_rec, log_lines, boot=boot)
    check_stall(transport, spec, snap)
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


def progress_lines(lines: list[str] | list[bytes]) -> list[dict[str, Any]]:
    """The showable records (:func:`sane_progress`) among lines of ``progress.jsonl``; a line
    still being written, a stray value or a hostile one is skipped."""
    out = []
    for line in lines:
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if sane_progress(value):
            out.append(value)
    return out


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


def check_stall(transport: Transport, spec: dict[str, Any], snap: Snapshot) -> None:
    """Mark a running job stalled when neither its log, its checkpoint dir nor its progress
    advanced for ``k`` x its median step interval (at least ``STALL_MIN_S``).

    Ages are taken on the job's machine's clock (file times against the time there now, as its
    agent's heartbeat shows it), so a clock here that is off does not make a job look stalled."""
    if snap.state != "running":
        return
    control = spec["control_dir"]
    records = progress_records(transport, control)
    times = [t for t in (finite(snap.started_at),) if t is not None]
    for path in (f"{control}/log", spec.get("ckpt_dir")):
        st = transport.stat(path) if path else None
        if st is not None:
            times.append(st.mtime)
    if records and finite(records[-1].get("t")) is not None:
        times.append(float(records[-1]["t"]))
    if not times:
        return
    now = snap.observed_at + (snap.clock_offset or 0.0)
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
    status: dict[str, Any] | None,
    exit_rec: dict[str, Any] | None,
    log_lines: int,
    boot: str | None = _ASK,
) -> None:
    """Times, exit, heartbeat, progress and log tail from the agent's records (the state is
    taken from ``exit_rec`` when given and it names one). Values of the wrong type are left
    out, never shown or computed with. ``boot``: the machine's boot id, when already read."""
    now = snap.observed_at
    if status is not None:
        snap.started_at = finite(status.get("started_at"))
        snap.restarts = _count(status.get("restart")) or 0
    snap.resources = _json(transport, f"{control}/resources.json")
    if exit_rec is not None:
        snap.resources = (snap.resources or {}) | {
            "oom_kill_start": exit_rec.get("oom_kill_start"),
            "oom_kill": exit_rec.get("oom_kill"),
        }
        if exit_rec.get("state") in EXIT_STATES:
            snap.state = str(exit_rec["state"])
        code = exit_rec.get("exit_code")
        snap.exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
        sig = exit_rec.get("signal")
        snap.signal = clean_text(sig)[:40] if isinstance(sig, str) else None
        snap.ended_at = finite(exit_rec.get("ended_at"))
        snap.started_at = finite(exit_rec.get("started_at")) or snap.started_at
        if snap.state == "failed":
            snap.error = _json(transport, f"{control}/error.json")
    beat = _json(transport, f"{control}/heartbeat.json")
    if beat is not None:
        snap.heartbeat_seq = _count(beat.get("seq"))
        if boot == _ASK:
            boot = transport.boot_id()
        snap.heartbeat_age, snap.clock_offset = heartbeat_age(transport, beat, now, boot)
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
