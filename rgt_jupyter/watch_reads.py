"""What the watcher reads, and how: the probe's source, a byte-offset follower of a growing file
(:class:`Lines`), and a transport answering a probed job's reads from the probe
(:class:`CachedReads`), so the status rules run unchanged on a batched look."""

from __future__ import annotations

import base64
import time
from collections import deque
from pathlib import Path
from typing import Any

from .status import clean_log
from .transport import ExecResult, FileStat, Transport
from .transport.base import ReadStream


def probe_source() -> str:
    """The probe's source, run over SSH with ``python3 -c``."""
    return (Path(__file__).resolve().parent / "probe.py").read_text()


class Lines:
    """A byte-offset follower of one growing file: complete lines, the newest kept in a ring."""

    def __init__(self, offset: int, keep: int = 400) -> None:
        self.offset = offset  # next byte to read; negative: start that far before the end
        self.partial = b""
        self.ring: deque[bytes] = deque(maxlen=keep)
        self.size: int | None = None
        self.mtime: float | None = None
        self.resets = 0

    @property
    def boundary(self) -> int:
        """The offset just after the last complete line read."""
        return max(0, self.offset) - len(self.partial)

    @property
    def pending(self) -> bool:
        """More bytes are in the file than were read."""
        return self.size is not None and self.offset >= 0 and self.size > self.offset

    def feed(self, chunk: dict[str, Any]) -> list[tuple[bytes, int]]:
        """Take one answer of :func:`.probe.read_from`; return the new complete lines with the
        offset just after each."""
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
            self.partial = b""
        base = start - len(self.partial)
        buf = self.partial + data
        self.offset = start + len(data)
        parts = buf.split(b"\n")
        self.partial = parts.pop()
        out = []
        for part in parts:
            base += len(part) + 1
            out.append((part, base))
            self.ring.append(part)
        return out

    def flush(self) -> list[tuple[bytes, int]]:
        """The unterminated last line, once the file is complete."""
        if not self.partial:
            return []
        line, self.partial = self.partial, b""
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
    """Lines of a log as text: replacement-decoded, ANSI codes dropped, ``\\r`` progress reduced
    to its last state, long lines capped."""
    return clean_log(b"\n".join(raw) + b"\n", len(raw)) if raw else []


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
        #: Progress records already parsed, by control dir (:func:`.status.progress_records`).
        self.records: dict[str, list[dict[str, Any]]] = {}
        #: The log's newest lines already cleaned, by control dir.
        self.log_lines: dict[str, list[str]] = {}

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
