"""How the transfer engine writes and opens its streams, on the real loopback sshd: a batched
pull lands files of every size around the block and buffer edges, the large ones written past
the page cache; a push of odd-sized objects lands whole and each later job gets files of its
own; the stream that carries a pull or a push starts while the look runs, through no separate
connection to probe the client, and one never taken is stopped."""

from __future__ import annotations

import ctypes
import hashlib
import json
import mmap
import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.errors import PullError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.pull.sink import ALIGN, CHUNK, DIRECT_MIN
from rgt_jupyter.transport.ssh import SSHTransport, connect, stream

from .sshbox import close_connections

#: Sizes around every edge the writer has: empty, the block, the O_DIRECT threshold, the buffer.
SIZES = [
    0,
    1,
    ALIGN - 1,
    ALIGN,
    ALIGN + 1,
    DIRECT_MIN - 1,
    DIRECT_MIN,
    DIRECT_MIN + 1,
    CHUNK - 1,
    CHUNK,
    CHUNK + ALIGN + 3,
    3 * CHUNK + 1,
]
EDGES = """\
import os, random
out = os.environ["RGT_OUT"]
rng = random.Random(11)
for i, size in enumerate({sizes!r}):
    with open(os.path.join(out, "edge-%02d.bin" % i), "wb") as fh:
        fh.write(rng.randbytes(size))
"""
SEEN = (
    "import hashlib, json, os, pathlib\n"
    "root = pathlib.Path('inputs')\n"
    "got = {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()\n"
    "       for p in root.rglob('*') if p.is_file()}\n"
    "json.dump(got, open(os.path.join(os.environ['RGT_OUT'], 'seen.json'), 'w'))\n"
)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(project: Path, program: str, name: str, **kw: Any) -> Job:
    job = submit(LaunchRequest(program, name=name, profile="box", host="testbox", **kw), project)
    assert job.wait(180) == "finished", job.log()
    return job


def _resident(path: Path) -> tuple[int, int]:
    """(pages of ``path`` in the page cache, pages of the file), by ``mincore``."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = path.stat().st_size
    page = os.sysconf("SC_PAGE_SIZE")
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        vec = ctypes.create_string_buffer((size + page - 1) // page)
        try:
            assert libc.mincore(addr, size, vec) == 0, ctypes.get_errno()
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)
    return sum(b & 1 for b in vec.raw), len(vec.raw)


@contextmanager
def _ssh_processes() -> Iterator[list[float]]:
    """When each OpenSSH client process of the block was started (monotonic seconds)."""
    started: list[float] = []
    original = stream.OpenSSHStream.__init__

    def counted(self: Any, *a: Any, **k: Any) -> None:
        started.append(time.monotonic())
        original(self, *a, **k)

    stream.OpenSSHStream.__init__ = counted  # type: ignore[method-assign]
    try:
        yield started
    finally:
        stream.OpenSSHStream.__init__ = original  # type: ignore[method-assign]


def _ssh_children() -> list[int]:
    """This process's child ``ssh`` processes still alive."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (entry / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if int(fields[1]) == me and os.path.basename(cmd) == b"ssh" and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def test_a_batched_pull_lands_every_size_and_writes_large_files_past_the_page_cache(
    project: Path, box: Path, tmp_path: Path
) -> None:
    job = _run(project, EDGES.format(sizes=SIZES), "edges")
    close_connections(project)
    run = job.pull()
    assert run.verified, run.text()
    # The large files went straight to the disk: at most their unaligned tail is cached (looked
    # at before anything here reads them). A file written the usual way stays cached whole, so
    # the measure itself can tell.
    for i, size in enumerate(SIZES):
        if size >= DIRECT_MIN:
            cached, pages = _resident(run.outputs / f"edge-{i:02d}.bin")
            assert cached <= 1, (size, cached, pages)
    source = Path(job.spec.out_dir)
    for i, size in enumerate(SIZES):
        landed = run.outputs / f"edge-{i:02d}.bin"
        assert landed.stat().st_size == size, (i, size)
        assert _sha(landed) == _sha(source / landed.name), (i, size)
    assert not list(run.path.rglob("*.part"))
    control = tmp_path / "buffered.bin"
    control.write_bytes(os.urandom(3 * CHUNK))
    cached, pages = _resident(control)
    assert cached >= pages - 1, (cached, pages)


