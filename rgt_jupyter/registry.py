"""The job registry: ``<project>/.rgt/registry.sqlite3`` (SQLite in WAL mode).

Every job, its spec (paths, program, profile), its last observed state and an append-only
history of events. A new kernel, the CLI and the server extension all read the same file. The
state column is a cache of the last observation; the truth is re-derived from the process table
and artifacts on every look (:mod:`rgt_jupyter.status`).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import JobNotFound
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
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    path TEXT NOT NULL,
    verified INTEGER NOT NULL,
    created_at REAL NOT NULL
);
"""


class Registry:
    """Access to one project's registry file."""

    def __init__(self, project: Path) -> None:
        self.project = project
        self.path = state_dir(project) / "registry.sqlite3"
        with self._connect() as db:
            db.executescript(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
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
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
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
            db.execute("COMMIT")

    def update_spec(self, job_id: str, **fields: Any) -> None:
        """Merge ``fields`` into a job's spec."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT spec FROM jobs WHERE id=?", (job_id,)).fetchone()
            spec = json.loads(row["spec"])
            spec.update(fields)
            db.execute(
                "UPDATE jobs SET spec=?, updated_at=? WHERE id=?",
                (json.dumps(spec, sort_keys=True), time.time(), job_id),
            )
            db.execute("COMMIT")

    def set_state(self, job_id: str, state: str, **data: Any) -> bool:
        """Record an observed state; returns True (and logs an event) when it changed."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()
            changed = row is not None and row["state"] != state
            if changed:
                now = time.time()
                db.execute("UPDATE jobs SET state=?, updated_at=? WHERE id=?", (state, now, job_id))
                db.execute(
                    "INSERT INTO events (job_id, at, kind, data) VALUES (?,?,?,?)",
                    (job_id, now, "state", json.dumps({"state": state, **data})),
                )
            db.execute("COMMIT")
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
        """Record a pulled run."""
        with self._connect() as db:
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


def _row(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    out["spec"] = json.loads(out["spec"])
    return out
