"""The remote push store and the files jobs take from it, on the real loopback sshd and with the
agent's own commands: a job takes a file of the store no other job holds (nothing is copied),
the store then makes itself a spare in the background, so the next job takes one too; no spare
where the disk would be left short. The races (pushes at once, a job writing into its input
while the spare is made) are fault cases: ``tests/faults/test_store_races.py``."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rgt_jupyter.remote import agent
from rgt_jupyter.remote import path as remote_path

from .conftest import wait_for
from .storeprocs import refills
from .test_transfer_writes import SEEN, _run, _sha


def _store(objects: Path, sha: str) -> Path:
    return objects / sha[:2] / sha


def _stamped(obj: Path) -> bool:
    """Whether the object's stamp (``.ok``) says it is unchanged since it was hashed."""
    return bool(agent._stamp_ok(str(obj)))


def _spared(objects: Path, shas: list[str], held: set[int]) -> bool:
    """Every object is a file no job holds (not one of ``held``), whole and stamped."""
    for sha in shas:
        st = _store(objects, sha).stat()
        if st.st_ino in held or st.st_nlink != 1 or not _stamped(_store(objects, sha)):
            return False
    return True


def _inodes(code: Path, want: dict[str, str]) -> dict[str, int]:
    return {rel: (code / rel).stat().st_ino for rel in want}


def test_each_job_takes_a_file_of_the_store_and_the_store_makes_itself_a_spare(
    project: Path, box: Path, tmp_path: Path
) -> None:
    tree = tmp_path / "inputs"
    tree.mkdir()
    sizes = {"weights.bin": 3 * agent.SPARE_MIN + 7, "data.bin": agent.SPARE_MIN, "small": 10}
    for name, size in sizes.items():
        (tree / name).write_bytes(os.urandom(size))
    want = {p.name: _sha(p) for p in tree.iterdir()}
    large = sorted(want[n] for n in ("weights.bin", "data.bin"))  # the ones that get spares

    first = _run(project, SEEN, "spare-a", push=[str(tree)])
    objects = Path(first.spec.control_dir).parent / ".objects"
    code_a = Path(first.spec.control_dir) / "code" / "inputs"
    held_a = _inodes(code_a, want)
    # The first job took the store's files (nothing copied for it) ...
    assert (code_a / "small").stat().st_nlink == 2  # the store's name and this job's
    # ... and the store makes itself spares of the large ones.
    wait_for(lambda: _spared(objects, large, set(held_a.values())), 120, "the store's spares")
    spares = {sha: _store(objects, sha).stat().st_ino for sha in large}
    for sha in large:  # the spare has the object's bytes under its name
        assert _sha(_store(objects, sha)) == sha
    wait_for(lambda: _refills_done(objects), 120, "the spare maker to end")

    second = _run(project, SEEN, "spare-b", push=[str(tree)])
    assert json.loads((Path(second.spec.out_dir) / "seen.json").read_text()) == want
    code_b = Path(second.spec.control_dir) / "code" / "inputs"
    held_b = _inodes(code_b, want)
    # The second job took the spares themselves (nothing was copied for them), got a copy of
    # the small file the first job holds, and holds no file the first one holds.
    assert {rel: held_b[rel] for rel in ("weights.bin", "data.bin")} == {
        rel: spares[want[rel]] for rel in ("weights.bin", "data.bin")
    }
    assert (code_b / "small").stat().st_nlink == 1
    assert not set(held_a.values()) & set(held_b.values())
    # The store made itself new spares, held by no job, with the same bytes.
    held = set(held_a.values()) | set(held_b.values())
    wait_for(lambda: _spared(objects, large, held), 120, "the store's next spares")
    for sha in large:
        assert _sha(_store(objects, sha)) == sha
    for rel, sha in want.items():  # each job's own files are as they were
        assert _sha(code_a / rel) == sha and _sha(code_b / rel) == sha


def _object_store(root: Path, count: int, size: int) -> tuple[Path, dict[str, str]]:
    """A store of ``count`` objects of ``size`` random bytes, each hashed and stamped as a push
    leaves them; returns the store and the ``{rel: sha256}`` to place."""
    objects = root / ".objects"
    entries = {}
    for i in range(count):
        data = os.urandom(size)
        sha = hashlib.sha256(data).hexdigest()
        obj = _store(objects, sha)
        obj.parent.mkdir(parents=True, exist_ok=True)
        obj.write_bytes(data)
        agent.write_json_atomic(str(obj) + ".ok", agent._stamp(os.stat(obj)))
        entries[f"part{i % 7}/f{i:04d}.bin"] = sha
    return objects, entries


