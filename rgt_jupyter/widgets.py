"""The live status view of a job, fed by the process's watcher (stock ipywidgets controls).

The view reads the watcher's cache and never polls on its own: state, a progress bar, a loss
curve from ``job.progress`` metrics, GPU and memory use from the agent's samples, heartbeat age,
the watcher's own liveness, diagnosis, cost so far, the log tail, and a teardown button that opens
the teardown gate (:mod:`.teardown_view`). Only controls whose API also exists in ipywidgets 7.7
are used (HTML, IntProgress, Button, VBox, HBox, Layout, ``add_class``), so it renders in Colab.

Each update sends at most three widget messages (the state word only when it changes, the bar,
one HTML body). Displayed as one bundle with ``text/plain`` and ``text/html`` fallbacks, so
frontends without widget support (and plain terminals) still show a useful status. The bundle
is displayed with a display id: when the job's state changes, its fallbacks are replaced in place
(``update_display_data``), so a notebook saved after the end shows the end on GitHub, nbviewer
and in nbconvert, not the state it had at launch.
"""

from __future__ import annotations

import html
import time
import weakref
from typing import Any

from .api import Job
from .errors import RgtError
from .jobs.snapshot import Snapshot, new_snapshot
from .run.watch.watcher import Watcher, watcher
from .store.registry import Registry
from .views.render import (
    LOOKS,
    age_text,
    curve_svg,
    rate_text,
    snapshot_html,
    snapshot_text,
    state_html,
)
from .views.teardown_view import TeardownView

#: A running job's loss curve is drawn again at most this often (its rate and progress bar follow
#: every snapshot; an ended job's curve is drawn at once, complete).
CURVE_EVERY_S = 5.0


def _bounded(value: Any) -> float | None:
    """A progress number a bar can show (finite, within 2**31), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not -(2**31) < value < 2**31:  # NaN fails this too
        return None
    return float(value)


def _first_snapshot(job: Job, watch: Watcher) -> Snapshot:
    """What to show before the watcher's first look: its cache, the launch's own view, or the
    registry's last recorded state (no round trip to the host)."""
    cached = watch.cached(job.id)
    if cached is not None:
        return cached
    if job._last is not None:
        return job._last

    snap = new_snapshot(job.spec, job.spec.host)
    snap.state = str(job._row.get("state") or "queued")
    snap.observed_at = float(job._row.get("updated_at") or snap.observed_at)
    snap.watcher = "waiting for the watcher's first look"
    try:
        seen = Registry(job.project).last_seen(job.id)
    except (RgtError, OSError):  # a damaged registry: the view says what it can
        seen = None
    if seen is not None and seen["at"] >= snap.observed_at - 1:
        # What a watcher (an earlier kernel's, or the server's) last saw, with its age.
        snap.state = seen["state"] if seen["state"] else snap.state
        snap.progress = seen["progress"]
        snap.observed_at = seen["at"]
        age = max(0.0, time.time() - seen["at"])
        snap.watcher = f"as last seen {age_text(age)} ago; waiting for the watcher's first look"
    return snap


#: The progress bar's colour by state: green at the end, red on failure, amber when it needs
#: a look; the default (blue) while it runs.
BAR_STYLES = {
    "finished": "success",
    "failed": "danger",
    "lost": "danger",
    "running, agent lost": "danger",
    "preempted": "warning",
    "stalled": "warning",
}

#: How much the views made from now on show (one of :data:`~rgt_jupyter.views.render.LOOKS`):
#: set by ``%config RgtMagics.job_view``.
_LOOK = {"look": "compact"}


def set_look(look: str) -> None:
    """Make the job views shown from now on ``minimal``, ``compact`` (the default) or ``full``."""
    if look not in LOOKS:
        raise ValueError(f"job view {look!r}: one of {', '.join(LOOKS)}")
    _LOOK["look"] = look


#: The views on show, by job id (the newest of each job), for the kernel's own look.
SHOWN: weakref.WeakValueDictionary[str, StatusView] = weakref.WeakValueDictionary()


