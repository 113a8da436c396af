"""The job registry: ``<project>/.rgt/registry.sqlite3`` (SQLite in WAL mode).

Every job, its spec (paths, program, profile), its last observed state and an append-only
history of events. A new kernel, the CLI and the server extension all read the same file. The
state column is a cache of the last observation; the truth is re-derived from the process table
and artifacts on every look (:mod:`rgt_jupyter.backends`).

The registry is a cache of what is on disk, not the only copy: each job's control dir holds its
spec and records, and what only this side knows is also appended to the project's journal
(:mod:`.journal`). A registry file that is empty or not a database is never replaced silently:
opening it raises :class:`~rgt_jupyter.errors.RegistryDamaged`, which names the file and the
command that rebuilds it (``rgt jobs --rebuild``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import JobNotFound, RegistryDamaged
from . import journal
from .project import state_dir

#: The first bytes of every SQLite 3 database file.
SQLITE_HEADER = b"SQLite format 3\x00"
#: The command that rebuilds a damaged registry, as the error says it.
REBUILD = "rgt jobs --rebuild"

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
CREATE TABLE IF NOT EXISTS last_seen (
    job_id TEXT PRIMARY KEY,
    at REAL NOT NULL,
    state TEXT NOT NULL,
    progress TEXT
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
        if not self.path.exists():
            _create(self.path)
        problem = damage(self.path)
        if problem is not None:
            raise self._damaged(problem)
        with self._connect() as db:
            db.executescript(_SCHEMA)

    def _damaged(self, problem: str) -> RegistryDamaged:
        return RegistryDamaged(
            f"the registry {self.path} {problem}; it was left as it is, and nothing was "
            f"launched or recorded. `{REBUILD}` rebuilds it from the jobs' control dirs, the "
            "run folders and the project's journal (the damaged file is kept beside it)"
        )

    @contextmanager
    def _connect(self, sync: str = "FULL") -> Iterator[sqlite3.Connection]:
        try:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except sqlite3.DatabaseError as exc:
            raise self._damaged(f"cannot be opened ({exc})") from exc
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={'NORMAL' if sync == 'NORMAL' else 'FULL'}")
            db.row_factory = sqlite3.Row
            yield db
        except sqlite3.DatabaseError as exc:
            # "file is not a database", "database disk image is malformed": the file, not the
            # query (a locked database, a constraint, a typo are subclasses, raised as they are).
            if type(exc) is not sqlite3.DatabaseError:
                raise
            raise self._damaged(f"cannot be read ({exc})") from exc
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
        state: str = "queued",
        created_at: float | None = None,
    ) -> None:
        """Insert a new job (in state ``queued``) and record a ``created`` event; the journal
        keeps where its control dir is."""
        now = time.time()
        created = now if created_at is None else created_at
        journal.append(
            self.project,
            "job",
            job_id=job_id,
            control_dir=spec.get("control_dir"),
            transport=spec.get("transport"),
            host_alias=spec.get("host_alias"),
            profile=profile,
        )
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
                    state,
                    created,
                    now,
                    json.dumps(spec, sort_keys=True),
                ),
            )
            db.execute(
                "INSERT INTO events (job_id, at, kind, data) VALUES (?,?,?,?)",
                (job_id, now, "created", json.dumps({"attempt": attempt})),
            )

    def update_spec(self, job_id: str, **fields: Any) -> None:
        """Merge ``fields`` into a job's spec (journaled: the control dir does not hold them)."""
        journal.append(self.project, "spec", job_id=job_id, fields=fields)
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

    def run_seconds(self) -> dict[str, float]:
        """How long each job ran, as recorded with its last state change (one query for every
        job: what ``rgt jobs`` prices ended jobs by)."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT job_id, data FROM events WHERE kind='state' ORDER BY seq"
            ).fetchall()
        out: dict[str, float] = {}
        for row in rows:
            try:
                elapsed = json.loads(row["data"]).get("elapsed")
            except (ValueError, AttributeError):
                continue
            if isinstance(elapsed, int | float) and not isinstance(elapsed, bool):
                out[row["job_id"]] = float(elapsed)
        return out

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

    def add_run(
        self, run_id: str, job_id: str, path: Path, verified: bool, at: float | None = None
    ) -> None:
        """Record a pulled run and its ``pulled`` event, both or neither."""
        with self._connect() as db, _atomic(db):
            db.execute(
                "INSERT INTO runs VALUES (?,?,?,?,?)",
                (run_id, job_id, str(path), int(verified), time.time() if at is None else at),
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

    def last_seen(self, job_id: str) -> dict[str, Any] | None:
        """What a watcher last saw of the job: ``{"at", "state", "progress"}``, or None."""
        with self._connect() as db:
            row = db.execute("SELECT * FROM last_seen WHERE job_id=?", (job_id,)).fetchone()
        if row is None:
            return None
        try:
            progress = json.loads(row["progress"]) if row["progress"] else None
        except ValueError:
            progress = None
        return {"at": row["at"], "state": row["state"], "progress": progress}

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
        seen: Sequence[tuple[str, float, str, dict[str, Any] | None]] = (),
    ) -> None:
        """Stamp a watcher's tick (``stopped``: why it stopped, when it did), and keep what it
        last saw of its jobs (``seen``: id, when, state, newest progress record), so a new
        kernel's first view shows that, with its age, before its own first look."""
        with self._connect(sync="NORMAL") as db:
            db.executemany(
                "INSERT OR REPLACE INTO last_seen VALUES (?,?,?,?)",
                [
                    (job_id, at, state, json.dumps(progress, default=str) if progress else None)
                    for job_id, at, state, progress in seen
                ],
            )
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
        journal.append(
            self.project,
            "instance",
            instance_id=instance_id,
            profile=profile,
            provider=provider,
            platform_id=platform_id,
            host_alias=host_alias,
            state=state,
            cost_per_hour=cost_per_hour,
            data=data,
        )
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
        journal.append(
            self.project, "instance_state", instance_id=instance_id, state=state, ended=ended
        )
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
        journal.append(
            self.project, "decision", instance_id=instance_id, decision=decision, data=data
        )
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
            added = cur.rowcount == 1
        if added:
            journal.append(self.project, "ack", profile=profile, ack=kind, data=data)
        return added

    def unack(self, profile: str, kind: str) -> bool:
        """Withdraw an acknowledgement (a standing approval); False when there was none."""
        with self._connect() as db:
            cur = db.execute("DELETE FROM acks WHERE profile=? AND kind=?", (profile, kind))
            removed = cur.rowcount == 1
        if removed:
            journal.append(self.project, "unack", profile=profile, ack=kind)
        return removed

    def acked(self, profile: str, kind: str) -> dict[str, Any] | None:
        """The acknowledgement, if recorded."""
        with self._connect() as db:
            row = db.execute(
                "SELECT * FROM acks WHERE profile=? AND kind=?", (profile, kind)
            ).fetchone()
        return {"at": row["at"], **json.loads(row["data"])} if row else None

    def replay_machines(self, facts: list[dict[str, Any]]) -> list[str]:
        """Write the rented machines, their states, teardown decisions and acknowledgements
        of the project's journal (:func:`.journal.read`) into this registry, as they were
        journaled (not journaling them again); returns the machines' ids."""
        instances = []
        with self._connect() as db, _atomic(db):
            for fact in facts:
                kind = fact.get("kind")
                if kind == "instance":
                    db.execute(
                        "INSERT OR REPLACE INTO instances VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (
                            fact["instance_id"],
                            fact["profile"],
                            fact["provider"],
                            fact["platform_id"],
                            fact["host_alias"],
                            fact["state"],
                            fact.get("cost_per_hour"),
                            fact["at"],
                            None,
                            json.dumps(fact.get("data") or {}, sort_keys=True, default=str),
                        ),
                    )
                    instances.append(str(fact["instance_id"]))
                elif kind == "instance_state":
                    db.execute(
                        "UPDATE instances SET state=?, ended_at=COALESCE(ended_at, ?) WHERE id=?",
                        (
                            fact["state"],
                            fact["at"] if fact.get("ended") else None,
                            fact["instance_id"],
                        ),
                    )
                elif kind == "decision":
                    db.execute(
                        "INSERT INTO decisions (at, instance_id, decision, data) VALUES (?,?,?,?)",
                        (
                            fact["at"],
                            fact["instance_id"],
                            fact["decision"],
                            json.dumps(fact.get("data") or {}, default=str),
                        ),
                    )
                elif kind == "unack":
                    db.execute(
                        "DELETE FROM acks WHERE profile=? AND kind=?",
                        (fact["profile"], fact["ack"]),
                    )
                elif kind == "ack":
                    db.execute(
                        "INSERT OR IGNORE INTO acks VALUES (?,?,?,?)",
                        (
                            fact["profile"],
                            fact["ack"],
                            fact["at"],
                            json.dumps(fact.get("data") or {}),
                        ),
                    )
        return instances


def _instance(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    out["data"] = json.loads(out["data"])
    return out


def _row(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    out["spec"] = json.loads(out["spec"])
    return out


def _create(path: Path) -> None:
    """Make a new registry whole under a temporary name, then link it into place: no process
    ever sees a registry file that is still empty (which would read as a damaged one), and of
    two processes creating it at once, one wins and both use its file."""
    tmp = path.with_name(f".{path.name}.new-{os.getpid()}-{threading.get_ident()}")
    try:
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
        finally:
            db.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it first: its file is the registry
        except OSError:  # a filesystem without hard links: a rename, unless one came first
            if not path.exists():
                os.replace(tmp, path)
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def damage(path: Path) -> str | None:
    """What is wrong with a registry file that exists (None: nothing, or no file yet)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not head:
        return "is empty (0 bytes)"
    if head != SQLITE_HEADER:
        return "is not an SQLite database (its first bytes are not SQLite's)"
    return None
