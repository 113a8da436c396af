"""The agent's records, read as a careful reader reads what a remote wrote.

Every record of a job's control dir (``status.json``, ``exit.json``, ``heartbeat.json``,
``progress.jsonl``, ``resources.json``, the log) comes from a machine this one does not control:
it may be truncated, of the wrong types, huge, or hostile. Each is read here: a record that
cannot be used is said so (``(None, why)``), never taken for a state; text is cleaned of terminal
control sequences before anything shows it. :class:`StatusRecord` and :class:`ExitRecord` are
the two records every backend's observation shares, typed once they passed their checks.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from ..transport import Transport

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


#: The states the agent writes in ``exit.json``; any other value is not an exit record.
EXIT_STATES = frozenset({"finished", "failed", "preempted"})


#: A shown log line is cut at this many characters.
MAX_LINE = 400


#: The agent's records are small; a larger one is not read (and said so).
MAX_RECORD = 1 << 20


def finite(value: Any) -> float | None:
    """``value`` as a finite number of seconds (a time stamp, a duration), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def whole(value: Any, high: int = 1 << 62) -> int | None:
    """``value`` when it is a whole number in ``0..high``, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        return None
    return value


def shown(value: Any, limit: int = 60) -> str:
    """A value from a record, quoted for a message: printable and short."""
    text = clean_text(repr(value))
    return text if len(text) <= limit else text[:limit] + "..."


def short_text(value: Any, limit: int = 60) -> str:
    """A value of a record as safe, short text (a string as it is, anything else as its repr)."""
    text = clean_text(value if isinstance(value, str) else repr(value))
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


def read_json(transport: Transport, path: str) -> dict[str, Any] | None:
    """A JSON record of the control dir, or None when it is absent or cannot be read."""
    return read_record(transport, path)[0]


#: The largest process id Linux hands out.
PID_MAX = 1 << 22


#: Said of a job whose ``status.json`` was written before the machine last booted.
REBOOTED = "the machine rebooted"


def status_problem(rec: dict[str, Any]) -> str | None:
    """Why a ``status.json`` cannot be used to find the agent (None: it can)."""
    if whole(rec.get("agent_pid"), PID_MAX) in (None, 0):
        return f"its agent_pid {shown(rec.get('agent_pid'))} is not a process id"
    ticks = rec.get("agent_start_ticks")
    if ticks is not None and whole(ticks) is None:
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


@dataclass(frozen=True)
class StatusRecord:
    """The agent's ``status.json``, once :func:`status_problem` found nothing wrong with it:
    which process supervises the job, started when, on which boot."""

    agent_pid: int
    agent_start_ticks: int | None = None
    boot_id: str | None = None
    started_at: float | None = None
    #: How many times a scheduler restarted the job in place.
    restart: int = 0
    #: The job's own process (the agent's child) and its start time.
    job_pid: int | None = None
    job_start_ticks: int | None = None

    @classmethod
    def parse(cls, rec: dict[str, Any]) -> StatusRecord:
        """The typed record of a ``status.json`` (its ``agent_pid`` 0 unless it passed
        :func:`status_problem`: no process is believed from a record that did not)."""
        boot = rec.get("boot_id")
        return cls(
            agent_pid=whole(rec.get("agent_pid"), PID_MAX) or 0,
            agent_start_ticks=whole(rec.get("agent_start_ticks")),
            boot_id=boot if isinstance(boot, str) else None,
            started_at=finite(rec.get("started_at")),
            restart=whole(rec.get("restart")) or 0,
            job_pid=whole(rec.get("job_pid"), PID_MAX) or None,
            job_start_ticks=whole(rec.get("job_start_ticks")),
        )


@dataclass(frozen=True)
class ExitRecord:
    """The agent's ``exit.json`` (written last, once the job ended), once :func:`exit_problem`
    found nothing wrong with it. Values of the wrong type are left out, never shown."""

    #: finished, failed or preempted.
    state: str
    exit_code: int | None = None
    #: The signal that ended the job, cleaned for display (``SIGKILL``).
    signal: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    #: Why the agent ended it, when it says (``walltime``).
    reason: str | None = None
    #: How many checkpoint files the checkpoint dir holds at the end.
    checkpoints: int = 0
    #: Signals the agent received (each ``{"signal": "SIGUSR2", "time": ...}``).
    agent_signals: tuple[dict[str, Any], ...] = ()
    #: The cgroup's OOM-kill counter at the start and at the end of the job.
    oom_kill_start: int | None = None
    oom_kill: int | None = None
    #: Bytes and inodes of the disks of ``$RGT_OUT`` and the checkpoint dir at the end.
    disks: tuple[tuple[str, dict[str, int]], ...] = ()

    @classmethod
    def parse(cls, rec: dict[str, Any]) -> ExitRecord:
        """The typed record of an ``exit.json`` that passed :func:`exit_problem`."""
        sig, reason = rec.get("signal"), rec.get("reason")
        signals = rec.get("agent_signals")
        return cls(
            state=str(rec["state"]),
            exit_code=rec.get("exit_code"),
            signal=clean_text(sig)[:40] if isinstance(sig, str) else None,
            started_at=finite(rec.get("started_at")),
            ended_at=finite(rec.get("ended_at")),
            reason=reason if isinstance(reason, str) else None,
            checkpoints=whole(rec.get("checkpoints")) or 0,
            agent_signals=tuple(s for s in signals if isinstance(s, dict))
            if isinstance(signals, list)
            else (),
            oom_kill_start=whole(rec.get("oom_kill_start")),
            oom_kill=whole(rec.get("oom_kill")),
            disks=_disks(rec.get("disks")),
        )


def _disks(value: Any) -> tuple[tuple[str, dict[str, int]], ...]:
    """The ``disks`` of an exit record, its whole numbers only."""
    if not isinstance(value, dict):
        return ()
    out = []
    for path, facts in value.items():
        if isinstance(path, str) and isinstance(facts, dict):
            kept = {k: n for k, v in facts.items() if (n := whole(v)) is not None}
            out.append((path, kept))
    return tuple(out)


def read_status(transport: Transport, control: str) -> tuple[StatusRecord | None, str | None]:
    """The job's ``status.json``: ``(record, None)``, ``(None, None)`` before the agent wrote
    one, ``(None, why)`` when it cannot be used."""
    rec, why = read_record(transport, f"{control}/status.json")
    if rec is not None:
        why = status_problem(rec)
    return (StatusRecord.parse(rec) if rec is not None and why is None else None), why


def read_exit(transport: Transport, control: str) -> tuple[ExitRecord | None, str | None]:
    """The job's ``exit.json``: ``(record, None)``, ``(None, None)`` while there is none,
    ``(None, why)`` when it is not an exit record the agent wrote."""
    rec, why = read_record(transport, f"{control}/exit.json")
    if rec is not None:
        why = exit_problem(rec)
    return (ExitRecord.parse(rec) if rec is not None and why is None else None), why


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
