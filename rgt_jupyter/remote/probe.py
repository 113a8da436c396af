"""One look at many jobs on one machine: the watcher's poll primitive (stdlib only, Python 3.8+).

Given the control dirs of the jobs a watcher follows on a machine, with the byte offsets it has
already read of each job's ``log`` and ``progress.jsonl``, :func:`probe` returns in one answer what
the status rules need: the agent's records, whether its process is alive and is the job's agent
(its command line names the control dir; checked before ``exit.json`` is read, so a job that ends
between the two reads is never taken for lost), the machine's uptime (heartbeats are aged by it),
the new log and progress bytes from those offsets (so the bytes moved grow with new output, not
with the log's size; the rest of a line longer than what is shown is passed over here), and the
last change of the log and the checkpoint dir (for stall detection).

Locally the watcher calls :func:`probe` in process; over SSH it runs this file's source with
``python3 -c`` on one channel of the existing connection, the request on stdin, the answer on
stdout as JSON.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional

#: At most this many new bytes of a log are returned per look; the rest comes with the next one.
MAX_CHUNK = 1 << 20
#: At most this many bytes of an overlong line are passed over per look (see :func:`read_from`).
MAX_SKIP = 1 << 30
#: A live process shows an empty command line for a moment while it execs (the kernel has put in
#: its new image but not yet its arguments), as the agent does just after its launch: such a
#: process is looked at again, up to this many times, waiting ``EXEC_PAUSE_S`` doubled each time.
EXEC_LOOKS = 8
EXEC_PAUSE_S = 0.002


def _read(path: str, limit: int = 1 << 20) -> Optional[bytes]:
    """At most ``limit`` bytes of ``path`` (None when it cannot be read), in reads sized by the
    file rather than by ``limit``: these records are small, and read every tick."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = []  # type: List[bytes]
        got = 0
        want = max(os.fstat(fd).st_size + 1, 4096)  # /proc files say 0
        while got < limit:
            chunk = os.read(fd, min(limit - got, want))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            want = 1 << 16  # it grew while read: the rest in bounded reads
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _text(path: str, limit: int = 1 << 20) -> Optional[str]:
    data = _read(path, limit)
    return None if data is None else data.decode("utf-8", "replace")


