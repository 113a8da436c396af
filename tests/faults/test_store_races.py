"""Races on the remote push store (``rgt_jupyter/remote/agent.py``): several pushes taking files
from it at the same moment, and a job writing into the input it took while the store makes a
spare of it. No two jobs may ever hold one file, and the store may never name bytes a job wrote
by the object's sha256 as verified."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter.remote import agent

from ..conftest import wait_for
from ..test_push_store import _object_store, _place, _refills_done, _sha, _stamped, _store, _taken
from .evidence import Evidence


@pytest.mark.fault(
    "R8-store-race",
    asserts="four pushes placing the same 300 objects at the same moment never give two jobs "
    "one file (each object is taken by one job at most, the others get copies), and every "
    "job's files have the object's bytes",
    mutation=(
        "rgt_jupyter/remote/agent.py",
        "            fcntl.flock(self.fd, fcntl.LOCK_EX)\n",
        "            pass\n",
    ),
)
def test_pushes_placing_at_once_never_give_two_jobs_the_same_file(
    tmp_path: Path, evidence: Evidence
) -> None:
    """Protection: rgt_jupyter/remote/agent.py ``_store_lock``: taking a file out of the store
    (a hard link while no job holds it) happens under an exclusive lock beside the store;
    without it two pushes both see a file no job holds and both take it."""
    objects, entries = _object_store(tmp_path, 300, 2048)
    evidence.keep(*(_store(objects, sha) for sha in entries.values()))
    dests = [tmp_path / f"job{i}" / "code" for i in range(4)]
    procs = [_place(objects, dest) for dest in dests]
    for proc in procs:  # all started: now each gets its entries, one right after the other
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(entries).encode())
        proc.stdin.close()
    for proc in procs:
        assert proc.stdout is not None
        out = proc.stdout.read()
        assert proc.wait(300) == 0 and json.loads(out) == {"missing": []}
    for rel, sha in entries.items():
        inodes = [(dest / rel).stat().st_ino for dest in dests]
        assert len(set(inodes)) == len(dests), f"{rel}: two jobs hold one file"
        assert all(_sha(dest / rel) == sha for dest in dests)
    assert evidence.account(*dests) == 0
    wait_for(lambda: _refills_done(objects), 120, "the spare makers to end")


def _write_into(path: Path) -> bytes:
    """A job writing into its own input, in place (the same inode); returns the file's bytes."""
    with open(path, "r+b") as fh:
        fh.seek(100)
        fh.write(b"written by the job")
    return path.read_bytes()


@pytest.mark.fault(
    "R8-store-race",
    asserts="a job writing into the input it took from the store, before or while the store "
    "copies its spare: the store never names those bytes by the object's sha256 as verified; "
    "the next push hashes them, deletes them and asks for the object again; the job's file "
    "keeps what the job wrote",
    mutation=(
        "rgt_jupyter/remote/agent.py",
        "if locked and _stamp(os.stat(src)) == _stamp(before) and _stamp_ok(src):",
        "if locked:",
    ),
)
@pytest.mark.parametrize("when", ["before", "during"])
def test_a_spare_is_never_made_of_bytes_a_job_wrote_into_its_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, evidence: Evidence, when: str
) -> None:
    """Protection: rgt_jupyter/remote/agent.py ``_spare``: the copy is renamed over the store's
    name only if the object's stamp (size, mtime, ctime, inode) is what it was before the copy
    and what it was when hashed; without it a spare of the job's bytes would be named as the
    object and taken, unhashed, by the next job."""
    objects, job_file, sha = _taken(tmp_path, 2 * agent.SPARE_MIN + 5)
    obj = _store(objects, sha)
    if when == "before":
        evidence.keep_bytes(_write_into(job_file), "the job's input as the job wrote it")
    else:
        clone = agent._clone

        def clone_then_write(src: str, tmp: str, view: Any) -> None:
            clone(src, tmp, view)  # the copy is whole: now the job writes, before the rename
            evidence.keep_bytes(_write_into(job_file), "the job's input as the job wrote it")

        monkeypatch.setattr(agent, "_clone", clone_then_write)
    assert agent.refill(str(objects), [sha]) == 0
    assert obj.stat().st_ino == job_file.stat().st_ino, "a spare was made of changed bytes"
    assert not _stamped(obj)
    assert not list(obj.parent.glob(".*spare*")), "the spare's temporary was left behind"
    assert evidence.account(job_file.parent) == 0
    dest = tmp_path / "next" / "code"
    assert agent.place_entries(str(objects), str(dest), {"w.bin": sha}) == [sha]
    assert not obj.exists()  # deleted: the push sends it again
