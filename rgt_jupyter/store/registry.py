"""The job registry: ``<project>/.rgt/registry.sqlite3`` (SQLite in WAL mode).

Every job, its spec (paths, program, profile), its last observed state and an append-only
history of events. A new kernel, the CLI and the server extension all read the same file. The
state column is a cache of the last observation; the truth is re-derived from the process table
and artifacts on every look (:mod:`rgt_jupyter.backends`).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import JobNotFound
from .project import state_dir

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    lineage TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    profile TEXT NOT NULL,
    host TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    spec TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_name ON jobs(name, created_at);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS instances (
    id TEXT PRIMARY KEY,
    profile TEXT NOT NULL,
    provider TEXT NOT NULL,
    platform_id TEXT NOT NULL,
    host_alias TEXT NOT NULL,
    state TEXT NOT NULL,
    cost_per_hour REAL,
    created_at REAL NOT NULL,
    ended_at REAL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS decisions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    instance_id TEXT NOT NULL,
    decision TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS acks (
    profile TEXT NOT NULL,
    kind TEXT NOT NULL,
    at REAL NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (profile, kind)
);
CREATE TABLE IF NOT EXISTS watchers (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    started_at REAL NOT NULL,
    last_tick REAL NOT NULL,
    interval REAL NOT NULL,
    jobs TEXT NOT NULL,
    stopped TEXT
);
CREATE TABLE IF NOT EXISTS log_offsets (
    job_id TEXT NOT NULL,
    consumer TEXT NOT NULL,
    offset INTEGER NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (job_id, consumer)
);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    path TEXT NOT NULL,
    verified INTEGER NOT NULL,
    created_at REAL NOT NULL
);
"""


@contextmanager
def _atomic(db: sqlite3.Connection) -> Iterator[None]:
    """One write transaction: every statement in it lands, or none does (a writer killed
    midway included; the connection is closed without the COMMIT, which rolls it back)."""
    db.execute("BEGIN IMMEDIATE")
    yield
    db.execute("COMMIT")