def _pid(value: Any) -> Optional[int]:
    """``value`` when it is a process id, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1 << 22:
        return None
    return value


def _alive(pid: Any, start_ticks: Any) -> bool:
    try:
        data = _read("/proc/%d/stat" % int(pid), 1 << 16)
    except (ValueError, TypeError, OverflowError):
        return False
    if not data:
        return False
    text = data.decode("utf-8", "replace")
    fields = text[text.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return False
    try:
        return start_ticks is None or int(fields[19]) == int(start_ticks)
    except (ValueError, TypeError, OverflowError):
        return False


def _cmdline(pid: int) -> bytes:
    with open("/proc/%d/cmdline" % pid, "rb") as fh:
        return fh.read()


def process_kind(
    pid: int,
    start_ticks: Any,
    control: str,
    alive: Optional[Callable[[int, Any], bool]] = None,
    cmdline: Optional[Callable[[int], bytes]] = None,
) -> str:
    """``agent`` when ``pid`` is alive (started at ``start_ticks``, when given) and its command
    line names the control dir, ``other`` when it is alive but another process, else ``gone``.
    ``alive`` and ``cmdline`` look at the processes (by default this machine's; the status
    rules pass a transport's)."""
    is_alive = alive or _alive
    read = cmdline or _cmdline
    if not is_alive(pid, start_ticks):
        return "gone"
    args = b""
    for look in range(EXEC_LOOKS):
        try:
            args = read(pid)
        except FileNotFoundError:
            return "gone"
        except OSError:
            return "agent"  # the command line is hidden here: the pid and its start time decide
        if args:
            break
        if not is_alive(pid, start_ticks):
            return "gone"
        time.sleep(EXEC_PAUSE_S * 2**look)  # mid-exec: its arguments are not in place yet
    name = control.rstrip("/").rsplit("/", 1)[-1]
    return "agent" if name.encode() in args else "other"


def _mtime(path: Optional[str]) -> Optional[float]:
    if not path:
        return None
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def read_from(
    path: str, offset: int, limit: int = MAX_CHUNK, encode: bool = True, skip: bool = False
) -> Dict[str, Any]:
    """New bytes of ``path`` from ``offset`` (a negative offset: start that many bytes before the
    end, at the next line, or inside one line that fills the whole window). ``offset`` in the
    answer is where the read began; a file that shrank (rewritten) is read again from 0 and says
    so with ``reset``. ``skip``: the reader holds all it shows of the line at ``offset``, so the
    bytes up to its next newline or carriage return (at most ``MAX_SKIP``) are passed over here,
    on the machine that has the file, and counted in ``skipped``; ``data`` begins after them.
    ``data`` is base64 text when ``encode`` (for JSON), else bytes."""
    out: Dict[str, Any] = {
        "size": None,
        "mtime": None,
        "offset": 0,
        "skipped": 0,
        "data": b"",
        "reset": False,
    }
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            out["size"], out["mtime"] = st.st_size, st.st_mtime
            start = int(offset)
            if start < 0:
                start = max(0, st.st_size + start)
                if start > 0:
                    fh.seek(start - 1)
                    if fh.read(1) != b"\n":
                        line = fh.readline(st.st_size - start)
                        if line.endswith(b"\n"):
                            start += len(line)
            elif start > st.st_size:
                start, out["reset"] = 0, True
                skip = False
            fh.seek(start)
            skipped = 0
            while skip and skipped < MAX_SKIP and start + skipped < st.st_size:
                block = fh.read(min(1 << 20, st.st_size - start - skipped))
                ends = [i for i in (block.find(b"\n"), block.find(b"\r")) if i >= 0]
                if ends:
                    skipped += min(ends)
                    break
                skipped += len(block)
            fh.seek(start + skipped)
            out["offset"], out["skipped"] = start, skipped
            out["data"] = fh.read(min(limit, max(0, st.st_size - start - skipped)))
    except OSError:
        pass
    if encode:
        out["data"] = base64.b64encode(out["data"]).decode("ascii")
    return out


def probe_one(item: Dict[str, Any], encode: bool = True) -> Dict[str, Any]:
    """One job's records; see the module docstring."""
    control = item["control"]
    status = _text(os.path.join(control, "status.json"))
    launched = _pid(item.get("pid"))
    pid, ticks = launched, None
    rec = None  # type: Any
    if status:
        try:
            rec = json.loads(status)
        except (ValueError, RecursionError):
            rec = None
        if isinstance(rec, dict) and "agent_pid" in rec:
            pid, ticks = _pid(rec["agent_pid"]), rec.get("agent_start_ticks")
    procs = {}  # type: Dict[str, str]
    if pid is not None:
        procs[str(pid)] = process_kind(pid, ticks, control)
    if isinstance(rec, dict) and procs.get(str(pid)) != "agent":  # an agent gone: its job?
        job_pid = _pid(rec.get("job_pid"))
        if job_pid is not None:
            procs[str(job_pid)] = process_kind(job_pid, rec.get("job_start_ticks"), control)
    if launched is not None and str(launched) not in procs:
        procs[str(launched)] = process_kind(launched, None, control)
    alive = procs[str(pid)] == "agent" if pid is not None else None
    exit_text = _text(os.path.join(control, "exit.json"))  # after the liveness check
    out = {
        "status": status,
        "alive": alive,
        "procs": procs,
        "exit": exit_text,
        "heartbeat": _text(os.path.join(control, "heartbeat.json")),
        "resources": _text(os.path.join(control, "resources.json")),
        "bucket": _text(os.path.join(control, "bucket.json")),
        "findings": _text(os.path.join(control, "findings.json")),
        "cadence": _text(os.path.join(control, "cadence.json")),
        "error": _text(os.path.join(control, "error.json")) if exit_text else None,
        "log": read_from(
            os.path.join(control, "log"),
            int(item.get("log_offset", 0)),
            encode=encode,
            skip=bool(item.get("log_skip")),
        ),
        "progress": read_from(
            os.path.join(control, "progress.jsonl"),
            int(item.get("progress_offset", 0)),
            encode=encode,
        ),
        "ckpt_mtime": _mtime(item.get("ckpt_dir")),
        "agent_log": None,
        "pid": pid,
    }
    if status is None:
        tail = read_from(os.path.join(control, "agent.log"), -4096, 4096, encode=encode)
        out["agent_log"] = tail["data"]
    return out


def probe(items: List[Dict[str, Any]], encode: bool = True) -> Dict[str, Any]:
    """Every job's records, and the machine's boot id (file contents base64 when ``encode``)."""
    boot = _text("/proc/sys/kernel/random/boot_id")
    return {
        "boot_id": boot.strip() if boot else None,
        "uptime": _text("/proc/uptime"),
        "jobs": [probe_one(item, encode) for item in items],
    }


def main() -> None:
    """Read the request (a JSON list of items) on stdin; write the answer as JSON on stdout."""
    items = json.loads(sys.stdin.read() or "[]")
    sys.stdout.write(json.dumps(probe(items)))


if __name__ == "__main__":
    main()
