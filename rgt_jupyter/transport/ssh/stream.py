"""Bulk reads over SSH: one remote file, from an offset, as a plain byte stream.

A large pull does not go through SFTP requests. The remote prints the file from the offset on
(:func:`read_command`) and its stdout comes back as one stream, so flow control is the SSH window
alone:

* :class:`OpenSSHStream`: the local OpenSSH client (``ssh``) carries the stream. Its C crypto
  and packet handling run in a process of their own, beside the hashing and writing here. It
  is given the same config file and the same known_hosts files the paramiko connection uses,
  with ``StrictHostKeyChecking=yes`` and ``BatchMode=yes``: it never prompts, never trusts a new
  key and never writes one.
* :class:`ChannelStream`: an exec channel of the open paramiko connection, with a large window
  and large packets; used where there is no ``ssh`` binary, for hosts behind a ProxyJump (whose
  host key policy the client's command line cannot pin), or when ``RGT_SSH_TRANSFER=paramiko``.

Either way, a stream that ends before the remote command reported success raises
:class:`~rgt_jupyter.errors.TransportError` (the pull resumes from its part file); the
sha256 manifest judges the bytes, never the stream.

A silent peer (no FIN, no RST) is found the same way on both: after ``RGT_SSH_ALIVE_S`` seconds
without a byte (default 15) the server is asked for an answer, and after 4 such intervals the
stream is given up (:func:`alive_settings`; OpenSSH's ``ServerAliveInterval`` and
``ServerAliveCountMax``, the paramiko connection's own watchdog).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import paramiko

from ...errors import TransportError

#: Seconds without a byte from the server before it is asked for an answer (keepalive);
#: ``$RGT_SSH_ALIVE_S`` overrides it.
ALIVE_S = 15.0
#: Unanswered intervals after which the server is taken for dead.
ALIVE_COUNT = 4
#: Seconds a new connection may take at most (TCP and handshake).
CONNECT_S = 15.0
#: Seconds an ``ssh`` process that sent all of a file may take to exit.
STALL_S = 60.0
#: The SSH window and packet size offered for a stream channel (paramiko).
WINDOW_BYTES = 16 << 20
PACKET_BYTES = 256 << 10
#: AES-GCM first: with AES instructions in the CPU it is the cheapest cipher at both ends.
PREFERRED_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
_F_SETPIPE_SZ = 1031
#: What ssh prints when the link, not the client, failed.
LINK_FAILURE = re.compile(
    r"Connection (reset|closed|refused|timed out)|Broken pipe|Timeout|timed out|"
    r"Network is unreachable|No route to host|ssh_exchange_identification|kex_exchange_identification",
    re.IGNORECASE,
)


class StreamError(TransportError):
    """A stream that broke off (``kind`` as in :class:`~rgt_jupyter.transport.ssh.SSHError`)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"[{kind}] {message}")
        self.kind = kind


def alive_settings() -> tuple[float, int]:
    """``(interval, count)``: a connection silent for ``interval`` seconds is sent a keepalive
    the server must answer, and one silent for ``interval * count`` seconds is given up as dead.
    The interval is ``$RGT_SSH_ALIVE_S`` (seconds, default 15), the count 4."""
    raw = os.environ.get("RGT_SSH_ALIVE_S", "").strip()
    if not raw:
        return ALIVE_S, ALIVE_COUNT
    try:
        interval = float(raw)
    except ValueError:
        interval = 0.0
    if not interval > 0 or interval > 86400:
        raise StreamError(
            "usage", f"RGT_SSH_ALIVE_S={raw!r}: give the keepalive interval in seconds (e.g. 15)"
        )
    return interval, ALIVE_COUNT


def read_command(path: str, offset: int) -> str:
    """The remote command that prints ``path`` from byte ``offset`` on (path quoted).

    ``cat`` copies in large blocks (``tail -c +N`` copies 8 KiB at a time: many times the system
    calls); the offset is reached by ``dd ... count=0``, which only seeks the shared file
    descriptor, in 128 KiB blocks and then bytes.
    """
    blocks, rest = divmod(int(offset), 1 << 17)
    seek = ""
    if blocks:
        seek += f"dd bs=131072 skip={blocks} count=0 2>/dev/null && "
    if rest:
        seek += f"dd bs=1 skip={rest} count=0 2>/dev/null && "
    return f"{{ {seek}exec cat; }} < {shlex.quote(path)}"


def _remote_error(path: str, code: int, stderr: str) -> OSError:
    text = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {code}"
    if "No such file" in stderr:
        return FileNotFoundError(errno.ENOENT, text, path)
    if "Permission denied" in stderr:
        return PermissionError(errno.EACCES, text, path)
    return OSError(errno.EIO, text, path)


