"""One watcher per process: a background thread that follows jobs, batched per machine.

Each tick asks every machine once (:mod:`.probe`: in process for ``local``, one ``python3 -c``
over the SSH connection already open for an SSH host, so no new connection per poll) for all
the jobs followed there, with the byte offsets of their logs and progress already read, and
decides each job's state from the answer with the same rules as a one-off look
(the backend's ``observe``, fed from the answer by :class:`CachedReads`). Jobs of backends that
are not probed (Kubernetes) are observed one by one through their own batched clients.

The poll interval starts at ``min_interval`` (1 s) and doubles up to ``max_interval`` (30 s)
while nothing changes. Views subscribe a callback (given at most ``max_rate`` snapshots a second
each, and all views together at most ``global_rate``), and optionally ``on_lines`` (every new
log line, in order, never coalesced). The watcher stamps its tick in the registry, so a view,
the CLI or the REST API can tell when it stopped.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ...backends import get_backend
from ...jobs.records import progress_lines
from ...jobs.snapshot import Snapshot
from ...jobs.spec import JobSpec
from ...remote.probe import probe
from ...store.registry import Registry
from ...transport import FileStat, Transport
from .reads import CachedReads, Lines, as_bytes, clean_lines, probe_source
from .relaunches import Relaunches


class Watched(Protocol):
    """What the watcher needs of a job handle (:class:`rgt_jupyter.Job` is one)."""

    id: str
    name: str
    project: Path
    spec: JobSpec

    @property
    def transport(self) -> Transport: ...

    @property
    def recorded_state(self) -> str: ...

    def snapshot(self, log_lines: int = 12, via: Transport | None = None) -> Snapshot: ...


log = logging.getLogger(__name__)
Callback = Callable[[Snapshot], None]
#: Called with new log lines (cleaned text) and the byte offset just after the last of them.
LinesCallback = Callable[[list[str], int], None]

#: The watcher stamps its liveness in the registry at most this often.
STAMP_EVERY_S = 5.0
#: How many ended jobs keep their final snapshot in the watcher's cache.
KEEP_ENDED = 500
#: How many progress records are kept per job for the loss curve.
KEEP_RECORDS = 5000
#: How many bytes a stream subscriber catching up from its stored offset reads per tick.
CATCHUP_CHUNK = 4 << 20
#: A progress record longer than this is not a record the job API writes: it is not parsed.
PROGRESS_CAP = 16384
#: A watcher is reported stopped when its last tick is older than 2 intervals and this slack
#: (more than ``STAMP_EVERY_S``: the registry's stamp may lag the tick by that much).
LIVENESS_SLACK_S = 10.0


@dataclass
class Subscription:
    """One view's interest in one job."""

    job_id: str
    callback: Callback
    on_lines: LinesCallback | None = None
    cursor: int | None = None  # next log byte this subscriber has not been given
    #: Reads the log from ``cursor`` up to where the watcher's own reading began.
    catchup: Lines | None = None
    resets: int = 0
    fingerprint: str | None = None
    shown_at: float = 0.0


@dataclass
class Followed:
    """What the watcher keeps about one followed job between ticks."""

    job: Watched
    log: Lines = field(default_factory=lambda: Lines(-65536))
    progress: Lines = field(default_factory=lambda: Lines(-16384, keep=1, cap=PROGRESS_CAP))
    records: list[dict[str, Any]] = field(default_factory=list)
    snap: Snapshot | None = None
    done: bool = False
    #: Lines read this tick, with the offset just after each.
    new_lines: list[tuple[bytes, int]] = field(default_factory=list)
    #: What the last look showed, to tell whether the next one changed anything.
    mark: str = ""
    #: The newest log lines, cleaned (ANSI, carriage returns, long lines) as they arrived.
    clean: deque[str] = field(default_factory=lambda: deque(maxlen=200))
    #: The last look failed (the machine did not answer), and when the platform was last asked.
    unobserved: bool = False


