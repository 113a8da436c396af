"""The live status view: an ipywidgets HTML widget fed by the process's watcher.

Displayed as one bundle with ``text/plain`` and ``text/html`` fallbacks, so frontends without
widget support (and plain terminals) still show a useful status.
"""

from __future__ import annotations

from typing import Any

from .api import Job
from .render import snapshot_html, snapshot_text
from .status import Snapshot
from .watch import watcher


class StatusView:
    """A job's live status widget (created only where ipywidgets imports)."""

    def __init__(self, job: Job) -> None:
        import ipywidgets

        self.job = job
        snap = job.recent_snapshot()
        self.widget = ipywidgets.HTML(value=self._html(snap))
        self._first = snap
        if not snap.terminal:
            watcher().subscribe(job, self.update)

    def _html(self, snap: Snapshot) -> str:
        tb = self.job.traceback() if snap.state == "failed" else None
        return snapshot_html(snap, tb)

    def update(self, snap: Snapshot) -> None:
        """Called by the watcher (at most a few times a second) with a new snapshot."""
        self.widget.value = self._html(snap)

    def bundle(self) -> dict[str, Any]:
        """The display bundle: widget view plus text and HTML fallbacks."""
        tb = self.job.traceback() if self._first.state == "failed" else None
        return {
            "text/plain": snapshot_text(self._first, tb),
            "text/html": snapshot_html(self._first, tb),
            "application/vnd.jupyter.widget-view+json": {
                "model_id": self.widget.model_id,
                "version_major": 2,
                "version_minor": 0,
            },
        }


def job_bundle(job: Job) -> dict[str, Any]:
    """How a :class:`Job` displays in a shell that loaded the extension: a live view."""
    try:
        return StatusView(job).bundle()
    except ImportError:
        return job._repr_mimebundle_()
