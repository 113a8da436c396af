"""What a platform call can fail with, and how a secret is kept out of what is said."""

from __future__ import annotations

from typing import Any

from ...errors import RgtError


class ProviderError(RgtError):
    """A platform call failed or was refused; the message says what to do next.

    ``status_code`` is the HTTP status when the platform answered, else ``None``.
    """

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class ProviderTimeout(ProviderError):
    """The platform gave no answer within the client timeout; the call may still take effect."""


def scrub(value: Any, secret: str) -> Any:
    """A copy of ``value`` (JSON-like) with every occurrence of ``secret`` replaced by ``***``."""
    if not secret:
        return value
    if isinstance(value, str):
        return value.replace(secret, "***")
    if isinstance(value, dict):
        return {scrub(k, secret): scrub(v, secret) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v, secret) for v in value]
    return value
