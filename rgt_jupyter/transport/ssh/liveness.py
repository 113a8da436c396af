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
import threading
import time
from typing import Any

import paramiko

from . import stream

CONNECT_TIMEOUT_S = stream.CONNECT_S


def handshake_timeout() -> float:
    """Seconds a new connection may take to answer (TCP, banner, key exchange, login): 15, or
    less when ``$RGT_SSH_ALIVE_S`` declares a silent host dead sooner."""
    interval, count = stream.alive_settings()
    return min(CONNECT_TIMEOUT_S, interval * count)


class HeardSocket:
    """The connection's socket (or ProxyJump channel), noting when the server last sent a byte;
    everything else is the socket's own."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.heard = time.monotonic()

    def recv(self, n: int) -> bytes:
        data: bytes = self._sock.recv(n)
        if data:
            self.heard = time.monotonic()
        return data

    def close(self) -> None:
        """Close it. A ProxyJump channel is closed by a message on the hop's connection; when
        that connection has died too (a send fails before paramiko noticed), there is nothing
        left to close, so the failure is dropped: closing never raises."""
        with contextlib.suppress(EOFError, OSError, paramiko.SSHException):
            self._sock.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class Liveness:
    """Dead-peer detection for one connection (see the module docstring): a watchdog thread
    that asks a silent server for an answer and closes the connection when none comes."""

    def __init__(self, transport: paramiko.Transport, heard: HeardSocket, alias: str) -> None:
        self.transport = transport
        self.heard = heard
        self.interval, self.count = stream.alive_settings()
        #: Why the connection was given up (None while it is alive).
        self.dead: str | None = None
        self._stop = threading.Event()
        self._ping: threading.Thread | None = None
        threading.Thread(target=self._run, name=f"rgt-ssh-alive {alias}", daemon=True).start()

    def _run(self) -> None:
        step = min(1.0, self.interval / 4)
        while not self._stop.wait(step):
            if not self.transport.is_active():
                return
            silent = time.monotonic() - self.heard.heard
            if silent >= self.interval * self.count:
                self.dead = (
                    f"nothing came from it for {silent:.0f} s; keepalives every "
                    f"{self.interval:g} s went unanswered"
                )
                self.transport.close()  # every call waiting on the connection ends now
                return
            if silent >= self.interval and (self._ping is None or not self._ping.is_alive()):
                self._ping = threading.Thread(target=self._keepalive, daemon=True)
                self._ping.start()

    def _keepalive(self) -> None:
        # want_reply: a live server must answer (OpenSSH replies "failure" to an unknown request)
        with contextlib.suppress(Exception):  # a closed connection: the watchdog decides
            self.transport.global_request("keepalive@openssh.com", wait=True)

    def stop(self) -> None:
        """Stop watching (the connection is being closed on purpose)."""
        self._stop.set()
