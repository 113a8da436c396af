"""How the ``rgt`` command writes: JSON forms of what it shows, colour only where it helps.

Colour goes to a terminal only, and never when ``NO_COLOR`` is set (https://no-color.org) or
``TERM=dumb``; ``FORCE_COLOR`` turns it on for a pipe. JSON goes to stdout, one document per
command, with the same facts the text shows.
"""

from __future__ import annotations

import json
import os
import sys
import unicodedata
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TextIO

from ..views.render import strip_ansi

if TYPE_CHECKING:  # type names only: the API is imported by the commands that use it
    from ..api import Run
    from ..jobs.snapshot import Snapshot

#: The colour of each state word.
_STATE_COLOURS = {
    "finished": "32",
    "running": "36",
    "queued": "2",
    "failed": "31",
    "lost": "31",
    "preempted": "33",
    "stalled": "33",
    "running, agent lost": "31",
}


def colour_on(stream: TextIO | None = None) -> bool:
    """True when ``stream`` (default stdout) should get colours."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    stream = stream if stream is not None else sys.stdout
    return os.environ.get("TERM") != "dumb" and bool(getattr(stream, "isatty", lambda: False)())


def for_stream(text: str, stream: TextIO | None = None) -> str:
    """``text`` as it may go to ``stream``: its colours kept for a terminal, else removed."""
    return text if colour_on(stream) else strip_ansi(text)


def state_word(state: str, width: int = 0, stream: TextIO | None = None) -> str:
    """A state padded to ``width``, coloured when ``stream`` takes colours."""
    padded = state.ljust(width)
    if not colour_on(stream):
        return padded
    code = _STATE_COLOURS.get(state.split("?")[0], "")
    return f"\x1b[{code}m{state}\x1b[0m{padded[len(state) :]}" if code else padded


def dump(document: Any) -> None:
    """Print one JSON document to stdout."""
    print(json.dumps(document, indent=2, sort_keys=True, default=str))


def snapshot_dict(snap: Snapshot, traceback: list[str] | None = None) -> dict[str, Any]:
    """A snapshot as JSON: every field, plus ``display_state``, ``terminal`` and ``elapsed``."""
    data = asdict(snap)
    data.update(display_state=snap.display_state, terminal=snap.terminal, elapsed=snap.elapsed)
    if traceback is not None:
        data["traceback"] = [strip_ansi(line) for line in traceback]
    return data


def run_dict(run: Run) -> dict[str, Any]:
    """A pulled run as JSON: where it is, whether it verified, what failed, its results."""
    verification = run.verification or {}
    return {
        "run_id": run.run_id,
        "path": str(run.path),
        "verified": run.verified,
        "summary": verification.get("summary"),
        "mismatches": verification.get("mismatches", []),
        "checkpoint_loads": verification.get("checkpoint_loads", []),
        # Each file as loaded, pickled (not loaded: it would run code), refused, failed or
        # only hashed, and the checkpoint formats recognised.
        "files": verification.get("files") or {},
        "results": run.results,
    }


def width(text: str) -> int:
    """Columns ``text`` takes in a terminal (wide East Asian characters take two)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def pad(text: str, columns: int) -> str:
    """``text`` padded with spaces to ``columns`` terminal columns."""
    return text + " " * max(0, columns - width(text))


def fit(text: str, columns: int) -> str:
    """``text`` cut at a word to fit ``columns``, with an ellipsis when it was cut."""
    if width(text) <= columns:
        return text
    words = text.split(" ")
    while len(words) > 1 and width(" ".join(words) + "…") > columns:
        words.pop()
    kept = " ".join(words)
    while kept and width(kept + "…") > columns:
        kept = kept[:-1]
    return kept.rstrip(" ,;:") + "…"
