"""The package's exceptions: one base, a few subclasses, each message naming the next step."""

from __future__ import annotations


class RgtError(Exception):
    """Base of every error rgt-jupyter raises on purpose."""


class UsageError(RgtError):
    """The user asked for something that cannot be done as asked (bad flag, unknown name).

    The magics turn it into IPython's ``UsageError`` (a message, no traceback).
    """


class JobNotFound(UsageError):
    """No job with that id or name is in this project's registry."""


class ProfileError(UsageError):
    """A profile is unknown or invalid."""


class LaunchError(RgtError):
    """The job could not be launched (the transport refused, the agent never started)."""


class TransportError(RgtError):
    """The transport failed; says nothing about the job's own state.

    ``kind`` classifies the failure where the transport can (``timeout``,
    ``connection_refused``, ``auth_failed``, ...). ``maybe_ran``: for a command, whether it may
    have run on the host although the reply was lost (True), certainly never reached it (False),
    or the transport cannot say (None)."""

    def __init__(self, message: str, kind: str = "", maybe_ran: bool | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.maybe_ran = maybe_ran


class SSHError(TransportError):
    """An SSH failure, classified by ``kind``. Says nothing about the job's own state.

    ``maybe_ran``: the connection broke after a command was sent, so it may have run (or still
    run) on the host; False when it certainly never reached the host."""

    def __init__(self, kind: str, message: str, maybe_ran: bool = False) -> None:
        super().__init__(f"[{kind}] {message}", kind, maybe_ran)


class RemoteTraceback(RgtError):
    """A Python exception raised inside a job (or its smoke run), shown with the job's traceback.

    IPython calls ``_render_traceback_`` and prints those lines in place of a local traceback.
    """

    def __init__(self, summary: str, lines: list[str]) -> None:
        super().__init__(summary)
        self.summary = summary
        self.lines = lines

    def _render_traceback_(self) -> list[str]:
        return [*self.lines]

    def __str__(self) -> str:
        return self.summary + "\n" + "\n".join(self.lines)


class SmokeFailed(RemoteTraceback):
    """The CPU smoke run of a cell failed, so the launch was blocked."""


class PullError(RgtError):
    """A pull could not complete (nothing to pull, no room, transport failure)."""


class RegistryDamaged(UsageError):
    """The project's registry file cannot be read; it was left as it is."""
