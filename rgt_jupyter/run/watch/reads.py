"""What the watcher reads, and how: the probe's source, a byte-offset follower of a growing file
(:class:`Lines`), and a transport answering a probed job's reads from the probe
(:class:`CachedReads`), so the status rules run unchanged on a batched look."""

from __future__ import annotations

import base64
import time
from collections import deque
from pathlib import Path
from typing import Any

from ... import remote
from ...jobs.records import clean_line
from ...transport import ExecResult, FileStat, Transport
from ...transport.base import ReadStream


def probe_source() -> str:
    """The probe's source, run over SSH with ``python3 -c``."""
    return remote.source("probe.py").decode()


#: A log line is kept to this many bytes (a shown line is ``MAX_LINE`` characters); the rest of
#: a longer one is counted, not held, so a line of any length costs bounded memory.
LINE_CAP = 4096


class Line(bytes):
    """One line as read (without its newline): the first ``LINE_CAP`` bytes of its last ``\r``
    segment (what a terminal would show), with ``start`` (the file offset where it begins) and ``cut`` (how
    many bytes of it were dropped)."""

    start: int = 0
    cut: int = 0


def _line(data: bytes, start: int, cut: int) -> Line:
    line = Line(data)
    line.start, line.cut = start, cut
    return line


class Lines:
    """A byte-offset follower of one growing file: complete lines, the newest kept in a ring.

    Each line is held to ``cap`` bytes whatever its length; a ``\r`` starts it over (a
    progress bar's earlier states are never shown), so a log of carriage returns or one huge
    line costs no more memory than a short one."""

    def __init__(self, offset: int, keep: int = 400, cap: int = LINE_CAP) -> None:
        self.offset = offset  # next byte to read; negative: start that far before the end
        self.cap = cap
        self.partial = b""  # the unterminated last line, capped
        self.cut = 0  # bytes of it dropped beyond the cap
        self.cr = False  # a carriage return ended it: what follows starts it over
        self.line_start = max(0, offset)  # where the unterminated last line begins
        self.ring: deque[bytes] = deque(maxlen=keep)
        self.size: int | None = None
        self.mtime: float | None = None
        self.resets = 0

    @property
    def boundary(self) -> int:
        """The offset just after the last complete line read."""
        return self.line_start

    @property
    def skippable(self) -> bool:
        """All that is shown of the unterminated line is held: the reader may pass over the
        rest of it up to its next newline or carriage return (:func:`rgt_jupyter.remote.probe.read_from`)."""
        return len(self.partial) >= self.cap and not self.cr

    @property
    def pending(self) -> bool:
        """More bytes are in the file than were read."""
        return self.size is not None and self.offset >= 0 and self.size > self.offset

    def _extend(self, piece: bytes) -> None:
        """Add ``piece`` (no newline in it) to the unterminated line: only its last ``\r``
        segment is kept, and of that its first ``cap`` bytes."""
        body = piece.rstrip(b"\r")
        if body:
            last_cr = body.rfind(b"\r")
            if last_cr >= 0:
                self.partial, self.cut = body[last_cr + 1 : last_cr + 1 + self.cap], 0
                self.cut = len(body) - last_cr - 1 - len(self.partial)
            elif self.cr:
                self.partial, self.cut = body[: self.cap], len(body) - min(len(body), self.cap)
            elif len(self.partial) < self.cap:
                room = self.cap - len(self.partial)
                self.partial += body[:room]
                self.cut += max(0, len(body) - room)
            else:
                self.cut += len(body)
            self.cr = False
        if len(body) < len(piece):
            self.cr = True  # what follows on this line overwrites it

    def feed(self, chunk: dict[str, Any]) -> list[tuple[bytes, int]]:
        """Take one answer of :func:`rgt_jupyter.remote.probe.read_from`; return the new complete lines
        (:class:`Line`) with the offset just after each."""
        if chunk.get("size") is None:
            return []
        self.size, self.mtime = chunk["size"], chunk["mtime"]
        data = chunk["data"]
        if isinstance(data, str):
            data = base64.b64decode(data)
        start = int(chunk["offset"])
        if chunk.get("reset"):
            self.resets += 1
            self.ring.clear()
        if chunk.get("reset") or self.offset < 0 or start != self.offset:
            self.partial, self.cut, self.cr, self.line_start = b"", 0, False, start
        skipped = int(chunk.get("skipped") or 0)  # more of the overlong line, passed over there
        self.cut += skipped
        start += skipped
        self.offset = start + len(data)
        out: list[tuple[bytes, int]] = []
        pos = 0
        while True:
            newline = data.find(b"\n", pos)
            if newline < 0:
                self._extend(data[pos:])
                return out
            self._extend(data[pos:newline])
            end = start + newline + 1
            line = _line(self.partial, self.line_start, self.cut)
            out.append((line, end))
            self.ring.append(line)
            self.partial, self.cut, self.cr, self.line_start = b"", 0, False, end
            pos = newline + 1

    def flush(self) -> list[tuple[bytes, int]]:
        """The unterminated last line, once the file is complete."""
        if not self.partial and not self.cut:
            return []
        line = _line(self.partial, self.line_start, self.cut)
        self.partial, self.cut, self.cr, self.line_start = b"", 0, False, self.offset
        self.ring.append(line)
        return [(line, self.offset)]

    def tail_bytes(self, limit: int = 16384) -> bytes:
        """The newest lines (and the unterminated one) as file bytes, at most ``limit``."""
        out: list[bytes] = [self.partial] if self.partial else []
        size = len(self.partial)
        for line in reversed(self.ring):
            if size + len(line) + 1 > limit:
                break
            out.append(line + b"\n")
            size += len(line) + 1
        return b"".join(reversed(out))