def test_a_push_of_odd_sized_objects_lands_whole_and_each_later_job_gets_its_own_copies(
    project: Path, box: Path, tmp_path: Path
) -> None:
    tree = tmp_path / "inputs"
    rng = random.Random(5)
    for i, size in enumerate(SIZES + [DIRECT_MIN * 3 + 7] * 4):
        sub = tree / f"part {i % 3}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"obj-{i:02d}.bin").write_bytes(rng.randbytes(size))
    want = {p.relative_to(tree).as_posix(): _sha(p) for p in tree.rglob("*") if p.is_file()}
    first = _run(project, SEEN, "push-a", push=[str(tree)])
    assert json.loads((Path(first.spec.out_dir) / "seen.json").read_text()) == want
    second = _run(project, SEEN, "push-b", push=[str(tree)])
    assert json.loads((Path(second.spec.out_dir) / "seen.json").read_text()) == want
    # Each job has files of its own (the store's spare or a copy: tests/test_push_store.py),
    # so a job that writes to its inputs changes only its own.
    code_a = Path(first.spec.control_dir) / "code" / "inputs"
    code_b = Path(second.spec.control_dir) / "code" / "inputs"
    for rel in want:
        a, b = (code_a / rel).stat(), (code_b / rel).stat()
        assert a.st_ino != b.st_ino and a.st_nlink <= 2 and b.st_nlink <= 2, rel
        assert _sha(code_b / rel) == want[rel], rel


def test_a_push_through_a_fresh_connection_opens_one_ssh_process(
    project: Path, box: Path, tmp_path: Path
) -> None:
    tree = tmp_path / "inputs"
    tree.mkdir()
    (tree / "weights.bin").write_bytes(os.urandom(3 * DIRECT_MIN + 5))
    _run(project, "print('warm')\n", "warm")  # the host audited: the launch below only pushes
    close_connections(project)
    with _ssh_processes() as started:
        job = submit(
            LaunchRequest(SEEN, name="one-ssh", profile="box", host="testbox", push=[str(tree)]),
            project,
        )
    assert job.wait(120) == "finished", job.log()
    seen = json.loads((Path(job.spec.out_dir) / "seen.json").read_text())
    assert seen == {"weights.bin": _sha(tree / "weights.bin")}
    assert len(started) == 1, "the ssh client was probed by a connection of its own"
    assert connect("testbox", project).last_stream == "openssh"


def test_a_pull_starts_its_stream_during_the_look_and_stops_one_not_taken(
    project: Path, box: Path
) -> None:
    job = _run(project, EDGES.format(sizes=[DIRECT_MIN + 1, 10]), "early")
    close_connections(project)
    looked: list[float] = []
    original = SSHTransport.exec

    def timed(self: Any, argv: list[str], **kw: Any) -> Any:
        result = original(self, argv, **kw)
        looked.append(time.monotonic())
        return result

    SSHTransport.exec = timed  # type: ignore[method-assign]
    try:
        with _ssh_processes() as started:
            run = job.pull()
    finally:
        SSHTransport.exec = original  # type: ignore[method-assign]
    assert run.verified, run.text()
    assert len(started) == 1 and looked, (started, looked)
    assert started[0] < looked[0], "the stream was started only after the look"

    running = submit(
        LaunchRequest(
            "import time\ntime.sleep(600)\n", name="running", profile="box", host="testbox"
        ),
        project,
    )
    deadline = time.monotonic() + 120
    while running.state != "running":
        assert time.monotonic() < deadline, running.log()
        time.sleep(0.2)
    close_connections(project)
    with _ssh_processes() as started:
        with pytest.raises(PullError, match="wait for it to end"):
            running.pull()
    assert len(started) == 1  # started ahead, and stopped with the refused pull
    deadline = time.monotonic() + 30
    while _ssh_children():
        assert time.monotonic() < deadline, f"ssh processes left behind: {_ssh_children()}"
        time.sleep(0.1)
    running.stop()


@pytest.mark.parametrize("method", ["auto", "paramiko"])
def test_a_stream_whose_command_does_not_say_hello_is_refused(
    project: Path, box: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    monkeypatch.setenv("RGT_SSH_TRANSFER", method)
    close_connections(project)
    transport = connect("testbox", project)
    with pytest.raises(stream.StreamError, match="did not start as it should") as err:
        with transport.exec_stream(["echo", "welcome"], [b"data"], "a push", hello=b"+"):
            pass
    assert "welcome" in str(err.value)
    with transport.exec_stream(
        ["sh", "-c", "printf +; cat"], [b"da", b"ta"], "a push", hello=b"+"
    ) as ok:
        assert ok.read(100) == b"data"