def openssh_binary() -> str | None:
    """The local OpenSSH client, if there is one."""
    return shutil.which("ssh")


def openssh_argv(
    ssh: str,
    alias: str,
    config: Path,
    known_hosts: list[Path],
    command: str,
) -> list[str]:
    """``ssh`` argv that reaches ``alias`` exactly as the paramiko connection does, with host
    keys checked against ``known_hosts`` only and nothing interactive, forwarded or multiplexed."""
    quoted = " ".join('"' + str(p).replace('"', "") + '"' for p in known_hosts)
    interval, count = alive_settings()
    options = {
        "BatchMode": "yes",
        "StrictHostKeyChecking": "yes",
        "UserKnownHostsFile": quoted or "/dev/null",
        "GlobalKnownHostsFile": "/dev/null",
        "UpdateHostKeys": "no",
        "ControlMaster": "no",
        "ControlPath": "none",
        "ClearAllForwardings": "yes",
        "ForwardAgent": "no",
        "ForwardX11": "no",
        "PermitLocalCommand": "no",
        "Compression": "no",
        # Whole seconds only (OpenSSH takes no fractions); the paramiko connection's limits.
        "ConnectTimeout": str(max(1, round(min(CONNECT_S, interval * count)))),
        "ServerAliveInterval": str(max(1, round(interval))),
        "ServerAliveCountMax": str(count),
        "Ciphers": "^" + ",".join(PREFERRED_CIPHERS),
        "LogLevel": "ERROR",
    }
    argv = [ssh, "-F", str(config) if config.exists() else "/dev/null", "-T"]
    for key, value in options.items():
        argv += ["-o", f"{key}={value}"]
    return [*argv, "--", alias, command]


def _feed(source: Iterable[bytes], write: Callable[[bytes], Any], end: Callable[[], Any]) -> None:
    """Write every chunk of ``source`` and then end the input (a thread of its own: the reader
    drains the output meanwhile). A write to a stream that broke off ends quietly: the reader
    reports the break."""
    try:
        for chunk in source:
            write(chunk)
    except (OSError, EOFError, ValueError, paramiko.SSHException):
        return
    try:
        end()
    except (OSError, EOFError, ValueError, paramiko.SSHException):
        pass


class LaterInput:
    """A stream's input given later: iterating it waits until :meth:`give` (or :meth:`cancel`,
    which gives nothing), then yields what was given; it may be iterated again (a replay)."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._source: Iterable[bytes] = ()

    def give(self, source: Iterable[bytes]) -> None:
        """The input: its chunks are sent as the stream takes them."""
        self._source = source
        self._ready.set()

    def cancel(self) -> None:
        """No input: the stream's input ends at once."""
        self._ready.set()

    def __iter__(self) -> Iterator[bytes]:
        self._ready.wait()
        return iter(self._source)


