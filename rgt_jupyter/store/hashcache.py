"""sha256 of local files, remembered by their identity on disk: a file (device and inode)
whose size, mtime and ctime are what they were when it was hashed is not read again (a push of an unchanged
tree, a gate's re-check of pulled runs). Any write changes the ctime (which no user call can set
back), so a changed file is always hashed afresh.

The same record keeps which sets of objects a push found all held by a remote store
(:meth:`HashCache.held`): a hint only, so that a push of a tree the store held last time does not
start a stream it will not need; where the hint is wrong the push asks and sends as always.

The record is an SQLite file in the user cache dir (``$RGT_CACHE_DIR`` overrides it); it is a
cache only: when it cannot be opened or written every file is simply hashed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path

import platformdirs

from .fsutil import sha256_file


def cache_path() -> Path:
    """Where the record lives."""
    root = os.environ.get("RGT_CACHE_DIR") or platformdirs.user_cache_dir("rgt", appauthor=False)
    return Path(root) / "hashes.sqlite"


def _ident(st: os.stat_result) -> str:
    """The file itself, wherever it is renamed to (device and inode)."""
    return f"{st.st_dev}:{st.st_ino}"


def _digest(shas: Iterable[str]) -> str:
    return hashlib.sha256(json.dumps(sorted(set(shas))).encode()).hexdigest()


def _key(st: os.stat_result) -> str:
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


class HashCache:
    """sha256 of files, hashed only when changed (see the module docstring). Use as a context
    manager: the new hashes are written on exit."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_path()
        self._db: sqlite3.Connection | None = None
        self._new: list[tuple[str, str, str]] = []
        self.reused = 0
        self.hashed = 0

    def __enter__(self) -> HashCache:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=5)
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS files (ident TEXT PRIMARY KEY, key TEXT, sha TEXT)"
            )
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS held "
                "(store TEXT, objects TEXT, at REAL, PRIMARY KEY (store, objects))"
            )
        except (OSError, sqlite3.Error):
            self._db = None
        return self

    def sha256(self, path: str | os.PathLike[str]) -> str:
        """The file's sha256, from the record when the file is unchanged since."""
        st = os.stat(path)
        ident, key = _ident(st), _key(st)
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                row = self._db.execute(
                    "SELECT sha FROM files WHERE ident = ? AND key = ?", (ident, key)
                ).fetchone()
                if row:
                    self.reused += 1
                    return str(row[0])
        sha = sha256_file(path)[0]
        self.hashed += 1
        if _key(os.stat(path)) == key:  # not written to while it was read
            self._new.append((ident, key, sha))
        return sha

    def remember(self, path: str | os.PathLike[str], sha: str) -> None:
        """Record ``sha`` for a file whose bytes were just hashed as they were written."""
        st = os.stat(path)
        self._new.append((_ident(st), _key(st), sha))

    def held(self, store: str, shas: Iterable[str]) -> bool:
        """Whether a push found every object of ``shas`` held by ``store`` (a hint)."""
        if self._db is None:
            return False
        with contextlib.suppress(sqlite3.Error):
            row = self._db.execute(
                "SELECT 1 FROM held WHERE store = ? AND objects = ?", (store, _digest(shas))
            ).fetchone()
            return row is not None
        return False

    def note_held(self, store: str, shas: Iterable[str]) -> None:
        """Record that ``store`` holds every object of ``shas`` (the newest 256 sets a store)."""
        if self._db is None:
            return
        with contextlib.suppress(sqlite3.Error), self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO held (store, objects, at) VALUES (?, ?, ?)",
                (store, _digest(shas), time.time()),
            )
            self._db.execute(
                "DELETE FROM held WHERE store = ? AND objects NOT IN "
                "(SELECT objects FROM held WHERE store = ? ORDER BY at DESC LIMIT 256)",
                (store, store),
            )

    def __exit__(self, *exc: object) -> None:
        if self._db is None:
            return
        with contextlib.suppress(sqlite3.Error):
            if self._new:
                with self._db:
                    self._db.executemany(
                        "INSERT OR REPLACE INTO files (ident, key, sha) VALUES (?, ?, ?)",
                        self._new,
                    )
            self._db.close()
        self._db = None
