"""The phases of a launch, said as they start and end ("auditing host…", "smoke run… passed in
3.1 s"), so a first launch that takes seconds is never silent.

The launch says them on the ``rgt_jupyter.phase`` logger; a front door shows them while it
launches with :func:`phases_to` (the notebook in the cell's output, the terminal on stderr).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: Where the phases are said.
PHASES = logging.getLogger("rgt_jupyter.phase")
PHASES.propagate = False
PHASES.setLevel(logging.INFO)


class _Writer(logging.Handler):
    def __init__(self, write: Callable[[str], None]) -> None:
        super().__init__(logging.INFO)
        self._write = write

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._write(record.getMessage())
        except (OSError, ValueError):  # a display that fails must not fail the launch
            self.handleError(record)


@contextmanager
def phases_to(write: Callable[[str], None]) -> Iterator[None]:
    """Within the block, every phase line goes to ``write``."""
    handler = _Writer(write)
    PHASES.addHandler(handler)
    try:
        yield
    finally:
        PHASES.removeHandler(handler)


@contextmanager
def phase(starting: str, done: str = "done") -> Iterator[None]:
    """Say ``starting…`` now and ``starting… done in 3.1 s`` at the end (``failed after`` when
    the block raises)."""
    PHASES.info(f"{starting}…")
    start = time.monotonic()
    try:
        yield
    except BaseException:
        PHASES.info(f"{starting}… failed after {time.monotonic() - start:.1f} s")
        raise
    PHASES.info(f"{starting}… {done} in {time.monotonic() - start:.1f} s")
