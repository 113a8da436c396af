"""How a bulk stream of an SSH host is opened (:meth:`SSHTransport.exec_stream`): through the
local OpenSSH client where it works for the host, else an exec channel of the open paramiko
connection (:mod:`.stream`).

Whether the client works is learnt on the first stream, without a connection of its own to ask:
from the stream's first output when its input can be sent again through a channel should the
client fail on its own (keys, options, host key), or from a mark the remote command writes
before it reads any input (``hello``), so an input that cannot be sent twice is held back until
the mark came. A stream may also be started ahead of need (:meth:`Streams.warm`), its input given
when it is taken, so its handshake overlaps what the caller does meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, cast

import paramiko

from ...errors import SSHError
from ..base import ReadStream
from . import stream
from .hosts import ssh_config_path


class Host(Protocol):
    """What the stream side needs of its transport."""

    alias: str
    spec: Any

    def client(self) -> paramiko.SSHClient: ...

    def channel(
        self, kind: str = ..., dest: tuple[str, int] | None = ..., **options: int
    ) -> tuple[Any, paramiko.Channel, Any]: ...

    def close(self) -> None: ...


#: How bulk transfers travel: ``$RGT_SSH_TRANSFER``.
TRANSFER_METHODS = ("auto", "openssh", "paramiko")


def transfer_method() -> str:
    """``$RGT_SSH_TRANSFER`` (``auto``, ``openssh``, ``paramiko``); ``auto`` when unset."""
    method = os.environ.get("RGT_SSH_TRANSFER", "auto").strip().lower() or "auto"
    if method not in TRANSFER_METHODS:
        raise SSHError(
            "usage",
            f"RGT_SSH_TRANSFER={method!r}: use one of {', '.join(TRANSFER_METHODS)}",
        )
    return method


def replayable(source: Iterable[bytes] | None) -> bool:
    """Whether ``source`` gives the same chunks when iterated again (a list, a tuple, or an
    object that says so with ``replayable = True``)."""
    return (
        source is None
        or isinstance(source, list | tuple)
        or bool(getattr(source, "replayable", False))
    )


class Streams:
    """The stream side of one SSH transport (``host``)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.openssh_ok: bool | None = None  # did the ssh binary work for this host?
        self.last: str | None = None  # how the last stream travelled
        self._lock = threading.Lock()
        self._spare: tuple[str, stream.LaterInput, stream.OpenSSHStream] | None = None

    def usable(self, method: str) -> str | None:
        """The ssh binary, when a stream should go through it."""
        if method == "paramiko" or self.openssh_ok is False:
            return None
        binary = stream.openssh_binary()
        if self.host.spec.proxy_jump or binary is None:
            if method == "openssh":
                raise SSHError(
                    "usage",
                    f"RGT_SSH_TRANSFER=openssh: {self.host.alias} "
                    + ("is behind a ProxyJump" if binary else "there is no `ssh` client here")
                    + "; unset it to use the built-in transfer",
                )
            return None
        return binary

    def _argv(self, binary: str, command: str) -> list[str]:
        spec = self.host.spec
        return stream.openssh_argv(binary, spec.alias, ssh_config_path(), spec.known_hosts, command)

    # -- a stream started ahead of need

    @contextlib.contextmanager
    def warm(self, command: str) -> Iterator[None]:
        """Start ``command``'s stream through the OpenSSH client now; the next :meth:`open` of
        the same command inside the block takes it, and one not taken is stopped at its end."""
        binary = self.usable(transfer_method())
        if binary is not None and self._spare is None:
            later = stream.LaterInput()
            reader = stream.OpenSSHStream(self._argv(binary, command), command[:40], later)
            self._spare = (command, later, reader)
        try:
            yield
        finally:
            self.drop()

    def drop(self) -> None:
        """Stop the stream started ahead, if it was not taken."""
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            spare[1].cancel()
            spare[2].close()

    def _take(self, command: str) -> tuple[stream.LaterInput, stream.OpenSSHStream] | None:
        with self._lock:
            spare = self._spare
            if spare is None or spare[0] != command:
                return None
            self._spare = None
        return spare[1], spare[2]

    # -- opening

    def open(
        self,
        command: str,
        what: str,
        source: Iterable[bytes] | None = None,
        channel: bool = False,
        hello: bytes = b"",
    ) -> ReadStream:
        """The output of the shell line ``command`` as a stream, ``source`` its input; a
        command that writes ``hello`` before it reads has it read here (see the module
        docstring). ``channel``: a small transfer, better on the open connection unless a
        stream was started ahead for it."""
        method = transfer_method()
        taken = self._take(command) if self._spare is not None else None
        if taken is not None:
            later, reader = taken
            reader.path = what
            return self._settle(reader, later, source, hello, command, what, channel)
        binary = None if channel and method == "auto" else self.usable(method)
        if binary is not None:
            argv = self._argv(binary, command)
            if self.openssh_ok is None and method == "auto" and not (hello or replayable(source)):
                # An input that cannot be sent twice: learn first whether ssh works here.
                self.openssh_ok = self._works(binary)
                if not self.openssh_ok:
                    return self.open(command, what, source, channel, hello)
            later = stream.LaterInput()
            reader = stream.OpenSSHStream(argv, what, later)
            return self._settle(reader, later, source, hello, command, what, channel)
        return self._channel(command, what, source, hello)

    def _settle(
        self,
        reader: stream.OpenSSHStream,
        later: stream.LaterInput,
        source: Iterable[bytes] | None,
        hello: bytes,
        command: str,
        what: str,
        channel: bool,
    ) -> ReadStream:
        """A started ssh stream given its input; while it is not known whether the client works
        here, its first bytes (the ``hello`` mark, before the input is given, or the first output)
        tell, and a client that failed on its own hands the stream to a channel."""
        if self.openssh_ok is None and (hello or replayable(source)):
            if not hello:
                later.give(source or ())
            first = self._first_bytes(reader, len(hello) if hello else 1 << 20)
            if first is None:  # ssh itself could not connect here: use paramiko from now on
                later.cancel()
                self.openssh_ok = False
                return self.open(command, what, source, channel, hello)
            self.openssh_ok = True
            self.last = "openssh"
            if hello:
                _check_hello(reader, first, hello, what)
                later.give(source or ())
                return cast(ReadStream, reader)
            return cast(ReadStream, stream.Prefixed(first, reader))
        later.give(source or ())
        self.last = "openssh"
        if hello:
            _check_hello(reader, reader.read(len(hello)), hello, what)
        return cast(ReadStream, reader)

    def _channel(
        self, command: str, what: str, source: Iterable[bytes] | None, hello: bytes
    ) -> ReadStream:
        try:
            _, opened, _ = self.host.channel(
                window_size=stream.WINDOW_BYTES, max_packet_size=stream.PACKET_BYTES
            )
            chan = stream.ChannelStream(opened, what, command, source)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            self.host.close()
            raise SSHError("transport_unavailable", f"{self.host.alias}: {exc}") from exc
        self.last = "paramiko"
        if hello:
            _check_hello(chan, chan.read(len(hello)), hello, what)
        return cast(ReadStream, chan)

    def _works(self, binary: str) -> bool:
        """Whether the ssh client reaches this host on its own (keys, options, host key)."""
        reader = stream.OpenSSHStream(
            self._argv(binary, "echo rgt-ok"), "a check of the ssh client"
        )
        try:
            return self._first_bytes(reader) is not None
        finally:
            reader.close()

    def _first_bytes(self, reader: stream.OpenSSHStream, n: int = 1 << 20) -> bytes | None:
        """The first read of a stream, or None when ssh failed before a byte arrived for a
        reason of its own (keys, options, host key) rather than a dropped link."""
        try:
            return reader.read(n)
        except stream.StreamError as exc:
            reader.close()
            if reader.received == 0 and not stream.LINK_FAILURE.search(str(exc)):
                return None
            raise


def _check_hello(
    reader: stream.OpenSSHStream | stream.ChannelStream, got: bytes, hello: bytes, what: str
) -> None:
    """Raise (the stream closed) unless ``got`` is the ``hello`` its command writes first."""
    if got == hello:
        return
    try:
        got += reader.read(120)
    except (OSError, EOFError):
        pass
    reader.close()
    raise stream.StreamError(
        "transport_unavailable",
        f"{what}: the remote command did not start as it should (it said {got[:120]!r}); "
        "the host's shell may print something for every command (its startup files)",
    )
