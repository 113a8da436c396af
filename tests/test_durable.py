"""One durable write and one sha256 helper on each side, and the travelling copies behave alike.

The package writes through :func:`rgt_jupyter.store.fsutil.atomic_write_bytes` and hashes with
:func:`rgt_jupyter.store.fsutil.sha256_file`. The files that travel to the job's machine cannot
import them (each runs alone), so the agent, the bundle's entry point and the job API keep their
own copies; these tests hold every copy to the same behaviour: the bytes are fsynced under a
temporary name, renamed over the target, and the directory is fsynced after the rename; the file
gets mode 0644 (under umask 022); nothing temporary is left; the hashes are sha256 of the bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rgt_jupyter.remote import agent, bundle_main
from rgt_jupyter.remote import job as job_api
from rgt_jupyter.store import fsutil

PAYLOAD = {"state": "finished", "n": [1, 2, 3]}


def _fsutil(path: Path) -> None:
    fsutil.atomic_write_bytes(path, json.dumps(PAYLOAD).encode())


def _agent(path: Path) -> None:
    agent.write_json_atomic(str(path), PAYLOAD)


def _bundle_main(path: Path) -> None:
    bundle_main.write_json_atomic(str(path), PAYLOAD)


def _job(path: Path) -> None:
    data = json.dumps(PAYLOAD).encode()
    job_api._atomic_write(str(path), lambda fh: fh.write(data))


WRITERS: dict[str, Callable[[Path], None]] = {
    "store.fsutil.atomic_write_bytes": _fsutil,
    "remote.agent.write_json_atomic": _agent,
    "remote.bundle_main.write_json_atomic": _bundle_main,
    "remote.job._atomic_write": _job,
}


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize("name", WRITERS)
def test_every_durable_write_fsyncs_the_file_then_renames_then_fsyncs_the_directory(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: None
) -> None:
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}")
        events.append(("fsync-dir" if os.path.isdir(target) else "fsync-file", target))
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append(("replace", os.fspath(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    target = tmp_path / "records" / "exit.json"
    target.parent.mkdir()
    target.write_text("old")
    WRITERS[name](target)
    kinds = [kind for kind, _ in events]
    assert kinds == ["fsync-file", "replace", "fsync-dir"], events
    assert events[0][1] != str(target)  # the bytes were made durable under another name
    assert events[1][1] == str(target) and events[2][1] == str(target.parent)
    assert json.loads(target.read_text()) == PAYLOAD
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in target.parent.iterdir()) == ["exit.json"]


@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, 1 << 20, (3 << 20) + 7])
def test_every_sha256_helper_gives_the_sha256_of_the_bytes(tmp_path: Path, size: int) -> None:
    path = tmp_path / "blob"
    data = os.urandom(size)
    path.write_bytes(data)
    want = hashlib.sha256(data).hexdigest()
    assert fsutil.sha256_file(path) == (want, size)
    assert agent.sha256_file(str(path)) == (want, size)
    assert job_api._sha256_file(str(path)) == want