def _place(objects: Path, dest: Path) -> subprocess.Popen[bytes]:
    """``agent.py place`` as a push runs it, in a process of its own, waiting for its entries
    on stdin."""
    return subprocess.Popen(
        [sys.executable, remote_path("agent.py"), "place", str(objects), str(dest)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )


def _refills_done(objects: Path) -> bool:
    """No spare maker of this store still runs."""
    return not refills(objects)


def _taken(tmp_path: Path, size: int) -> tuple[Path, Path, str]:
    """A store holding one object that a job took (its file is the store's): store, the
    job's file, sha256."""
    objects, entries = _object_store(tmp_path, 1, size)
    ((rel, sha),) = entries.items()
    job_file = tmp_path / "job" / "code" / rel
    job_file.parent.mkdir(parents=True)
    assert agent._take(str(_store(objects, sha)), f"{job_file}.tmp", str(job_file))
    return objects, job_file, sha


def test_no_spare_is_made_where_the_disk_would_be_left_short(
    tmpfs: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spare takes room a running job may need: it is made only while a tenth of the disk and
    SPARE_FREE_MIN stay free after it; else the store's file stays the one job's, as it was."""
    disk = tmpfs("disk", "64m")
    objects, job_file, sha = _taken(disk, 8 << 20)  # over SPARE_MIN
    obj = _store(objects, sha)
    agent.refill(str(objects), [sha])  # 64 MiB is far below SPARE_FREE_MIN
    assert obj.stat().st_ino == job_file.stat().st_ino and _stamped(obj)
    monkeypatch.setattr(agent, "SPARE_FREE_MIN", 0)
    with open(disk / "filler.bin", "wb") as fh:  # 8 MiB would leave less than a tenth
        fh.write(bytes(50 << 20))
    agent.refill(str(objects), [sha])
    assert obj.stat().st_ino == job_file.stat().st_ino and _stamped(obj)
    assert not list(obj.parent.glob(".*spare*"))
    (disk / "filler.bin").unlink()  # room again: the spare is made
    agent.refill(str(objects), [sha])
    assert obj.stat().st_ino != job_file.stat().st_ino and obj.stat().st_nlink == 1
    assert _sha(obj) == sha and _stamped(obj)


def test_the_push_runs_with_the_interpreter_the_audit_found_and_the_name_where_it_is_gone(
    project: Path, box: Path, tmp_path: Path
) -> None:
    """A profile's ``python`` can be a shim (pyenv's, asdf's: a shell script that picks the
    interpreter, then starts it). The audit finds what it starts; the push's own commands run
    that interpreter itself, not the shim. Where that interpreter is gone (an audit kept from an
    earlier machine), they run with the configured name, and the job gets its files as ever."""
    calls = tmp_path / "shim calls"
    shim = tmp_path / "shim" / "python3"
    shim.parent.mkdir()
    words = "place|recv|audit|run|look|send"
    shim.write_text(
        "#!/bin/sh\n"
        f'for a in "$@"; do case "$a" in {words}) printf "%s " "$a" >> {shlex.quote(str(calls))};; '
        "esac; done\n"
        f"echo >> {shlex.quote(str(calls))}\n"
        f'exec {shlex.quote(sys.executable)} "$@"\n'
    )
    shim.chmod(0o755)
    tree = tmp_path / "inputs"
    tree.mkdir()
    (tree / "weights.bin").write_bytes(os.urandom(1 << 16))
    want = {"weights.bin": _sha(tree / "weights.bin")}

    first = _run(project, SEEN, "shim-a", push=[str(tree)], python=str(shim))
    assert json.loads((Path(first.spec.out_dir) / "seen.json").read_text()) == want
    said = calls.read_text().split()
    assert "audit" in said and "run" in said  # the audit and the job itself: by the name
    assert "place" not in said and "recv" not in said  # the push: by what the audit found

    cache = next((project / ".rgt" / "audit").glob("box-*.json"))
    report = json.loads(cache.read_text())
    report["facts"]["executable"] = str(tmp_path / "gone" / "python3")
    cache.write_text(json.dumps(report))
    calls.unlink()
    second = _run(project, SEEN, "shim-b", push=[str(tree)], python=str(shim))
    assert json.loads((Path(second.spec.out_dir) / "seen.json").read_text()) == want
    assert "place" in calls.read_text().split()  # by the name, once the found one was gone


def test_a_stamp_is_trusted_only_whole_and_equal_to_the_object_as_it_is_now(
    tmp_path: Path,
) -> None:
    """The stamp that lets a push skip hashing an object is written over the old one in place:
    it is trusted whole and equal to the object's stat now, never torn, stale or padded out."""
    obj = tmp_path / "object"
    obj.write_bytes(os.urandom(4096))
    agent.write_json_atomic(f"{obj}.ok", agent._stamp(os.stat(obj)))  # the long form
    assert _stamped(obj)
    os.link(obj, tmp_path / "a job's name")  # a link moves the ctime: the stamp no longer holds
    assert not _stamped(obj)
    agent._note_stamp(str(obj), agent._stamp(os.stat(obj)))  # over the longer one, in place
    assert _stamped(obj) and Path(f"{obj}.ok").stat().st_size == agent.STAMP_WIDTH
    whole = Path(f"{obj}.ok").read_bytes()
    Path(f"{obj}.ok").write_bytes(whole[: len(whole.rstrip()) // 2])  # torn in a crash
    assert not _stamped(obj)
    agent._note_stamp(str(obj), agent._stamp(os.stat(obj)))
    assert _stamped(obj)
    st = os.stat(obj)
    with open(obj, "r+b") as fh:  # a write with the mtime put back: the ctime still moved
        fh.write(b"changed")
    os.utime(obj, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert not _stamped(obj)