class Watcher:
    """Follows jobs on one daemon thread; see the module docstring."""

    def __init__(
        self,
        min_interval: float = 1.0,
        max_interval: float = 30.0,
        max_rate: float = 4.0,
        global_rate: float = 8.0,
        kind: str = "kernel",
    ) -> None:
        self.min_interval = min_interval
        self.max_interval = max_interval
        self.min_gap = 1.0 / max_rate
        self.global_rate = global_rate
        self.kind = kind
        self.interval = min_interval
        self.started_at = time.time()
        self.id = f"{kind}:{socket.gethostname()}:{os.getpid()}:{self.started_at:.6f}"
        self._subs: dict[int, Subscription] = {}
        self._followed: dict[str, Followed] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_key = 0
        self._relaunches = Relaunches()
        self.last_tick: float | None = None
        self._stamped = 0.0
        self.error: str | None = None
        self.ticks = 0

    # -- the API views use

    def follow(self, job: Watched) -> Followed:
        """Follow ``job`` (if not yet) without a view, e.g. for the server's REST API."""
        with self._lock:
            followed = self._followed.get(job.id)
            if followed is None or followed.done:
                followed = self._followed[job.id] = Followed(job)
                self.interval = self.min_interval
            self._ensure_thread()
        self._wake.set()
        return followed

    def subscribe(
        self,
        job: Watched,
        callback: Callback,
        on_lines: LinesCallback | None = None,
        from_offset: int | None = None,
    ) -> int:
        """Call ``callback`` with snapshots of ``job`` and ``on_lines`` with its new log lines
        (from byte ``from_offset`` when given, else from now on); returns a key to unsubscribe."""
        with self._lock:
            key = self._next_key
            self._next_key += 1
            if job.id not in self._followed or self._followed[job.id].done:
                self._followed[job.id] = Followed(job)
            self._subs[key] = Subscription(job.id, callback, on_lines, from_offset)
            self._ensure_thread()
        self.interval = self.min_interval
        self._wake.set()
        return key

    def unsubscribe(self, key: int) -> None:
        """Stop a subscription."""
        with self._lock:
            self._subs.pop(key, None)

    def subscribed(self, key: int) -> bool:
        """Whether a subscription is still served: the watcher ends it once its job ended and
        every line of the log was handed over."""
        with self._lock:
            return key in self._subs

    def cached(self, job_id: str) -> Snapshot | None:
        """The newest snapshot of a followed job (no round trip)."""
        followed = self._followed.get(job_id)
        return followed.snap if followed else None

    def records(self, job_id: str) -> list[dict[str, Any]]:
        """The progress records read so far of a followed job (the watcher's own list: read
        it, do not change it)."""
        followed = self._followed.get(job_id)
        return followed.records if followed else []

    @property
    def idle(self) -> bool:
        """No thread because nothing unfinished is followed (not stopped, not dead): following
        or subscribing starts it again."""
        return self._thread is None and self.error is None and not self._stop.is_set()

    @property
    def stopped(self) -> bool:
        """Stopped by :meth:`stop` or by an error."""
        return self._stop.is_set() or self.error is not None

    @property
    def alive(self) -> bool:
        """Whether the thread is running and ticked within two intervals (an idle watcher
        counts as alive)."""
        if self.idle:
            return True
        if self._thread is None or not self._thread.is_alive() or self.stopped:
            return False
        if self.last_tick is None:
            return True  # the first look is under way
        return time.time() - self.last_tick <= 2 * self.interval + LIVENESS_SLACK_S

    def liveness(self) -> str:
        """The watcher's own state, in words."""
        if self.error:
            return f"{self.kind} watcher stopped: {self.error}"
        if self._stop.is_set():
            return f"{self.kind} watcher stopped"
        if self.idle:
            return f"{self.kind} watcher idle: nothing left to follow"
        if self.last_tick is None:
            return f"{self.kind} watcher starting"
        age = time.time() - self.last_tick
        if not self.alive:
            return f"{self.kind} watcher stopped ticking {age:.0f} s ago"
        return f"{self.kind} watcher: last look {age:.0f} s ago, every {self.interval:.0f} s"

    def stop(self, why: str = "stopped") -> None:
        """End the thread and record ``why`` in the registry (a later :meth:`follow` or
        :meth:`subscribe` does not start it again)."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(10)
        self._stamp(stopped=why)

    # -- the thread

    def _ensure_thread(self) -> None:
        if self._stop.is_set():
            return
        if self._thread is None or not self._thread.is_alive():
            self.error = None
            self._thread = threading.Thread(target=self._run, name="rgt-watcher", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with self._lock:
                    # Ended jobs whose views still read their log (from a stored offset) keep
                    # the thread until those views have had every line.
                    if all(f.done for f in self._followed.values()) and not any(
                        s.catchup is not None for s in self._subs.values()
                    ):
                        self._thread = None
                        return
                busy = self.tick()
                self.interval = (
                    self.min_interval if busy else min(self.interval * 2, self.max_interval)
                )
                self._wake.wait(0.0 if busy == "more" else self.interval)
                self._wake.clear()
        except BaseException as exc:  # noqa: BLE001 - the watcher's death is reported, not hidden
            self.error = f"{type(exc).__name__}: {exc}"
            log.error("the rgt watcher stopped", exc_info=True)
            self._stamp(stopped=self.error)
            self._tell_stopped()

    def _tell_stopped(self) -> None:
        with self._lock:
            subs = list(self._subs.values())
        for sub in subs:
            followed = self._followed.get(sub.job_id)
            if followed is not None and followed.snap is not None:
                again = "run %watch again" if self.kind == "kernel" else "restart the server"
                followed.snap.watcher = f"{self.liveness()}: {again} to restart it"
                try:
                    sub.callback(followed.snap)
                except Exception:  # noqa: BLE001 - one view's failure must not hide the others'
                    log.exception("a view failed to show that the watcher stopped")

    def tick(self) -> bool | str:
        """Observe every followed job once; True when anything changed, ``"more"`` when a log
        has more bytes to read at once."""
        with self._lock:
            followed = [f for f in self._followed.values() if not f.done]
        for f in followed:
            f.new_lines = []
        groups: dict[tuple[str, str, str], list[Followed]] = {}
        singles: list[Followed] = []
        for f in followed:
            spec = f.job.spec
            if get_backend(spec.launcher).probed and spec.control_dir:
                key = (spec.transport, spec.host_alias or "", spec.python or "")
                groups.setdefault(key, []).append(f)
            else:
                singles.append(f)
        for members in groups.values():
            self._probe_group(members)
        for f in singles:
            self._observe_single(f)
        for f in followed:
            if f.snap is None:
                continue
            if f.done:
                self._relaunches.ended(f.job.spec, f.snap, f.job.project)
            if f.job.spec.instance_id and (f.unobserved or f.snap.state == "lost"):
                # A lost job is no longer followed: its question is asked until answered.
                self._relaunches.unobservable(f.job.spec, f.job.project, keep_asking=f.done)
        moved = False
        for f in followed:
            if f.snap is not None:
                mark = repr((f.snap.display_state, f.snap.progress, f.snap.diagnosis, f.log.size))
                moved |= mark != f.mark
                f.mark = mark
        self.ticks += 1
        self.last_tick = time.time()
        if self.last_tick - self._stamped >= STAMP_EVERY_S:
            self._stamp()
        changed = self._deliver() or moved
        with self._lock:
            catching_up = any(sub.catchup is not None for sub in self._subs.values())
        if catching_up or any(f.log.pending for f in followed):
            return "more"
        return changed

    def _observe_single(self, f: Followed) -> None:
        try:
            f.snap = f.job.snapshot()
        except Exception as exc:  # noqa: BLE001 - shown to the view; the watcher goes on
            f.snap = self._unreachable(f, exc)
            return
        f.unobserved = False
        f.done = f.snap.terminal

    def _unreachable(self, f: Followed, exc: BaseException) -> Snapshot:
        f.unobserved = True
        job = f.job
        prev = f.snap
        snap = Snapshot(
            job.id,
            job.name,
            prev.state if prev else job.recorded_state,
            job.spec.host,
            time.time(),
        )
        if prev is not None:
            snap.progress, snap.log_tail = prev.progress, prev.log_tail
            snap.started_at, snap.heartbeat_age = prev.started_at, prev.heartbeat_age
        seen = f"last seen {prev.state}" if prev else f"last recorded {job.recorded_state}"
        snap.diagnosis = (
            f"cannot observe the job: {exc}. This says nothing about the job itself (it is not "
            f"taken for failed or lost; {seen}); the watcher retries with back-off."
        )
        return snap

    def _probe_group(self, members: list[Followed]) -> None:
        first = members[0].job
        items = []
        for f in members:
            spec = f.job.spec
            items.append(
                {
                    "control": spec.control_dir,
                    "log_offset": f.log.offset,
                    "log_skip": f.log.skippable,
                    "progress_offset": f.progress.offset,
                    "ckpt_dir": spec.ckpt_dir,
                    "pid": spec.agent_pid,
                }
            )
        try:
            transport = first.transport
            if transport.name == "local":
                answer = probe(items, encode=False)
            else:
                python = first.spec.python
                done = transport.exec(
                    [python, "-c", probe_source()],
                    stdin=json.dumps(items).encode(),
                    timeout=60,
                ).check()
                answer = json.loads(done.stdout)
        except Exception as exc:  # noqa: BLE001 - an unreachable host is not a dead job
            for f in members:
                f.snap = self._unreachable(f, exc)
            return
        for f, rec in zip(members, answer["jobs"], strict=False):
            try:
                self._absorb(f, rec, answer, transport)
            except Exception as exc:  # noqa: BLE001 - one job's odd records spare the others
                f.snap = self._unreachable(f, exc)

    def _absorb(
        self, f: Followed, rec: dict[str, Any], answer: dict[str, Any], transport: Transport
    ) -> None:
        spec = f.job.spec
        control = spec.control_dir
        new_lines = f.log.feed(rec["log"])
        f.records += progress_lines(
            [raw for raw, _end in f.progress.feed(rec["progress"]) if not getattr(raw, "cut", 0)]
        )
        if (
            len(f.records) > 2 * KEEP_RECORDS
        ):  # thin the older half evenly: the curve keeps its shape
            f.records = f.records[:KEEP_RECORDS][::2] + f.records[KEEP_RECORDS:]
        files: dict[str, bytes | None] = {
            f"{control}/{name}": as_bytes(rec[key])
            for name, key in (
                ("status.json", "status"),
                ("exit.json", "exit"),
                ("heartbeat.json", "heartbeat"),
                ("resources.json", "resources"),
                ("bucket.json", "bucket"),
                ("findings.json", "findings"),
                ("cadence.json", "cadence"),
                ("error.json", "error"),
            )
        }
        # The newest raw records, as many as a one-off look would parse (no re-encoding).
        files[f"{control}/progress.jsonl"] = None if f.progress.size is None else b""
        # An ended job's log is complete: its unterminated last line counts too.
        ended = rec.get("exit") is not None and not f.log.pending
        if ended:
            new_lines += f.log.flush()
        # The log's lines are handed over cleaned (CachedReads.log_lines); its bytes only once
        # the job ended, for whatever reads the end of the log then.
        files[f"{control}/log"] = (
            None if f.log.size is None else f.log.tail_bytes(16384) if ended else b""
        )
        if rec.get("agent_log") is not None:
            files[f"{control}/agent.log"] = as_bytes(
                base64.b64decode(rec["agent_log"])
                if isinstance(rec["agent_log"], str)
                else rec["agent_log"]
            )
        stats: dict[str, FileStat | None] = {
            f"{control}/log": None
            if f.log.size is None
            else FileStat(len(files[f"{control}/log"] or b""), f.log.mtime or 0.0, False)
        }
        ckpt = spec.ckpt_dir
        if ckpt:
            mtime = rec.get("ckpt_mtime")
            stats[ckpt] = None if mtime is None else FileStat(0, float(mtime), True)
        alive: dict[int, bool] = {}
        if rec.get("pid") is not None and rec.get("alive") is not None:
            alive[int(rec["pid"])] = bool(rec["alive"])
        files["/proc/uptime"] = as_bytes(answer.get("uptime"))
        view = CachedReads(transport, files, stats, alive, answer.get("boot_id"))
        view.procs = {int(pid): str(kind) for pid, kind in (rec.get("procs") or {}).items()}
        view.records[control] = f.records
        if new_lines:
            f.clean.extend(clean_lines([raw for raw, _ in new_lines]))
        view.log_lines[control] = list(f.clean)
        snap = f.job.snapshot(via=view)
        if snap.terminal and (ended or (snap.state in ("lost", "failed") and not f.log.pending)):
            # A lost job, or one its scheduler ended before the agent could record it, left no
            # exit record: once its log is read, it is done.
            f.done = True
        snap.watcher = self.liveness()
        f.snap, f.unobserved = snap, False
        f.new_lines = new_lines

    def _deliver(self) -> bool:
        """Hand new snapshots and log lines to the views; True when any view saw a change."""
        with self._lock:
            subs = list(self._subs.items())
        n = max(1, len(subs))
        gap = max(self.min_gap, n / self.global_rate)
        changed = False
        now = time.monotonic()
        for key, sub in subs:
            f = self._followed.get(sub.job_id)
            if f is None or f.snap is None:
                continue
            snap = f.snap
            if sub.on_lines is not None:
                changed |= self._give_lines(f, sub)
            fingerprint = repr(
                (
                    snap.display_state,
                    snap.progress,
                    snap.log_tail,
                    snap.diagnosis,
                    snap.resources,
                    snap.bucket,
                )
            )
            new = fingerprint != sub.fingerprint
            if new and (
                sub.fingerprint is None or now - sub.shown_at >= gap or snap.terminal or f.done
            ):
                sub.fingerprint, sub.shown_at = fingerprint, now
                changed = True
                sub.callback(snap)
            elif new:
                changed = True  # shown on a later tick
            if f.done and (sub.on_lines is None or (sub.catchup is None and not f.log.pending)):
                self.unsubscribe(key)  # the job ended and this view has had every line
        with self._lock:  # ended jobs keep their final snapshot, the newest KEEP_ENDED of them
            ended = [j for j, f in self._followed.items() if f.done]
            for job_id in ended[: max(0, len(ended) - KEEP_ENDED)]:
                if not any(s.job_id == job_id for s in self._subs.values()):
                    del self._followed[job_id]
        return changed

    def _give_lines(self, f: Followed, sub: Subscription) -> bool:
        """Hand ``sub`` the log lines it has not had: first what lies between its cursor and the
        lines read this tick (read from the file, a chunk a tick, for a view resuming from a
        stored offset), then those lines. Nothing is given twice; a log begun anew (a requeued
        attempt) is followed from its start. Lines are capped where they are read, so a huge
        line costs no more than a short one."""
        assert sub.on_lines is not None
        new = f.new_lines
        if sub.resets != f.log.resets:
            sub.resets, sub.cursor = f.log.resets, 0 if sub.cursor is not None else None
            sub.catchup = None
        first = getattr(new[0][0], "start", new[0][1] - len(new[0][0]) - 1) if new else None
        first = f.log.boundary if first is None else first
        if sub.cursor is None:
            sub.cursor = first
        out: list[bytes] = []
        if sub.cursor < first:
            if sub.catchup is None:
                sub.catchup = Lines(sub.cursor)
            at = sub.catchup.offset
            want = first - at
            try:
                data = f.job.transport.read_bytes(
                    f"{f.job.spec.control_dir}/log", at, min(CATCHUP_CHUNK, want)
                )
            except OSError:
                data = b""
            got = sub.catchup.feed(
                {"size": at + len(data), "mtime": 0.0, "offset": at, "data": data}
            )
            for raw, end in got:
                out.append(raw)
                sub.cursor = end
            if not data or sub.catchup.offset >= first:  # caught up (or the file went short)
                out += [raw for raw, _ in sub.catchup.flush()]
                sub.cursor, sub.catchup = max(sub.cursor, first), None
            else:  # the rest of the way on the next tick, from the file
                if out:
                    sub.on_lines(clean_lines(out), sub.cursor)
                return True
        for raw, end in new:
            if end > sub.cursor:
                out.append(raw)
                sub.cursor = end
        if out:
            sub.on_lines(clean_lines(out), sub.cursor)
            return True
        return False

    def _stamp(self, stopped: str | None = None) -> None:
        """Write this watcher's tick into each followed project's registry."""
        self._stamped = time.time()
        projects: dict[Path, list[str]] = {}
        seen: dict[Path, list[tuple[str, float, str, dict[str, Any] | None]]] = {}
        for f in list(self._followed.values()):
            projects.setdefault(f.job.project, []).append(f.job.id)
            if f.snap is not None:
                seen.setdefault(f.job.project, []).append(
                    (f.job.id, f.snap.observed_at, f.snap.state, f.snap.progress)
                )
        for project, jobs in projects.items():
            try:
                Registry(project).watcher_tick(
                    self.id,
                    self.kind,
                    os.getpid(),
                    socket.gethostname(),
                    self.started_at,
                    self.interval,
                    jobs,
                    stopped,
                    seen.get(project, []),
                )
            except Exception:  # noqa: BLE001 - a locked registry must not stop the watch
                log.warning("could not stamp the watcher's tick in %s", project, exc_info=True)


def watcher_note(project: Path, job_id: str, now: float | None = None) -> str | None:
    """Who watches ``job_id`` (from the registry's watcher ticks) and whether it still ticks."""
    now = time.time() if now is None else now
    notes = []
    for w in Registry(project).watchers():
        if job_id not in w["jobs"]:
            continue
        age = now - float(w["last_tick"])
        late = age > 2 * float(w["interval"]) + LIVENESS_SLACK_S
        who = f"{w['kind']} watcher (pid {w['pid']})"
        if w.get("stopped"):
            notes.append((1, f"{who} stopped: {w['stopped']}"))
        elif late:
            notes.append((1, f"{who} stopped ticking: last look {age:.0f} s ago"))
        else:
            notes.append((0, f"{who}: last look {age:.0f} s ago"))
    if not notes:
        return None
    notes.sort(key=lambda n: n[0])  # a live watcher first, else the one that ticked last
    return notes[0][1]


_WATCHER: Watcher | None = None
_WATCHER_LOCK = threading.Lock()


def watcher() -> Watcher:
    """The process's watcher."""
    global _WATCHER
    with _WATCHER_LOCK:
        if _WATCHER is None:
            _WATCHER = Watcher()
        return _WATCHER
