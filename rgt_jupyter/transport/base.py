"""The transport interface: exec, put, read at an offset, stat, list, atomic write.

A launcher renders an argv and hands it to :meth:`Transport.exec`; the watcher reads small files
(status, heartbeat, log tail at a byte offset, ``/proc/PID/stat``) through :meth:`read_bytes`;
pull streams files through :meth:`open_read`. Remote paths are plain strings (POSIX); argv items
are never joined into a shell line here without quoting.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import TransportError


class ReadStream(Protocol):
    """A remote file opened for reading from an offset (what :meth:`Transport.open_read` gives)."""

    def read(self, n: int = -1, /) -> bytes:
        """Up to ``n`` bytes; b"" at the end."""

    def readinto(self, buf: bytearray | memoryview, /) -> int:
        """Fill ``buf`` as far as the file goes; 0 at the end."""

    def close(self) -> None:
        """Release the stream."""

    def __enter__(self) -> Any: ...

    def __exit__(self, kind: Any, value: Any, tb: Any, /) -> Any: ...


@dataclass(frozen=True)
class ExecResult:
    """What a command returned."""

    argv: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes

    def check(self) -> ExecResult:
        """Raise :class:`~rgt_jupyter.errors.TransportError` unless the command exited 0."""
        if self.returncode != 0:
            raise TransportError(
                f"command exited {self.returncode}: {' '.join(self.argv[:3])}...\n"
                + self.stderr.decode(errors="replace")[-2000:]
            )
        return self


@dataclass(frozen=True)
class FileStat:
    """Size, mtime and kind of a path."""

    size: int
    mtime: float
    is_dir: bool


class Transport(abc.ABC):
    """Where jobs run. ``host`` names the machine for records and messages."""

    name: str = "abstract"
    host: str = "localhost"
    #: Whether :meth:`exec_stream` carries bulk transfers (many files over one stream, large
    #: files over several); without it files travel one :meth:`open_read` at a time.
    bulk: bool = False

    def exec_stream(
        self,
        argv: list[str],
        source: Iterable[bytes] | None = None,
        what: str = "",
        size_hint: int | None = None,
        hello: bytes = b"",
    ) -> ReadStream:
        """The output of ``argv`` as a stream, the chunks of ``source`` as its input (where
        :attr:`bulk` is set); ``size_hint``: about how many bytes will travel; ``hello``: what
        the command writes before it reads its input (checked, and not part of the stream)."""
        raise NotImplementedError(f"the {self.name} transport carries no bulk streams")

    def warm_stream(self, argv: list[str]) -> AbstractContextManager[None]:
        """Start the stream of ``argv`` ahead of need where that pays (its connection's
        handshake then overlaps what the caller does next): the next :meth:`exec_stream` of the
        same ``argv`` inside the block takes it; one not taken is stopped when the block ends.
        Nothing where streams cost no handshake."""
        return contextlib.nullcontext()

    def round_trip(self) -> float:
        """Seconds a request takes to be answered (0 where the machine is this one)."""
        return 0.0

    @abc.abstractmethod
    def exec(
        self, argv: list[str], *, stdin: bytes | None = None, timeout: float | None = 60.0
    ) -> ExecResult:
        """Run ``argv`` (no shell) and wait for it."""

    @abc.abstractmethod
    def read_bytes(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        """Read ``length`` bytes (all when None) from ``offset``; FileNotFoundError if absent."""

    @abc.abstractmethod
    def write_bytes(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``path`` atomically (temporary name, fsync, rename)."""

    @abc.abstractmethod
    def put(self, local: Path, remote: str) -> None:
        """Copy a local file to ``remote`` atomically, creating parent dirs."""

    @abc.abstractmethod
    def open_read(self, path: str, offset: int = 0) -> ReadStream:
        """Open a remote file for streaming reads from ``offset``."""

    @abc.abstractmethod
    def stat(self, path: str) -> FileStat | None:
        """Stat ``path`` (following symlinks); None when it does not exist."""

    @abc.abstractmethod
    def makedirs(self, path: str, mode: int = 0o755) -> None:
        """Create ``path`` and its parents (no error if present)."""

    @abc.abstractmethod
    def listdir(self, path: str) -> list[str]:
        """Names in a directory; FileNotFoundError if absent."""

    @abc.abstractmethod
    def home(self) -> str:
        """The home directory of the user the transport acts as."""

    # Built on the primitives above, so every transport gets them.

    def read_text(self, path: str) -> str | None:
        """A small text file's content, or None when it does not exist."""
        try:
            return self.read_bytes(path).decode("utf-8", errors="replace")
        except FileNotFoundError:
            return None

    def tail(self, path: str, max_bytes: int = 8192) -> bytes:
        """The last ``max_bytes`` of a file (empty when it does not exist)."""
        st = self.stat(path)
        if st is None:
            return b""
        start = max(0, st.size - max_bytes)
        return self.read_bytes(path, start, st.size - start)

    def boot_id(self) -> str | None:
        """The kernel's boot id: a changed id means the machine rebooted."""
        text = self.read_text("/proc/sys/kernel/random/boot_id")
        return text.strip() if text else None

    def proc_alive(self, pid: int, start_ticks: int | None) -> bool:
        """True when ``pid`` exists, is not a zombie, and (if given) started at ``start_ticks``."""
        text = self.read_text(f"/proc/{int(pid)}/stat")
        if not text:
            return False
        fields = text[text.rindex(")") + 2 :].split()
        if fields[0] in ("Z", "X"):
            return False
        return start_ticks is None or int(fields[19]) == int(start_ticks)
