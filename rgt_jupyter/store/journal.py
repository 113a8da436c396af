"""The project's journal: ``<project>/.rgt/journal.jsonl``, an append-only copy of what the
registry learns that the jobs' own files do not hold.

The registry is a cache of what is on disk: each job's control dir holds its spec
(``launch.json``) and its records, each run folder its ``run.json``. What only the notebook side
knows is journaled here, one JSON line per fact, fsynced: where each job's control dir is (its
transport and host), the fields its launch and later actions added to its spec, and the rented
machines with their teardown decisions. :mod:`rgt_jupyter.run.rebuild` rebuilds a registry that
was lost or damaged from these and the files they point to.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from .fsutil import jsonl_records

NAME = "journal.jsonl"


def journal_path(project: Path) -> Path:
    """Where the project's journal is."""
    return project / ".rgt" / NAME


def append(project: Path, kind: str, **fields: Any) -> None:
    """Append one fact (``kind``: ``job``, ``spec``, ``instance``, ``instance_state``,
    ``decision``, ``ack``), durable before this returns."""
    path = journal_path(project)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"kind": kind, "at": time.time(), **fields}, default=str, sort_keys=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read(project: Path) -> list[dict[str, Any]]:
    """Every fact of the journal, oldest first (a torn last line is skipped)."""
    path = journal_path(project)
    if not path.is_file():
        return []
    return jsonl_records(path.read_text(encoding="utf-8", errors="replace"))
