"""The SSH transport (paramiko): hosts from ``~/.ssh/config``, keys checked against known_hosts.

Host keys: the user's ``~/.ssh/known_hosts``, any ``UserKnownHostsFile`` the config names and the
project's ``.rgt/known_hosts`` are honoured. An unknown host is refused with its fingerprint and
the command that trusts it (``rgt trust-host ALIAS``); a changed key is refused loudly. Nothing is
sent past key exchange to a host that was not verified.

One connection per host per process (:func:`connect`); a dropped connection is re-opened on the
next call, and a connection that cannot be made raises :class:`SSHError` with a ``kind``
(``auth_failed``, ``host_key_unknown``, ``host_key_mismatch``, ``connection_refused``,
``timeout``, ``no_sftp``, ``transport_unavailable``) and a message that says what to do.

Dead peers: a host (or a network path) can go silent without closing anything, no FIN, no RST,
and a read would then wait forever. Each connection is watched: once the server has sent nothing
for ``RGT_SSH_ALIVE_S`` seconds (default 15) it is sent a keepalive it must answer (a global
request with want-reply), and once it has sent nothing for 4 such intervals the connection is
closed, so every call waiting on it ends with an :class:`SSHError` of kind ``timeout`` ("connection
lost ..."); the next call connects again. The SSH handshake is held to the same limit (at most
15 s), and the OpenSSH client that carries large reads gets the same ``ServerAliveInterval`` and
``ServerAliveCountMax`` (:mod:`.stream`).
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import select
import shlex
import stat as stat_mod
import threading
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, cast

import paramiko

from ...errors import SSHError
from ..base import ExecResult, FileStat, ReadStream, Transport
from . import stream
from .hops import open_socket
from .hosts import RefuseUnknown, fingerprint, resolve
from .liveness import HeardSocket, Liveness, handshake_timeout
from .opener import Streams

_log = logging.getLogger(__name__)

#: Reads of at least this many bytes go over a stream (:mod:`.stream`), smaller ones over SFTP.
STREAM_MIN_BYTES = 8 << 20


#: paramiko starts a re-key after 512 MiB, and a re-key it starts while a channel is busy
#: receiving can stall until its 30 s timeout (paramiko issue #822). OpenSSH servers re-key on
#: their own schedule (per cipher), and a server-started re-key has no such race, so ours waits
#: far longer: the server's limit always comes first.
REKEY_AFTER = 1 << 40


def _transport_factory(sock: Any, **kwargs: Any) -> paramiko.Transport:
    transport = paramiko.Transport(sock, **kwargs)
    packetizer = transport.packetizer
    packetizer.REKEY_BYTES = REKEY_AFTER
    packetizer.REKEY_PACKETS = REKEY_AFTER
    options = transport.get_security_options()
    preferred = [c for c in stream.PREFERRED_CIPHERS if c in options.ciphers]
    options.ciphers = (*preferred, *(c for c in options.ciphers if c not in preferred))
    return transport


class SSHTransport(Transport):
    """A host reached over SSH. Commands go over exec channels, files over one SFTP session."""

    name = "ssh"
    bulk = True

    def __init__(self, alias: str, project: Path | None = None, via: str | None = None) -> None:
        self.alias = alias
        self.host = alias
        self.project = project
        self.spec = resolve(alias, project)
        if via is not None:  # a hop of a chain: reached through the hops before it
            self.spec.proxy_jump = via
        self._client: paramiko.SSHClient | None = None
        self._alive: Liveness | None = None  # the open connection's dead-peer watchdog
        self._sftp: paramiko.SFTPClient | None = None
        self._lock = threading.RLock()
        self._home: str | None = None
        self._dirs: set[str] = set()  # directories known to exist: each costs a round trip
        self.streams = Streams(self)  # how bulk streams open (:mod:`.opener`)
        self._rtt: float | None = None

    # -- connection

    def client(self) -> paramiko.SSHClient:
        """The open connection, (re)connecting when needed."""
        with self._lock:
            transport = self._client.get_transport() if self._client else None
            if transport is not None and transport.is_active():
                return cast(paramiko.SSHClient, self._client)
            self._sftp = None
            if self._alive is not None:
                self._alive.stop()
                self._alive = None
            self._client = self._connect()
            return self._client

    def _lost(self, reason: str, what: str = "", maybe_ran: bool = False) -> SSHError:
        """The error of a call whose connection the watchdog gave up (the host went silent)."""
        ran = f" {what} may or may not have completed there." if maybe_ran and what else ""
        return SSHError(
            "timeout",
            f"connection lost: {self.alias} stopped answering ({reason}).{ran} The host or the "
            "network to it is stalled (this says nothing about jobs running there). Try again "
            f"once `ssh {self.alias} true` answers (RGT_SSH_ALIVE_S sets how soon a silent host "
            "is given up).",
            maybe_ran=maybe_ran,
        )

    def _dead(self) -> str | None:
        """Why the watchdog gave the open connection up, if it did."""
        return self._alive.dead if self._alive is not None else None

    def _connect(self) -> paramiko.SSHClient:
        spec = self.spec
        client = paramiko.SSHClient()
        for path in spec.known_hosts:  # read as "system" keys: never written back
            if path.exists():
                client.load_system_host_keys(str(path))
        client.set_missing_host_key_policy(RefuseUnknown(spec))
        limit = handshake_timeout()
        sock = HeardSocket(open_socket(spec, self.project, connect))
        started = time.monotonic()
        try:
            client.connect(
                spec.hostname,
                port=spec.port,
                username=spec.user,
                key_filename=spec.identity_files or None,
                timeout=limit,
                banner_timeout=limit,
                auth_timeout=limit,
                sock=sock,
                allow_agent=True,
                look_for_keys=not spec.identity_files,
                transport_factory=_transport_factory,
            )
        except SSHError:
            client.close()
            raise
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise SSHError(
                "host_key_mismatch",
                f"THE HOST KEY OF {spec.alias} ({spec.key_name}) HAS CHANGED: it now presents "
                f"{fingerprint(exc.key)}, known_hosts has {fingerprint(exc.expected_key)}. This "
                "can be a re-created machine or someone in the middle. Nothing was sent. Verify "
                "the new key with the machine's console; only then remove the old entry "
                f"(ssh-keygen -R '{spec.key_name}') and run `rgt trust-host {spec.alias}`.",
            ) from exc
        except paramiko.AuthenticationException as exc:
            client.close()
            if "timeout" in str(exc).lower():
                raise self._handshake_stalled(limit) from exc
            raise SSHError(
                "auth_failed",
                f"{spec.alias} refused our keys (user {spec.user or 'default'}): add your public "
                "key to the remote ~/.ssh/authorized_keys, or set IdentityFile for this Host in "
                "~/.ssh/config",
            ) from exc
        except TimeoutError as exc:
            client.close()
            raise self._handshake_stalled(limit) from exc
        except (paramiko.SSHException, OSError, EOFError) as exc:
            client.close()
            cause = exc.__cause__ or exc.__context__
            late = time.monotonic() - started >= limit  # paramiko's own waits ran out
            if late or isinstance(cause, TimeoutError) or "timed out" in str(exc).lower():
                raise self._handshake_stalled(limit) from exc
            if "banner" in str(exc):
                raise SSHError(
                    "transport_unavailable",
                    f"{spec.alias} ({spec.hostname}:{spec.port}) closed the connection before "
                    "the SSH handshake: is sshd running there (and nothing else on that port)? "
                    f"Check with `ssh {spec.alias} true`, then try again.",
                ) from exc
            raise SSHError("transport_unavailable", f"{spec.alias}: {exc}") from exc
        transport = client.get_transport()
        assert transport is not None
        self._alive = Liveness(transport, sock, spec.alias)
        return client

    def _handshake_stalled(self, limit: float) -> SSHError:
        spec = self.spec
        return SSHError(
            "timeout",
            f"{spec.alias} ({spec.hostname}:{spec.port}) accepted the connection but the SSH "
            f"handshake did not complete within {limit:g} s: the host or the network to it is "
            f"stalled. Try again once `ssh {spec.alias} true` answers.",
        )

    def sftp(self) -> paramiko.SFTPClient:
        """The SFTP session on the open connection."""
        with self._lock:
            client = self.client()
            if self._sftp is None or self._sftp.sock.closed:
                try:
                    self._sftp = client.open_sftp()
                except paramiko.SSHException as exc:
                    transport = client.get_transport()
                    if transport is None or not transport.is_active():
                        raise  # the connection dropped: not a missing subsystem
                    raise SSHError(
                        "no_sftp",
                        f"{self.alias} offers no SFTP subsystem ({exc}): "
                        "enable `Subsystem sftp` in its sshd_config",
                    ) from exc
            return self._sftp

    def _retry(self, op: Any) -> Any:
        """Run an SFTP operation (one at a time: the session is shared by the watcher thread);
        after a dropped connection, reconnect once and retry. A connection given up because the
        host went silent is not retried here: the call fails at once, the next one reconnects."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    return op(self.sftp())
                except (EOFError, paramiko.SSHException, OSError) as exc:
                    if isinstance(exc, OSError) and exc.errno is not None:
                        raise  # a real answer from the server (no such file, permission denied)
                    dead = self._dead()
                    self.close()
                    if dead is not None:
                        raise self._lost(dead) from exc
                    if attempt == 2:
                        raise SSHError(
                            "transport_unavailable", f"lost the connection to {self.alias}: {exc}"
                        ) from exc
            raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the connection (and a stream started ahead that was not taken)."""
        self.streams.drop()
        with self._lock:
            if self._alive is not None:
                self._alive.stop()
                self._alive = None
            client, self._client = self._client, None
            self._sftp = None
            self._dirs.clear()
            if client is not None:
                client.close()

    def channel(
        self, kind: str = "session", dest: tuple[str, int] | None = None, **options: int
    ) -> tuple[paramiko.Transport, paramiko.Channel, Liveness | None]:
        """A new channel on the open connection, with its transport and watchdog: ``kind``
        ``session`` (``options``: paramiko's ``window_size``, ``max_packet_size``) or
        ``direct-tcpip`` to ``dest``. A connection kept from an earlier call can be dead before
        paramiko has noticed (a link reset while idle): opening a channel on it fails before any
        command is sent, so it is dropped and a fresh one opened, once. A channel the server
        refuses (:class:`paramiko.ChannelException`) is its answer, raised as it is."""
        src = ("127.0.0.1", 0) if dest is not None else None
        for attempt in (1, 2):
            with self._lock:
                kept = self._client is not None
            alive: Liveness | None = None
            try:
                transport = self.client().get_transport()
                alive = self._alive
                assert transport is not None
                limit = handshake_timeout()
                chan = transport.open_channel(kind, dest, src, timeout=limit, **options)
                return transport, chan, alive
            except paramiko.ChannelException:
                raise
            except (paramiko.SSHException, EOFError, OSError) as exc:
                dead = alive.dead if alive is not None else None
                self.close()
                if dead is not None:
                    raise self._lost(dead) from exc
                if attempt == 2 or not kept:
                    raise SSHError("transport_unavailable", f"{self.alias}: {exc}") from exc
                _log.debug("%s: the kept connection was dead (%s); opening anew", self.alias, exc)
        raise AssertionError("unreachable")

    # -- the interface

    def exec(
        self, argv: list[str], *, stdin: bytes | None = None, timeout: float | None = 60.0
    ) -> ExecResult:
        command = shlex.join(argv)
        _log.debug("%s$ %s", self.alias, " ".join(command.split())[:300])
        try:
            transport, chan, alive = self.channel()
        except paramiko.ChannelException as exc:
            raise SSHError("transport_unavailable", f"{self.alias}: {exc}") from exc
        chan.settimeout(timeout)
        try:
            chan.exec_command(command)
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            out, err = bytearray(), bytearray()
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                if chan.recv_ready():
                    out += chan.recv(1 << 16)
                elif chan.recv_stderr_ready():
                    err += chan.recv_stderr(1 << 16)
                elif (
                    chan.exit_status_ready()
                    and not chan.recv_ready()
                    and not chan.recv_stderr_ready()
                ):
                    break
                else:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise SSHError(
                            "timeout",
                            f"{self.alias}: {argv[0]} ran past {timeout} s",
                            maybe_ran=True,
                        )
                    # Sleep until data or the end arrives (the channel's pipe), not in a spin.
                    wait = 1.0 if left is None else min(left, 1.0)
                    if not select.select([chan], [], [], wait)[0] or chan.eof_received:
                        chan.status_event.wait(0.05)
            while chan.recv_ready():
                out += chan.recv(1 << 16)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(1 << 16)
            code = chan.recv_exit_status()
            if code == -1 and not transport.is_active():  # closed with no exit status
                raise EOFError("the connection closed before the command's exit status came")
        except TimeoutError as exc:
            raise SSHError(
                "timeout", f"{self.alias}: {argv[0]} ran past {timeout} s", maybe_ran=True
            ) from exc
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise self._dropped(argv[0], transport, alive, exc) from exc
        finally:
            with contextlib.suppress(paramiko.SSHException, EOFError, OSError):
                chan.close()  # on a dropped connection there is nothing left to close
        return ExecResult(tuple(argv), code, bytes(out), bytes(err))

    def _dropped(
        self,
        what: str,
        transport: paramiko.Transport,
        alive: Liveness | None,
        exc: BaseException,
    ) -> SSHError:
        """The error of a command whose channel broke after the command was sent."""
        dead = alive.dead if alive is not None else None
        why = str(exc) or type(exc).__name__
        socket_broke = isinstance(exc, EOFError | OSError)  # before the transport noticed
        if dead is None and transport.is_active() and not socket_broke:
            return SSHError(
                "transport_unavailable",
                f"{self.alias}: the channel of `{what}` failed ({why}); it may or may not have "
                "run there.",
                maybe_ran=True,
            )
        with self._lock:
            if self._alive is alive:  # not a connection opened since by another call
                self.close()
        if dead is not None:
            return self._lost(dead, f"`{what}`", maybe_ran=True)
        return SSHError(
            "transport_unavailable",
            f"the connection to {self.alias} dropped while `{what}` ran ({why}): it may or may "
            "not have completed there. The next call connects again.",
            maybe_ran=True,
        )

    def read_bytes(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        def op(sftp: paramiko.SFTPClient) -> bytes:
            with sftp.open(path, "rb") as fh:
                fh.seek(offset)
                if length is None:
                    # /proc files report size 0: read until EOF.
                    chunks: list[bytes] = []
                    while True:
                        chunk = fh.read(1 << 16)
                        if not chunk:
                            return b"".join(chunks)
                        chunks.append(chunk)
                return bytes(fh.read(length))

        return cast(bytes, self._retry(op))

    def write_bytes(self, path: str, data: bytes, mode: int = 0o644) -> None:
        tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.tmp-{os.getpid()}"

        def op(sftp: paramiko.SFTPClient) -> None:
            with sftp.open(tmp, "wb") as fh:
                fh.chmod(mode)
                fh.write(data)
            sftp.posix_rename(tmp, path)

        self._in_dir(os.path.dirname(path), op)

    def put(self, local: Path, remote: str) -> None:
        tmp = f"{os.path.dirname(remote)}/.{os.path.basename(remote)}.tmp-{os.getpid()}"

        def op(sftp: paramiko.SFTPClient) -> None:
            sftp.put(str(local), tmp)
            sftp.chmod(tmp, stat_mod.S_IMODE(os.stat(local).st_mode))
            sftp.posix_rename(tmp, remote)

        self._in_dir(os.path.dirname(remote), op)

    def _in_dir(self, directory: str, op: Any) -> None:
        """Run a write ``op`` in ``directory``, making it first; a cached directory that
        vanished meanwhile is made again, once."""
        self.makedirs(directory)
        try:
            self._retry(op)
        except FileNotFoundError:
            self._dirs.discard(directory)
            self.makedirs(directory)
            self._retry(op)

    def open_read(self, path: str, offset: int = 0) -> ReadStream:
        found = self.stat(path)
        if found is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        if found.size - offset >= STREAM_MIN_BYTES:
            return self._open_stream(path, offset)
        return self._open_sftp(path, offset)

    def round_trip(self) -> float:
        """The shortest of three keepalive round trips on the open connection (seconds)."""
        if self._rtt is None:
            transport = self.client().get_transport()
            assert transport is not None
            best = float("inf")
            for _ in range(3):
                started = time.monotonic()
                transport.global_request("keepalive@openssh.com", wait=True)
                best = min(best, time.monotonic() - started)
            self._rtt = best
        return self._rtt

    def _open_stream(self, path: str, offset: int) -> ReadStream:
        return self.streams.open(stream.read_command(path, offset), path)

    @property
    def last_stream(self) -> str | None:
        """How the last stream travelled (``openssh``, ``paramiko``), None before one."""
        return self.streams.last

    def exec_stream(
        self,
        argv: list[str],
        source: Iterable[bytes] | None = None,
        what: str = "",
        size_hint: int | None = None,
        hello: bytes = b"",
    ) -> ReadStream:
        """The output of ``argv`` as a stream, the chunks of ``source`` as its input: the way
        bulk transfers travel (the OpenSSH client where usable, else a channel with a large
        window; a transfer of fewer than :data:`STREAM_MIN_BYTES` (``size_hint``) takes a channel
        of the open connection, which costs no new handshake). ``hello``: what the command
        writes before it reads its input, read here (:mod:`.opener`). A stream that ends before
        the command reported success raises :class:`~rgt_jupyter.errors.TransportError`."""
        small = size_hint is not None and size_hint < STREAM_MIN_BYTES
        return self.streams.open(shlex.join(argv), what or argv[0], source, small, hello)

    def warm_stream(self, argv: list[str]) -> AbstractContextManager[None]:
        """Start ``argv``'s stream through the OpenSSH client now, its input given when
        :meth:`exec_stream` takes it (see the base class)."""
        return self.streams.warm(shlex.join(argv))

    def _open_sftp(self, path: str, offset: int) -> ReadStream:
        """A small file, read whole on the shared SFTP session with its reads pipelined."""

        def op(sftp: paramiko.SFTPClient) -> bytes:
            with sftp.open(path, "rb") as fh:
                size = fh.stat().st_size or 0
                fh.seek(offset)
                if size <= offset:
                    return b""
                fh.prefetch(size, max_concurrent_requests=256)
                return bytes(fh.read(size - offset))

        return cast(ReadStream, io.BytesIO(cast(bytes, self._retry(op))))

    def stat(self, path: str) -> FileStat | None:
        def op(sftp: paramiko.SFTPClient) -> FileStat | None:
            try:
                st = sftp.stat(path)
            except FileNotFoundError:
                return None
            return FileStat(
                int(st.st_size or 0), float(st.st_mtime or 0), stat_mod.S_ISDIR(st.st_mode or 0)
            )

        return cast("FileStat | None", self._retry(op))

    def makedirs(self, path: str, mode: int = 0o755) -> None:
        if path in self._dirs:
            return

        def op(sftp: paramiko.SFTPClient) -> None:
            try:  # the common case: it exists already, one round trip
                if stat_mod.S_ISDIR(sftp.stat(path).st_mode or 0):
                    return
            except FileNotFoundError:
                pass
            parts = [p for p in path.split("/") if p]
            current = "" if path.startswith("/") else "."
            for part in parts:
                current = f"{current}/{part}"
                try:
                    st = sftp.stat(current)
                except FileNotFoundError:
                    try:
                        sftp.mkdir(current, mode)
                    except OSError:
                        st = sftp.stat(current)  # made meanwhile by someone else: fine if a dir
                        if not stat_mod.S_ISDIR(st.st_mode or 0):
                            raise
                    continue
                if not stat_mod.S_ISDIR(st.st_mode or 0):
                    raise NotADirectoryError(errno.ENOTDIR, f"{current} is not a directory")

        self._retry(op)
        self._dirs.add(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(cast(list[str], self._retry(lambda sftp: sftp.listdir(path))))

    def home(self) -> str:
        if self._home is None:
            self._home = cast(str, self._retry(lambda sftp: sftp.normalize(".")))
        return self._home


_CONNECTIONS: dict[tuple[str, str], SSHTransport] = {}


_CONNECTIONS_LOCK = threading.Lock()


def connect(alias: str, project: Path | None = None, via: str | None = None) -> SSHTransport:
    """The process's one transport for ``alias`` (connected lazily, on first use); ``via``: the
    ProxyJump hops to reach it through instead of its own (a hop of a chain)."""
    key = (alias if via is None else f"{via},{alias}", str(project))
    with _CONNECTIONS_LOCK:
        if key not in _CONNECTIONS:
            _CONNECTIONS[key] = SSHTransport(alias, project, via=via)
        return _CONNECTIONS[key]