class Registry:
    """Access to one project's registry file."""

    def __init__(self, project: Path) -> None:
        self.project = project
        self.path = state_dir(project) / "registry.sqlite3"
        with self._connect() as db:
            db.executescript(_SCHEMA)

    @contextmanager
    def _connect(self, sync: str = "FULL") -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={'NORMAL' if sync == 'NORMAL' else 'FULL'}")
            db.row_factory = sqlite3.Row
            yield db
        finally:
            db.close()

    def add_job(
        self,
        job_id: str,
        name: str,
        lineage: str,
        attempt: int,
        profile: str,
        host: str,
        spec: dict[str, Any],
    ) -> None:
        """Insert a new job in state ``queued`` and record a ``created`` event."""
        now = time.time()
        with self._connect() as db, _atomic(db):
            db.execute(
                "INSERT INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    job_id,
                    name,
                    lineage,
                    attempt,
                    profile,
                    host,
                    "queued",
                    now,
                    now,
                    json.dumps(spec, sort_keys=True),
                ),
            )
            db.execute(
                "INSERT INTO events (job_id, at, kind, data) VALUES (?,?,?,?)",
                (job_id, now, "created", json.dumps({"attempt": attempt})),
            )

    def update_spec(self, job_id: str, **fields: Any) -> None:
        """Merge ``fields`` into a job's spec."""
        with self._connect() as db, _atomic(db):
            row = db.execute("SELECT spec FROM jobs WHERE id=?", (job_id,)).fetchone()
            spec = json.loads(row["spec"])
            spec.update(fields)
            db.execute(
                "UPDATE jobs SET spec=?, updated_at=? WHERE id=?",
                (json.dumps(spec, sort_keys=True), time.time(), job_id),
            )

    def set_state(self, job_id: str, state: str, **data: Any) -> bool:
        """Record an observed state; returns True (and logs an event) when it changed."""
        with self._connect() as db, _atomic(db):
            row = db.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()
            changed = row is not None and row["state"] != state
            if changed:
                now = time.time()
                db.execute("UPDATE jobs SET state=?, updated_at=? WHERE id=?", (state, now, job_id))
                db.execute(
                    "INSERT INTO events (job_id, at, kind, data) VALUES (?,?,?,?)",
                    (job_id, now, "state", json.dumps({"state": state, **data})),
                )
        return changed

    def event(self, job_id: str, kind: str, **data: Any) -> None:
        """Append an event to a job's history."""
        with self._connect() as db:
            db.execute(
                "INSERT INTO events (job_id, at, kind, data) VALUES (?,?,?,?)",
                (job_id, time.time(), kind, json.dumps(data, default=str)),
            )

    def history(self, job_id: str) -> list[dict[str, Any]]:
        """The job's events, oldest first."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT at, kind, data FROM events WHERE job_id=? ORDER BY seq", (job_id,)
            ).fetchall()
        return [{"at": r["at"], "kind": r["kind"], **json.loads(r["data"])} for r in rows]

    def get(self, id_or_name: str) -> dict[str, Any]:
        """The row of a job by id, or the newest job of that name; raises :class:`JobNotFound`."""
        with self._connect() as db:
            row = db.execute("SELECT * FROM jobs WHERE id=?", (id_or_name,)).fetchone()
            if row is None:
                row = db.execute(
                    "SELECT * FROM jobs WHERE name=? ORDER BY created_at DESC, rowid DESC LIMIT 1",
                    (id_or_name,),
                ).fetchone()
        if row is None:
            raise JobNotFound(
                f"no job {id_or_name!r} in {self.project}/.rgt: `rgt jobs` (or %watch with no "
                "argument) lists the jobs of this project"
            )
        return _row(row)

    def latest(self) -> dict[str, Any] | None:
        """The most recently created job, if any."""
        with self._connect() as db:
            row = db.execute(
                "SELECT * FROM jobs ORDER BY created_at DESC, rowid DESC LIMIT 1"
            ).fetchone()
        return _row(row) if row else None

    def jobs(self) -> list[dict[str, Any]]:
        """All jobs, oldest first."""
        with self._connect() as db:
            rows = db.execute("SELECT * FROM jobs ORDER BY created_at, rowid").fetchall()
        return [_row(r) for r in rows]

    def add_run(self, run_id: str, job_id: str, path: Path, verified: bool) -> None:
        """Record a pulled run and its ``pulled`` event, both or neither."""
        with self._connect() as db, _atomic(db):
            db.execute(
                "INSERT INTO runs VALUES (?,?,?,?,?)",
                (run_id, job_id, str(path), int(verified), time.time()),
            )
            db.execute(
                "INSERT INTO events (job_id, at, kind, data) VALUES (?,?,?,?)",
                (
                    job_id,
                    time.time(),
                    "pulled",
                    json.dumps({"run_id": run_id, "verified": verified}),
                ),
            )

    def runs(self, job_id: str) -> list[dict[str, Any]]:
        """Runs pulled from a job, oldest first."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT * FROM runs WHERE job_id=? ORDER BY created_at", (job_id,)
            ).fetchall()
        return [dict(r) for r in rows]

    # -- watchers: their liveness, and how far each consumer has shown a job's log

    def watcher_tick(
        self,
        watcher_id: str,
        kind: str,
        pid: int,
        host: str,
        started_at: float,
        interval: float,
        jobs: list[str],
        stopped: str | None = None,
    ) -> None:
        """Stamp a watcher's tick (``stopped``: why it stopped, when it did)."""
        with self._connect(sync="NORMAL") as db:
            db.execute(
                "INSERT OR REPLACE INTO watchers VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    watcher_id,
                    kind,
                    pid,
                    host,
                    started_at,
                    time.time(),
                    interval,
                    json.dumps(jobs),
                    stopped,
                ),
            )

    def watchers(self) -> list[dict[str, Any]]:
        """Every watcher that ever ticked for this project, newest tick first."""
        with self._connect() as db:
            rows = db.execute("SELECT * FROM watchers ORDER BY last_tick DESC").fetchall()
        return [{**dict(r), "jobs": json.loads(r["jobs"])} for r in rows]

    def log_offset(self, job_id: str, consumer: str) -> int | None:
        """How many bytes of the job's log ``consumer`` (a notebook) has shown, if recorded."""
        with self._connect() as db:
            row = db.execute(
                "SELECT offset FROM log_offsets WHERE job_id=? AND consumer=?", (job_id, consumer)
            ).fetchone()
        return int(row["offset"]) if row else None

    def set_log_offset(self, job_id: str, consumer: str, offset: int) -> None:
        """Record that ``consumer`` has shown the job's log up to byte ``offset`` (kept through a
        crash of the process, not of the machine: quick enough to follow every shown batch)."""
        with self._connect(sync="NORMAL") as db:
            db.execute(
                "INSERT OR REPLACE INTO log_offsets VALUES (?,?,?,?)",
                (job_id, consumer, int(offset), time.time()),
            )

    # -- machines (instances), teardown decisions, acknowledgements

    def add_instance(
        self,
        instance_id: str,
        profile: str,
        provider: str,
        platform_id: str,
        host_alias: str,
        state: str,
        cost_per_hour: float | None,
        data: dict[str, Any],
    ) -> None:
        """Record a machine brought up (through a platform API, or by the user in a console)."""
        with self._connect() as db:
            db.execute(
                "INSERT INTO instances VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    instance_id,
                    profile,
                    provider,
                    platform_id,
                    host_alias,
                    state,
                    cost_per_hour,
                    time.time(),
                    None,
                    json.dumps(data, sort_keys=True, default=str),
                ),
            )

    def set_instance_state(self, instance_id: str, state: str, ended: bool = False) -> None:
        """Record a machine's state as last seen (``ended``: its meter is confirmed stopped)."""
        with self._connect() as db:
            db.execute(
                "UPDATE instances SET state=?, ended_at=COALESCE(ended_at, ?) WHERE id=?",
                (state, time.time() if ended else None, instance_id),
            )

    def instance(self, instance_id: str) -> dict[str, Any] | None:
        """One machine's row, or None."""
        with self._connect() as db:
            row = db.execute("SELECT * FROM instances WHERE id=?", (instance_id,)).fetchone()
        return _instance(row) if row else None

    def instances(self, live_only: bool = False) -> list[dict[str, Any]]:
        """Machines, oldest first (``live_only``: those whose meter is not confirmed stopped)."""
        query = "SELECT * FROM instances"
        if live_only:
            query += " WHERE ended_at IS NULL"
        with self._connect() as db:
            rows = db.execute(query + " ORDER BY created_at, rowid").fetchall()
        return [_instance(r) for r in rows]

    def decide(self, instance_id: str, decision: str, **data: Any) -> dict[str, Any]:
        """Append a teardown decision (approve, override, refuse, ...) and return it."""
        record = {"at": time.time(), "instance_id": instance_id, "decision": decision, **data}
        with self._connect() as db:
            db.execute(
                "INSERT INTO decisions (at, instance_id, decision, data) VALUES (?,?,?,?)",
                (record["at"], instance_id, decision, json.dumps(data, default=str)),
            )
        return record

    def decisions(self, instance_id: str | None = None) -> list[dict[str, Any]]:
        """Teardown decisions, oldest first."""
        query, args = "SELECT * FROM decisions", ()  # type: tuple[str, tuple[str, ...]]
        if instance_id is not None:
            query, args = query + " WHERE instance_id=?", (instance_id,)
        with self._connect() as db:
            rows = db.execute(query + " ORDER BY seq", args).fetchall()
        return [
            {
                "at": r["at"],
                "instance_id": r["instance_id"],
                "decision": r["decision"],
                **json.loads(r["data"]),
            }
            for r in rows
        ]

    def ack(self, profile: str, kind: str, **data: Any) -> bool:
        """Record an acknowledgement once; False when it was already there."""
        with self._connect() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO acks VALUES (?,?,?,?)",
                (profile, kind, time.time(), json.dumps(data, default=str)),
            )
            return cur.rowcount == 1

    def acked(self, profile: str, kind: str) -> dict[str, Any] | None:
        """The acknowledgement, if recorded."""
        with self._connect() as db:
            row = db.execute(
                "SELECT * FROM acks WHERE profile=? AND kind=?", (profile, kind)
            ).fetchone()
        return {"at": row["at"], **json.loads(row["data"])} if row else None


def _instance(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    out["data"] = json.loads(out["data"])
    return out


def _row(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    out["spec"] = json.loads(out["spec"])
    return out
