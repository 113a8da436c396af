"""The jupyter-server extension: a server-side watcher and a read-only REST API.

Loaded in every Jupyter server where the package is installed. It decides one project
(``$RGT_PROJECT``, else the project of the server's root dir) and keeps watching that project's
unfinished jobs while no kernel is alive: a scan thread reads the registry every
:data:`SCAN_INTERVAL_S` seconds (one SQLite read) and hands each unfinished job it does not
follow yet to a :class:`~rgt_jupyter.run.watch.watcher.Watcher` of kind ``server``. That watcher observes
the jobs (batched per machine, back-off 1 s to 30 s), writes each new state into the registry and
stamps its ticks there, so a kernel started later, the CLI and this API all see the jobs' states.

Endpoints (under the server's ``base_url``; token or login required, authorized on the
resource ``rgt``; GET only, observing nothing and changing nothing):

``GET rgt/api/jobs``
    ``{"project": str, "watcher": {...}, "jobs": [{...}, ...]}``, jobs oldest first.
``GET rgt/api/jobs/<id or name>``
    ``{"project": str, "watcher": {...}, "job": {..., "history": [...]}}``; 404 with a JSON
    ``message`` for an unknown job.
``GET rgt/api/number?ref=<ref>&fmt=<fmt>``
    What the markdown placeholder ``{{rgt:<ref>|<fmt>}}`` shows (``fmt`` optional):
    ``{"ref": str, "text": str, "source": {...}}`` (the run, ``results.json`` and its sha256,
    the key); 404 with a JSON ``message`` that says what to do when it does not resolve. The
    JupyterLab extension renders placeholders with it while the author writes.

A job object has the registry columns (``id``, ``name``, ``profile``, ``host``,
``registry_state``, ``created_at``, ``updated_at``), the launching ``notebook`` (relative to
the server's root when it lies under it) and ``cell_id`` (null when not launched from a cell),
``state`` and ``display_state`` (from the
newest observation when there is one, else the registry's state), ``observed`` (whether this
server observed the job), the observation's fields (:data:`SNAPSHOT_FIELDS`, null when not
observed) and ``watcher_note`` (who watches an unfinished job and whether that watcher still
ticks, from the registry's watcher ticks; null for an ended job). The
``watcher`` object says whether the server's watcher runs: ``kind``, ``id``, ``status``
(``watching``, ``idle``: nothing unfinished to follow, or ``stopped``), ``alive``, ``liveness``
(in words), ``interval``, ``last_tick``, ``ticks``, ``error``, ``following`` and the scan's
``scan_interval``, ``last_scan`` and ``scan_error``. Floats that JSON cannot carry (NaN,
infinities) are sent as the strings ``"nan"``, ``"inf"`` and ``"-inf"``.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

import tornado.web
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado.ioloop import IOLoop

from .api import Job
from .args import saved_cell_digest
from .deliver.numbers import num
from .errors import JobNotFound, RgtError
from .jobs.snapshot import TERMINAL, Snapshot
from .run.watch.watcher import Watcher, watcher_note
from .store.project import project_dir
from .store.registry import Registry

log = logging.getLogger(__name__)

#: Seconds between two reads of the registry for jobs to follow.
SCAN_INTERVAL_S = 2.0
#: The authorization resource of the REST API.
AUTH_RESOURCE = "rgt"
#: The fields of an observation (:class:`~rgt_jupyter.jobs.snapshot.Snapshot`) a job object carries.
SNAPSHOT_FIELDS = (
    "observed_at",
    "started_at",
    "ended_at",
    "exit_code",
    "signal",
    "heartbeat_age",
    "heartbeat_seq",
    "progress",
    "log_tail",
    "error",
    "diagnosis",
    "resume_attempt",
    "audit",
    "cost",
    "restarts",
    "scheduler",
    "stalled_s",
    "stall_limit_s",
    "resources",
)
#: The ``web_app.settings`` keys of the server's watcher and of the :class:`ServerWatch`.
WATCHER_SETTING = "rgt_watcher"
WATCH_SETTING = "rgt_server_watch"


class ServerWatch:
    """Follows one project's unfinished jobs for as long as the server runs.

    The scan thread lists the registry's jobs and subscribes the watcher to each unfinished job
    it does not follow yet; the subscription keeps the job's last observation here, so a job
    that ended is still shown with its final progress and diagnosis after the watcher let go of
    it. The scan ends when :meth:`stop` is called, when the server's event loop is closed, or at
    interpreter exit; stopping also stops the watcher and records in the registry that it
    stopped, so other views know at once.
    """

    def __init__(
        self,
        project: Path,
        watcher: Watcher | None = None,
        scan_interval: float = SCAN_INTERVAL_S,
        loop: Any = None,
        root: Path | None = None,
    ) -> None:
        self.project = project
        #: The server's root dir: notebook paths are shown relative to it.
        self.root = root
        self.watcher = watcher if watcher is not None else Watcher(kind="server")
        self.scan_interval = scan_interval
        self.last_scan: float | None = None
        self.scan_error: str | None = None
        self.stopped: str | None = None
        self._loop = loop  # an asyncio loop: the scan ends once it is closed
        self._registry: Registry | None = None
        self._followed: set[str] = set()
        self._last: dict[str, Snapshot] = {}
        self._refused: dict[str, str] = {}
        #: Launch digests of the saved cells of each notebook, by (path, mtime, size).
        self._cells: dict[tuple[str, int, int], dict[str, str]] = {}
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # -- life

    def start(self) -> None:
        """Start the scan thread (the first scan runs at once)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="rgt-server-scan", daemon=True)
        self._thread.start()
        atexit.register(self.stop, "the Jupyter server exited")

    def stop(self, reason: str = "the Jupyter server stopped") -> None:
        """End the scan and the watcher, and record in the registry that they stopped."""
        with self._lock:
            if self.stopped is not None:
                return
            self.stopped = reason
        atexit.unregister(self.stop)
        self._halt.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(10)
        self.watcher.stop(reason)  # records the reason in the registry of the followed jobs

    @property
    def scanning(self) -> bool:
        """Whether the scan thread runs."""
        return self._thread is not None and self._thread.is_alive() and self.stopped is None

    def _run(self) -> None:
        while not self._halt.is_set():
            if self._loop is not None and self._loop.is_closed():
                self.stop("the Jupyter server's event loop closed")
                return
            try:
                self.scan()
            except Exception as exc:  # noqa: BLE001 - reported by the API; the next scan retries
                text = f"{type(exc).__name__}: {exc}"
                if text != self.scan_error:
                    log.warning(
                        "rgt_jupyter: cannot read the registry of %s: %s", self.project, text
                    )
                self.scan_error = text
            self._halt.wait(self.scan_interval)

    # -- the scan

    def registry(self) -> Registry | None:
        """The project's registry, or None while the project has none (nothing is created)."""
        if self._registry is None:
            if not (self.project / ".rgt" / "registry.sqlite3").exists():
                return None
            self._registry = Registry(self.project)
        return self._registry

    def scan(self) -> list[str]:
        """Follow every unfinished job of the registry not followed yet; return their ids."""
        registry = self.registry()
        self.last_scan = time.time()
        if registry is None:
            self.scan_error = None
            return []
        rows = registry.jobs()
        self.scan_error = None
        new = [
            r
            for r in rows
            if r["state"] not in TERMINAL
            and r["id"] not in self._followed
            and r["id"] not in self._refused
        ]
        if not new:
            return []
        added = []
        for row in new:
            try:
                job = Job(row, self.project)
            except Exception as exc:  # noqa: BLE001 - one unreadable row spares the others
                self._refused[row["id"]] = f"{type(exc).__name__}: {exc}"
                log.warning("rgt_jupyter: cannot follow job %s: %s", row["id"], exc)
                continue
            with self._lock:
                self._followed.add(job.id)
            # Subscribing (rather than only following) resets the back-off to its first step and
            # hands over every changed observation, the last one too: the watcher forgets an
            # ended job, this class keeps its final snapshot.
            self.watcher.subscribe(job, self._keep)
            added.append(job.id)
        return added

    def _keep(self, snap: Snapshot) -> None:
        """Keep a job's newest observation (called on the watcher's thread)."""
        self._last[snap.job_id] = snap

    def following(self) -> list[str]:
        """Ids of the followed jobs not known to have ended."""
        with self._lock:
            ids = sorted(self._followed)
        out = []
        for job_id in ids:
            snap = self.snapshot(job_id)
            if snap is None or not snap.terminal:
                out.append(job_id)
        return out

    def snapshot(self, job_id: str) -> Snapshot | None:
        """The newest observation of a job: the watcher's, else the last one it handed over."""
        return self.watcher.cached(job_id) or self._last.get(job_id)

    # -- what the API reports

    def watcher_info(self) -> dict[str, Any]:
        """The watcher's state: see the module docstring."""
        w = self.watcher
        following = self.following()
        status, alive, liveness = "watching", w.alive, w.liveness()
        if self.stopped is not None:
            status, alive = "stopped", False
            liveness = f"{w.kind} watcher stopped: {self.stopped}"
        elif not self.scanning:
            status, alive = "stopped", False
            liveness = f"{w.kind} watcher stopped: the scan of the registry ended"
        elif w.stopped:
            status, alive = "stopped", False
        elif w.idle:
            status, alive = "idle", True
            liveness = (
                f"{w.kind} watcher idle: no unfinished job to follow; the registry is read "
                f"every {self.scan_interval:g} s"
            )
        else:
            status = "watching" if alive else "stopped"
        return {
            "kind": w.kind,
            "id": w.id,
            "status": status,
            "alive": alive,
            "liveness": liveness,
            "interval": w.interval,
            "last_tick": w.last_tick,
            "ticks": w.ticks,
            "error": w.error,
            "following": following,
            "scan_interval": self.scan_interval,
            "last_scan": self.last_scan,
            "scan_error": self.scan_error,
        }

    def job_info(self, row: dict[str, Any]) -> dict[str, Any]:
        """One job as the API shows it: see the module docstring."""
        snap = self.snapshot(row["id"])
        out: dict[str, Any] = {
            "id": row["id"],
            "name": row["name"],
            "profile": row["profile"],
            "host": row["host"],
            "state": row["state"],
            "display_state": row["state"],
            "registry_state": row["state"],
            "created_at": row["created_at"],
            "updated_at": row["updated_at"],
            **self._launched_from(row),
            "observed": snap is not None,
        }
        fields = dataclasses.asdict(snap) if snap is not None else {}
        for key in SNAPSHOT_FIELDS:
            out[key] = fields.get(key)
        if snap is not None:
            out["state"], out["display_state"] = snap.state, snap.display_state
        # Who watches a job matters while it runs; an ended job needs no watcher.
        out["watcher_note"] = (
            None if out["state"] in TERMINAL else watcher_note(self.project, row["id"])
        )
        if row["id"] in self._refused:
            out["watcher_note"] = f"not followed by the server: {self._refused[row['id']]}"
        return out

    def _launched_from(self, row: dict[str, Any]) -> dict[str, Any]:
        """The notebook and cell that launched the job (the notebook relative to the server's
        root when it lies there, as the frontend opens it)."""
        found = row.get("spec")
        spec: dict[str, Any] = found if isinstance(found, dict) else {}
        notebook, cell = spec.get("notebook"), spec.get("cell_id")
        if not isinstance(notebook, str):
            return {"notebook": None, "cell_id": None}
        path = Path(notebook) if os.path.isabs(notebook) else (self.root or self.project) / notebook
        if self.root is not None and os.path.isabs(notebook):
            try:
                notebook = path.resolve().relative_to(self.root.resolve()).as_posix()
            except ValueError:
                pass  # outside the server's root: shown as recorded, the frontend cannot open it
        if not isinstance(cell, str) and isinstance(spec.get("cell_digest"), str):
            # Launched by a frontend that sent no cell id (nbclient, nbconvert): the saved
            # notebook's cell with the same launch digest.
            cell = self._cell_of(path, spec["cell_digest"])
        return {"notebook": notebook, "cell_id": cell if isinstance(cell, str) else None}

    def _cell_of(self, path: Path, digest: str) -> str | None:
        """The id of the saved cell of ``path`` whose launch digest is ``digest``."""
        try:
            stat = path.stat()
        except OSError:
            return None
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        digests = self._cells.get(key)
        if digests is None:
            digests = {}
            try:
                nb = json.loads(path.read_text(encoding="utf-8"))
                for c in nb.get("cells", []):
                    source = c.get("source", "")
                    text = "".join(source) if isinstance(source, list) else str(source)
                    found = saved_cell_digest(text) if c.get("cell_type") == "code" else None
                    if found and isinstance(c.get("id"), str):
                        digests.setdefault(found, c["id"])
            except (OSError, ValueError, AttributeError):
                digests = {}  # not a notebook this can read: no cell to point at
            self._cells = {k: v for k, v in self._cells.items() if k[0] != key[0]}
            self._cells[key] = digests
        return digests.get(digest)

    def number(self, ref: str, fmt: str | None) -> dict[str, Any]:
        """The body of ``GET rgt/api/number``: what ``{{rgt:<ref>|<fmt>}}`` shows; raises
        :class:`~rgt_jupyter.errors.RgtError` when it does not resolve."""
        found = num(ref, fmt, self.project)
        return {"ref": ref, "text": found.text, "source": found.source()}

    def jobs_payload(self) -> dict[str, Any]:
        """The body of ``GET rgt/api/jobs``."""
        registry = self.registry()
        rows = registry.jobs() if registry is not None else []
        return {
            "project": str(self.project),
            "watcher": self.watcher_info(),
            "jobs": [self.job_info(r) for r in rows],
        }

    def job_payload(self, id_or_name: str) -> dict[str, Any]:
        """The body of ``GET rgt/api/jobs/<id or name>``; raises :class:`JobNotFound`."""
        registry = self.registry()
        if registry is None:
            raise JobNotFound(f"no job {id_or_name!r}: {self.project} has no jobs yet")
        row = registry.get(id_or_name)
        job = self.job_info(row)
        job["history"] = registry.history(row["id"])
        return {"project": str(self.project), "watcher": self.watcher_info(), "job": job}


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as strings and other odd values as ``str``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, str | int | bool):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_safe(dataclasses.asdict(value))
    return str(value)


