"""The socket an SSH connection runs over: a TCP connection to the host, or a channel through
its ProxyJump hops (an alias, ``user@host:port``, ``ssh://...``, or a comma-separated chain of
them, each hop reached through the one before, as OpenSSH does)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import paramiko

from ...errors import SSHError
from .hosts import HostSpec, jump_hops
from .liveness import handshake_timeout

#: The most hops a ProxyJump chain may take, counting the hops' own ProxyJump (a loop in the
#: config ends here rather than recursing).
MAX_HOPS = 8
_HOPS = threading.local()


class Hop(Protocol):
    """A hop's connection (an :class:`~rgt_jupyter.transport.ssh.SSHTransport`)."""

    def channel(
        self, kind: str = ..., dest: tuple[str, int] | None = ...
    ) -> tuple[Any, paramiko.Channel, Any]: ...


#: How a hop's connection is had: ``connect(alias, project, via)``, ``via`` the hops before it.
Connect = Callable[[str, "Path | None", "str | None"], Hop]


def open_socket(spec: HostSpec, project: Path | None, connect: Connect) -> Any:
    """A direct TCP socket, or a channel through the ProxyJump hops (``alias``,
    ``user@host:port``, or a comma-separated chain of them): the last hop's connection, had
    through ``connect`` (the process's one per hop and chain), reached through those before it,
    as OpenSSH's ``ProxyJump a,b`` reaches b through a and the target through b."""
    if spec.proxy_jump:
        depth = getattr(_HOPS, "depth", 0)
        if depth >= MAX_HOPS:
            raise SSHError(
                "usage",
                f"the ProxyJump chain to {spec.alias} takes more than {MAX_HOPS} hops: does a "
                "hop's own ProxyJump lead back to it? Check ~/.ssh/config",
            )
        _HOPS.depth = depth + 1  # held while the hop connects: a loop of hops ends here
        try:
            hops = jump_hops(spec.proxy_jump)
            jump = connect(hops[-1], project, ",".join(hops[:-1]) or None)
            _, chan, _ = jump.channel("direct-tcpip", (spec.hostname, spec.port))
            return chan
        except paramiko.ChannelException as exc:
            raise SSHError(
                "connection_refused",
                f"{spec.proxy_jump} could not reach {spec.hostname}:{spec.port} ({exc})",
            ) from exc
        finally:
            _HOPS.depth = depth
    limit = handshake_timeout()
    try:
        sock = socket.create_connection((spec.hostname, spec.port), timeout=limit)
        # Requests are small and answered one by one: never hold one back for Nagle.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    except ConnectionRefusedError as exc:
        raise SSHError(
            "connection_refused",
            f"{spec.alias} ({spec.hostname}:{spec.port}) "
            "refused the connection: is sshd running and the port right?",
        ) from exc
    except TimeoutError as exc:
        raise SSHError(
            "timeout",
            f"{spec.alias} ({spec.hostname}:{spec.port}) did not answer "
            f"within {limit:g} s: is the host up and the address right?",
        ) from exc
    except OSError as exc:
        raise SSHError("transport_unavailable", f"cannot reach {spec.alias}: {exc}") from exc
