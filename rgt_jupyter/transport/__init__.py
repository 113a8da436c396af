"""Transports: the one small interface every backend (local, SSH) implements."""

from __future__ import annotations

from pathlib import Path

from ..errors import ProfileError, UsageError
from .base import ExecResult, FileStat, Transport
from .kubernetes import KubeTransport
from .local import LocalTransport

__all__ = ["ExecResult", "FileStat", "Transport", "get_transport"]


def get_transport(kind: str, host: str | None = None, project: Path | None = None) -> Transport:
    """The transport for a profile's ``transport`` field (``ssh`` needs the host alias; for
    ``kubernetes`` the host is the namespace)."""

    if kind == "local":
        return LocalTransport()
    if kind == "ssh":
        if not host:
            raise UsageError(
                "this profile runs over SSH: pass --host ALIAS (a Host of ~/.ssh/config), or "
                "set `host` in a profile of your own"
            )
        from .ssh import connect  # deferred: paramiko, only for an ssh profile

        return connect(host, project)
    if kind == "kubernetes":
        return KubeTransport(host or "default")
    raise ProfileError(f"transport {kind!r} is not available")
