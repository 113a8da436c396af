"""What a watcher starts by itself, where the profile asks for it: the next attempt of a job
its scheduler ended on a lost node (``[ray] retries``), and a new machine for a job whose rented
one the platform reports gone (``[up] new_machine = "auto"``). Each runs on a thread of its own
(a launch takes seconds; the watcher goes on ticking), once at a time per job."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ...jobs.snapshot import Snapshot
from ...jobs.spec import JobSpec
from ..relaunch import retries_left, retry_after_node_loss

log = logging.getLogger(__name__)

#: The platform is asked whether an unobservable job's machine is gone at most this often.
ASK_EVERY_S = 30.0
#: How long the platform is asked about a lost job's machine, which the watcher no longer follows.
ASK_FOR_S = 600.0


class Relaunches:
    """The relaunches of one watcher's jobs: at most one in flight per job."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy: set[str] = set()
        self._asked: dict[str, float] = {}

    def _start(self, job_id: str, what: str, work: Callable[[], object]) -> None:
        with self._lock:
            if job_id in self._busy:
                return
            self._busy.add(job_id)

        def run() -> None:
            try:
                work()
            except Exception:  # noqa: BLE001 - the watcher goes on; the log says why
                log.exception("%s of %s failed", what, job_id)
            finally:
                with self._lock:
                    self._busy.discard(job_id)

        threading.Thread(target=run, name=f"rgt-{what}-{job_id}", daemon=True).start()

    def ended(self, spec: JobSpec, snap: Snapshot, project: Path) -> None:
        """A job seen ending: retried after a lost node where its profile asks for that."""
        if snap.failure == "node_lost" and retries_left(spec) > 0:
            self._start(spec.job_id, "retry", lambda: retry_after_node_loss(spec, snap, project))

    def unobservable(self, spec: JobSpec, project: Path, keep_asking: bool = False) -> None:
        """A job on a rented machine that does not answer (or was lost): the platform is asked
        whether the machine is gone (:func:`..replace.replace_if_gone`), at most every
        :data:`ASK_EVERY_S`; ``keep_asking`` (a job the watcher no longer follows): again at
        that pace for :data:`ASK_FOR_S`, until the platform's answer moves it."""
        now = time.monotonic()
        with self._lock:
            if now - self._asked.get(spec.job_id, -1e9) < ASK_EVERY_S:
                return
            self._asked[spec.job_id] = now

        def ask() -> None:
            from ..replace import replace_if_gone, wants_new_machine  # deferred: paramiko

            if not wants_new_machine(spec, project):
                return
            until = time.monotonic() + (ASK_FOR_S if keep_asking else 0.0)
            while replace_if_gone(spec, project) is None and time.monotonic() < until:
                time.sleep(ASK_EVERY_S)

        self._start(spec.job_id, "new-machine", ask)
