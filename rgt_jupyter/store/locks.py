"""Locks between processes of one machine (kernels, terminals, the server): ``flock`` on a file
under ``<project>/.rgt/locks/``, released by the kernel when the holder exits, however it exits.

The holder's pid is written into the file, so a waiter can say who holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import UsageError
from .project import state_dir

#: How long a lock is waited for before the waiter gives up, saying who holds it.
WAIT_S = 900.0


def lock_path(project: Path, kind: str, name: str) -> Path:
    """The lock file of ``name`` (a job name or id, already checked safe) of this kind."""
    return state_dir(project) / "locks" / f"{kind}-{name}.lock"


def holder(path: Path) -> str:
    """Who holds (or last held) the lock: the pid written in it."""
    try:
        return path.read_text().strip() or "another process"
    except OSError:
        return "another process"


@contextlib.contextmanager
def held(
    path: Path,
    what: str,
    wait_s: float = WAIT_S,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[bool]:
    """Hold the lock ``path`` for the block; yields whether it had to wait for another holder.

    ``on_wait(holder)`` is called once when the lock is taken by someone else; after ``wait_s``
    seconds a :class:`UsageError` says who holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        waited = False
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waited and on_wait is not None:
                    on_wait(holder(path))
                waited = True
                if time.monotonic() >= deadline:
                    raise UsageError(
                        f"{what} is held by process {holder(path)} for more than {wait_s:g} s; "
                        "wait for it to finish (or end that process), then try again"
                    ) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}\n".encode())
        yield waited
    finally:
        os.close(fd)  # closing the descriptor releases the lock