def to_json(payload: Any) -> str:
    """``payload`` as strict JSON."""
    return json.dumps(json_safe(payload), default=str, allow_nan=False)


class _RgtHandler(APIHandler):
    """Shared by the endpoints: the authorization resource and the server's watch."""

    auth_resource = AUTH_RESOURCE

    @property
    def watch(self) -> ServerWatch:
        value: ServerWatch = self.settings[WATCH_SETTING]
        return value

    def send(self, payload: dict[str, Any], status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(to_json(payload))


class JobsHandler(_RgtHandler):
    """``GET rgt/api/jobs``: every job of the project."""

    @tornado.web.authenticated
    @authorized
    async def get(self) -> None:
        payload = await IOLoop.current().run_in_executor(None, self.watch.jobs_payload)
        self.send(payload)


class JobHandler(_RgtHandler):
    """``GET rgt/api/jobs/<id or name>``: one job with its registry history."""

    @tornado.web.authenticated
    @authorized
    async def get(self, id_or_name: str) -> None:
        try:
            payload = await IOLoop.current().run_in_executor(
                None, self.watch.job_payload, id_or_name
            )
        except JobNotFound as exc:
            self.send({"message": str(exc), "reason": "Not Found"}, status=404)
            return
        self.send(payload)


class NumberHandler(_RgtHandler):
    """``GET rgt/api/number?ref=<ref>&fmt=<fmt>``: what a markdown placeholder shows."""

    @tornado.web.authenticated
    @authorized
    async def get(self) -> None:
        ref = self.get_query_argument("ref", "").strip()
        fmt = self.get_query_argument("fmt", "").strip() or None
        if not ref:
            self.send({"message": "ref is missing: ?ref=<run>.<key>"}, status=400)
            return
        try:
            payload = await IOLoop.current().run_in_executor(None, self.watch.number, ref, fmt)
        except RgtError as exc:
            self.send({"message": str(exc), "reason": "Not Found", "ref": ref}, status=404)
            return
        self.send(payload)


def watched_project(root_dir: str | os.PathLike[str]) -> Path:
    """The project a server with this root dir watches: ``$RGT_PROJECT``, else the project of
    ``root_dir`` (the nearest ancestor with a ``.rgt/`` folder, else ``root_dir``)."""
    if os.environ.get("RGT_PROJECT"):
        return project_dir()
    return project_dir(root_dir)


def _stop_with(serverapp: Any, watch: ServerWatch) -> None:
    """Stop ``watch`` when the server shuts down.

    A module extension has no stop hook of its own; every shutdown of a server (``stop()``, the
    idle shutdown, a test's cleanup) runs its ``cleanup_extensions`` coroutine, so the watch is
    stopped first thing in it. Interpreter exit and the closing of the server's event loop stop
    it too (see :class:`ServerWatch`)."""
    previous = getattr(serverapp, "cleanup_extensions", None)
    if previous is None:
        return

    async def cleanup_extensions() -> None:
        await IOLoop.current().run_in_executor(None, watch.stop)
        await previous()

    serverapp.cleanup_extensions = cleanup_extensions


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Start the server's watch of the project and add the REST API."""
    project = watched_project(serverapp.root_dir)
    loop = getattr(getattr(serverapp, "io_loop", None), "asyncio_loop", None)
    watch = ServerWatch(project, loop=loop, root=Path(serverapp.root_dir))
    web_app = serverapp.web_app
    base_url = web_app.settings.get("base_url", "/")
    api = url_path_join(base_url, "rgt", "api", "jobs")
    web_app.add_handlers(
        ".*$",
        [
            (api, JobsHandler),
            (url_path_join(api, "([^/]+)"), JobHandler),
            (url_path_join(base_url, "rgt", "api", "number"), NumberHandler),
        ],
    )
    web_app.settings[WATCH_SETTING] = watch
    web_app.settings[WATCHER_SETTING] = watch.watcher
    _stop_with(serverapp, watch)
    watch.start()
    serverapp.log.info(
        "rgt_jupyter: watching the jobs of %s (server-side watcher, registry read every %g s); "
        "REST API at %s",
        project,
        watch.scan_interval,
        api,
    )
