"""Transports: the one small interface every backend (local, SSH) implements."""

from __future__ import annotations

from pathlib import Path

from .base import ExecResult, FileStat, Transport

__all__ = ["ExecResult", "FileStat", "Transport", "get_transport"]


def get_transport(kind: str, host: str | None = None, project: Path | None = None) -> Transport:
    """The transport for a profile's ``transport`` field (``ssh`` needs the host alias; for
    ``kubernetes`` the host is the namespace)."""
    from ..errors import ProfileError, UsageError

    if kind == "local":
        from .local import LocalTransport

        return LocalTransport()
    if kind == "ssh":
        if not host:
            raise UsageError(
                "this profile runs over SSH: pass --host ALIAS (a Host of ~/.ssh/config), or "
                "set `host` in a profile of your own"
            )
        from .ssh import connect

        return connect(host, project)
    if kind == "kubernetes":
        from ..k8s_launch import KubeTransport

        return KubeTransport(host or "default")
    raise ProfileError(f"transport {kind!r} is not available")
