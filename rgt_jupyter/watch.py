"""One watcher per process: a background thread that observes subscribed jobs with back-off.

Views subscribe a callback; the watcher calls it with each new snapshot (coalesced: at most
``max_rate`` calls a second per view), and drops the subscription once the job has ended. The
poll interval starts at ``min_interval`` and doubles up to ``max_interval`` while nothing changes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .status import Snapshot

if TYPE_CHECKING:
    from .api import Job

Callback = Callable[[Snapshot], None]


class Watcher:
    """Polls jobs on one daemon thread; see the module docstring."""

    def __init__(
        self, min_interval: float = 0.25, max_interval: float = 5.0, max_rate: float = 4.0
    ) -> None:
        self.min_interval = min_interval
        self.max_interval = max_interval
        self.min_gap = 1.0 / max_rate
        self._subs: dict[int, tuple[Job, Callback]] = {}
        self._last: dict[int, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_key = 0
        self.last_tick: float | None = None

    def subscribe(self, job: Job, callback: Callback) -> int:
        """Start calling ``callback`` with snapshots of ``job``; returns a key to unsubscribe."""
        with self._lock:
            key = self._next_key
            self._next_key += 1
            self._subs[key] = (job, callback)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="rgt-watcher", daemon=True)
                self._thread.start()
        self._wake.set()
        return key

    def unsubscribe(self, key: int) -> None:
        """Stop a subscription."""
        with self._lock:
            self._subs.pop(key, None)
            self._last.pop(key, None)

    def _run(self) -> None:
        interval = self.min_interval
        while True:
            with self._lock:
                subs = dict(self._subs)
            if not subs:
                with self._lock:
                    if not self._subs:
                        self._thread = None
                        return
                continue
            changed = False
            snaps: dict[str, Snapshot] = {}
            for key, (job, callback) in subs.items():
                snap = snaps.get(job.id)
                if snap is None:
                    try:
                        snap = snaps[job.id] = job.snapshot()
                    except Exception as exc:  # noqa: BLE001 - shown to the view, watcher goes on
                        snap = Snapshot(
                            job.id,
                            job.name,
                            "queued",
                            job.spec.get("host", ""),
                            time.time(),
                            diagnosis=f"cannot observe the job: {exc}",
                        )
                fingerprint = repr((snap.state, snap.progress, snap.log_tail, snap.diagnosis))
                prev = self._last.get(key)
                now = time.monotonic()
                if (
                    prev is None
                    or (prev[0] != fingerprint and now - prev[1] >= self.min_gap)
                    or snap.terminal
                ):
                    if prev is None or prev[0] != fingerprint:
                        changed = True
                    self._last[key] = (fingerprint, now)
                    callback(snap)
                if snap.terminal:
                    self.unsubscribe(key)
            self.last_tick = time.time()
            interval = self.min_interval if changed else min(interval * 2, self.max_interval)
            self._wake.wait(interval)
            self._wake.clear()


_WATCHER: Watcher | None = None


def watcher() -> Watcher:
    """The process's watcher."""
    global _WATCHER
    if _WATCHER is None:
        _WATCHER = Watcher()
    return _WATCHER
