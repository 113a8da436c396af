"""Transports: the one small interface every backend (local, SSH) implements."""

from __future__ import annotations

from .base import ExecResult, FileStat, Transport

__all__ = ["ExecResult", "FileStat", "Transport", "get_transport"]


def get_transport(kind: str, host: str = "localhost") -> Transport:
    """The transport for a profile's ``transport`` field."""
    if kind == "local":
        from .local import LocalTransport

        return LocalTransport()
    from ..errors import ProfileError

    raise ProfileError(f"transport {kind!r} is not available")