class OpenSSHStream:
    """The output of a remote command through a local ``ssh`` process (see the module
    docstring); ``source`` chunks, when given, are its input."""

    def __init__(self, argv: list[str], path: str, source: Iterable[bytes] | None = None) -> None:
        self.path = path
        self.received = 0
        self._stderr = tempfile.TemporaryFile()
        read_end, write_end = os.pipe()
        try:
            fcntl.fcntl(read_end, _F_SETPIPE_SZ, 1 << 20)  # fewer wake-ups per MiB
        except OSError:
            pass
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL if source is None else subprocess.PIPE,
                stdout=write_end,
                stderr=self._stderr,
                start_new_session=True,  # a Ctrl-C in the kernel is handled here, not by ssh
            )
        finally:
            os.close(write_end)
        self._out = os.fdopen(read_end, "rb", buffering=0)
        self._ended = False
        self._feeder: threading.Thread | None = None
        if source is not None:
            pipe = self._proc.stdin
            assert pipe is not None
            try:
                fcntl.fcntl(pipe.fileno(), _F_SETPIPE_SZ, 1 << 20)  # fewer wake-ups per MiB
            except OSError:
                pass
            self._feeder = threading.Thread(
                target=_feed, args=(source, pipe.write, pipe.close), daemon=True
            )
            self._feeder.start()

    def readinto(self, buf: bytearray | memoryview) -> int:
        """Fill ``buf`` (less only at the end); 0 once the whole file has come."""
        if self._ended:
            return 0
        view = memoryview(buf).cast("B")
        got = 0
        while got < len(view):
            count = self._out.readinto(view[got:])
            if not count:
                break
            got += count
        self.received += got
        if got == 0:
            self._finish()
        return got

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (fewer only at the end); b"" once the whole file has come."""
        buf = bytearray((1 << 20) if n is None or n < 0 else n)
        got = self.readinto(buf)
        return bytes(buf) if got == len(buf) else bytes(buf[:got])

    def _finish(self) -> None:
        self._ended = True
        try:
            code = self._proc.wait(timeout=STALL_S)
        except subprocess.TimeoutExpired:
            self.close()
            raise StreamError("timeout", f"ssh did not exit after sending {self.path}") from None
        self._stderr.seek(0)
        stderr = self._stderr.read().decode(errors="replace")
        if code == 0:
            return
        if code == 255:  # ssh's own failure: the connection, not the file
            raise StreamError(
                "transport_unavailable",
                f"connection lost: the transfer of {self.path} broke off after {self.received} "
                "bytes: "
                + (stderr.strip().splitlines()[-1] if stderr.strip() else "ssh exited 255"),
            )
        raise _remote_error(self.path, code, stderr)

    def close(self) -> None:
        """Stop the transfer (if still running) and release the process."""
        if self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._out.close()
        self._stderr.close()

    def __enter__(self) -> OpenSSHStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ChannelStream:
    """The output of a remote command (``command``, a shell line) through ``chan``, a paramiko
    channel just opened; ``source`` chunks, when given, are its input."""

    def __init__(
        self,
        chan: Any,
        path: str,
        command: str,
        source: Iterable[bytes] | None = None,
    ) -> None:
        self.path = path
        self.received = 0
        self._chan = chan
        interval, count = alive_settings()
        self.stall_s = interval * count
        self._chan.settimeout(self.stall_s)
        self._chan.exec_command(command)
        self._ended = False
        self._broken: StreamError | None = None
        if source is not None:
            threading.Thread(
                target=_feed,
                args=(source, self._chan.sendall, self._chan.shutdown_write),
                daemon=True,
            ).start()
        else:
            self._chan.shutdown_write()

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (fewer only at the end, or before a break, which the next read
        raises: the bytes that came are never dropped); b"" once the whole file has come."""
        if self._broken is not None:
            raise self._broken
        if self._ended:
            return b""
        want = (1 << 20) if n is None or n < 0 else n
        parts: list[bytes] = []
        got = 0
        try:
            while got < want:
                chunk = self._chan.recv(want - got)
                if not chunk:
                    break
                parts.append(chunk)
                got += len(chunk)
        except TimeoutError as exc:
            self._broken = StreamError(
                "timeout",
                f"connection lost: no data for {self.stall_s:g} s while reading {self.path} (the "
                "host or the network to it is stalled)",
            )
            self._broken.__cause__ = exc
        except (EOFError, paramiko.SSHException, OSError) as exc:
            self._broken = StreamError(
                "transport_unavailable",
                f"the connection dropped after {self.received + got} bytes of {self.path}: {exc}",
            )
            self._broken.__cause__ = exc
        if self._broken is not None and not got:
            raise self._broken
        self.received += got
        if self._broken is not None:
            return b"".join(parts)
        if got == 0:
            self._finish()
            return b""
        return b"".join(parts)

    def readinto(self, buf: bytearray | memoryview) -> int:
        """Fill ``buf`` (less only at the end); 0 once the whole file has come."""
        data = self.read(len(buf))
        memoryview(buf).cast("B")[: len(data)] = data
        return len(data)

    def _finish(self) -> None:
        self._ended = True
        code = self._chan.recv_exit_status()  # -1: the channel closed without one
        stderr = b""
        while self._chan.recv_stderr_ready():
            stderr += self._chan.recv_stderr(1 << 16)
        if code == 0:
            return
        if code < 0:
            raise StreamError(
                "transport_unavailable",
                f"the connection dropped after {self.received} bytes of {self.path}",
            )
        raise _remote_error(self.path, code, stderr.decode(errors="replace"))

    def close(self) -> None:
        """Close the channel."""
        try:
            self._chan.close()
        except (OSError, EOFError):
            pass

    def __enter__(self) -> ChannelStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Prefixed:
    """A stream whose first bytes were already read."""

    def __init__(self, first: bytes, rest: OpenSSHStream) -> None:
        self._first = first
        self._rest = rest

    def read(self, n: int = -1) -> bytes:
        if self._first:
            if n is None or n < 0 or n >= len(self._first):
                out, self._first = self._first, b""
            else:
                out, self._first = self._first[:n], self._first[n:]
            return out
        return self._rest.read(n)

    def readinto(self, buf: bytearray | memoryview) -> int:
        if self._first:
            data = self.read(len(buf))
            memoryview(buf).cast("B")[: len(data)] = data
            return len(data)
        return self._rest.readinto(buf)

    def close(self) -> None:
        self._rest.close()

    def __enter__(self) -> Prefixed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