class StatusView:
    """A job's live status widget (created only where ipywidgets imports)."""

    def __init__(self, job: Job, watch: Watcher | None = None, look: str | None = None) -> None:
        import ipywidgets as w  # deferred: ipywidgets, only where a widget renders

        self.job = job
        #: How much it shows: ``minimal``, ``compact`` or ``full`` (see :func:`set_look`).
        self.look = look or _LOOK["look"]
        if self.look not in LOOKS:
            raise ValueError(f"job view {self.look!r}: one of {', '.join(LOOKS)}")
        self.watch = watch or watcher()
        snap = _first_snapshot(job, self.watch)
        self._first = snap
        #: The snapshot the displayed fallbacks show (set once they were sent), and the display
        #: they are in.
        self.saved: Snapshot = snap
        self.handle: Any = None
        self.metadata: dict[str, Any] = {}
        self.state = w.HTML(value=state_html(snap.display_state))
        self.state.add_class("rgt-state")
        self.title = w.HTML(
            value=f"<b>{html.escape(job.id)}</b> on {html.escape(snap.host or 'this machine')}"
        )
        self.bar = w.IntProgress(value=0, min=0, max=1, layout=w.Layout(width="60%"))
        self.bar.add_class("rgt-progress")
        self.body = w.HTML(value="")
        self.body.add_class("rgt-body")
        self.teardown_button = w.Button(
            description="Tear down…",
            tooltip="The teardown gate of the machine this job ran on: checklist, what the "
            "meter-stop verb destroys, explicit approval",
        )
        self.teardown_button.add_class("rgt-teardown")
        self.teardown_button.on_click(lambda _b: self.open_teardown())
        self.panel = w.VBox([])
        self.teardown: Any = None
        self.widget = w.VBox(
            [
                w.HBox([self.state, self.title]),
                self.bar,
                self.body,
                self.teardown_button,
                self.panel,
            ]
        )
        self.widget.add_class("rgt-status")
        self._shown_state = snap.display_state
        self._curve_key: tuple[int, int | None] = (-1, None)
        self._curve = ""
        self._curve_at = 0.0
        self._rate = ""
        self._render(snap)
        self._key = self.watch.subscribe(job, self.update)

    def _render(self, snap: Snapshot) -> None:
        progress = snap.progress or {}
        total, step = _bounded(progress.get("total")), _bounded(progress.get("step"))
        if total is not None and total > 0 and step is not None:
            self.bar.max = int(total)
            self.bar.value = int(min(max(step, 0), total))
        elif snap.state == "finished":
            self.bar.max, self.bar.value = 1, 1
        tb = self.job.traceback() if snap.state == "failed" else None
        records = self.watch.records(self.job.id)
        key = (len(records), id(records[-1]) if records else None)
        now = time.monotonic()
        due = snap.terminal or not self._curve or now - self._curve_at >= CURVE_EVERY_S
        if key != self._curve_key and self.look != "minimal" and due:  # new records came
            self._curve_key, self._curve, self._curve_at = key, curve_svg(records), now
        self._rate = rate_text(records, snap)
        self.bar.bar_style = BAR_STYLES.get(snap.display_state, "")
        self.body.value = snapshot_html(
            snap, tb, header=False, curve=self._curve, rate=self._rate, look=self.look
        )
        if snap.display_state != self._shown_state:
            self.state.value = state_html(snap.display_state)
            self._shown_state = snap.display_state

    def update(self, snap: Snapshot) -> None:
        """Called by the watcher (rate-limited) with a new snapshot. When the state changed, the
        displayed fallbacks are replaced in place: what a saved notebook shows stays true."""
        self._render(snap)
        if self.handle is not None and snap.display_state != self.saved.display_state:
            self.handle.update(self.bundle(snap), raw=True, metadata=self.metadata)
            self.saved = snap

    def show(self, metadata: dict[str, Any]) -> None:
        """Display the view with a display id (its fallbacks kept true by :meth:`update`)."""
        from IPython.display import display  # deferred: IPython, only where a view is shown

        self.metadata = metadata
        self.handle = display(self.bundle(), raw=True, metadata=metadata, display_id=True)
        SHOWN[self.job.id] = self

    def open_teardown(self) -> None:
        """Show the teardown gate of the job's machine below the status (once)."""
        import ipywidgets as w  # deferred: ipywidgets, only where a widget renders

        if self.teardown is not None:
            return
        try:
            self.teardown = TeardownView(self.job._row, self.job.project)
        except RgtError as exc:
            self.panel.children = [w.HTML(f"<i>{html.escape(str(exc))}</i>")]
            return
        self.panel.children = [self.teardown.widget]

    def bundle(self, snap: Snapshot | None = None) -> dict[str, Any]:
        """The display bundle: widget view plus text and HTML fallbacks of ``snap`` (by default
        :attr:`saved`)."""
        snap = snap or self.saved
        tb = self.job.traceback() if snap.state == "failed" else None
        rate = rate_text(self.watch.records(self.job.id), snap)
        return {
            "text/plain": snapshot_text(snap, tb, rate=rate),
            "text/html": snapshot_html(snap, tb, curve=self._curve, rate=rate, look=self.look),
            "application/vnd.jupyter.widget-view+json": {
                "model_id": self.widget.model_id,
                "version_major": 2,
                "version_minor": 0,
            },
        }


def show_job(job: Job) -> bool:
    """How a :class:`Job` displays in a shell that loaded the extension: a live view, shown with
    a display id so that its saved fallbacks follow the job's state. The output's metadata names
    the job, so the saved notebook records which job each cell ran. False (IPython then uses
    :func:`job_bundle`) where no widget can be made."""
    try:
        view = StatusView(job)
    except ImportError:
        return False
    view.show({"rgt_jupyter": {"job_id": job.id, "name": job.name}})
    return True


def job_bundle(job: Job) -> tuple[dict[str, Any], dict[str, Any]]:
    """How a :class:`Job` displays in a shell that loaded the extension: a live view. The
    output's metadata names the job, so the saved notebook records which job each cell ran."""
    meta = {"rgt_jupyter": {"job_id": job.id, "name": job.name}}
    try:
        return StatusView(job).bundle(), meta
    except ImportError:
        return job._repr_mimebundle_(), meta
