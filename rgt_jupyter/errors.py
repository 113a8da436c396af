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
    """The transport failed; says nothing about the job's own state."""


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