def clean_lines(raw: list[bytes]) -> list[str]:
    """Lines of a log as text: replacement-decoded, terminal sequences and control characters
    dropped, ``\r`` progress reduced to its last state, long lines capped (a :class:`Line` cut
    where it was read says how much more it had)."""
    return [clean_line(r.decode("utf-8", errors="replace"), getattr(r, "cut", 0)) for r in raw]


class CachedReads(Transport):
    """A transport whose reads of a probed job's records are answered from the probe; anything
    else goes to the real transport."""

    def __init__(
        self,
        inner: Transport,
        files: dict[str, bytes | None],
        stats: dict[str, FileStat | None],
        alive: dict[int, bool],
        boot: str | None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.host = inner.host
        self.files = files
        self.stats = stats
        self.alive = alive
        self.boot = boot
        #: Progress records already parsed, by control dir (:func:`~rgt_jupyter.jobs.observe.progress_records`).
        self.records: dict[str, list[dict[str, Any]]] = {}
        #: The log's newest lines already cleaned, by control dir.
        self.log_lines: dict[str, list[str]] = {}
        #: What the probe found at each pid it was asked about (``agent``, ``other``, ``gone``:
        #: its command line checked against the control dir), read by :func:`~rgt_jupyter.jobs.observe.observe_agent`.
        self.procs: dict[int, str] = {}

    def read_bytes(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        if path in self.files:
            data = self.files[path]
            if data is None:
                raise FileNotFoundError(path)
            return data[offset:] if length is None else data[offset : offset + length]
        return self.inner.read_bytes(path, offset, length)

    def stat(self, path: str) -> FileStat | None:
        if path in self.stats:
            return self.stats[path]
        if path in self.files:
            data = self.files[path]
            return None if data is None else FileStat(len(data), time.time(), False)
        return self.inner.stat(path)

    def proc_alive(self, pid: int, start_ticks: int | None) -> bool:
        if int(pid) in self.alive:
            return self.alive[int(pid)]
        if f"/proc/{int(pid)}/stat" in self.files:  # read with the records: the same test
            return Transport.proc_alive(self, pid, start_ticks)
        return self.inner.proc_alive(pid, start_ticks)

    def boot_id(self) -> str | None:
        return self.boot

    def exec(
        self, argv: list[str], *, stdin: bytes | None = None, timeout: float | None = 60.0
    ) -> ExecResult:
        return self.inner.exec(argv, stdin=stdin, timeout=timeout)

    def write_bytes(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self.inner.write_bytes(path, data, mode)

    def put(self, local: Path, remote: str) -> None:
        self.inner.put(local, remote)

    def open_read(self, path: str, offset: int = 0) -> ReadStream:
        return self.inner.open_read(path, offset)

    def makedirs(self, path: str, mode: int = 0o755) -> None:
        self.inner.makedirs(path, mode)

    def listdir(self, path: str) -> list[str]:
        return self.inner.listdir(path)

    def home(self) -> str:
        return self.inner.home()


def as_bytes(data: Any) -> bytes | None:
    """A probe answer's file content as bytes (None stays None)."""
    if data is None:
        return None
    if isinstance(data, bytes):
        return data
    return str(data).encode("utf-8")
