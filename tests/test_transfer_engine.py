"""The transfer engine on the real loopback sshd: many files over one stream both ways, a large
file over parallel streams, resumes after a cut of either, the warm checkpoint loader, the hash
record, and the far link the benchmark measures through."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.pull.ahead import LIMIT
from rgt_jupyter.run.pull.loader import Loader, load_checkpoints, shared_loader
from rgt_jupyter.run.pull.transfer import RANGED_MIN, SPLIT_MIN, parallel_streams
from rgt_jupyter.store.hashcache import HashCache
from rgt_jupyter.transport.ssh import SSHTransport, connect

from .conftest import rgt, wait_for
from .farlink import FarLink
from .pulljobs import LARGE, MANY
from .sshbox import close_connections
from .sshd import Sshd
from .test_push_store import _refills_done


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): _sha(p) for p in root.rglob("*") if p.is_file()}


def _run_job(project: Path, program: str, name: str, host: str = "testbox") -> Job:
    job = submit(LaunchRequest(program, name=name, profile="box", host=host), project)
    assert job.wait(180) == "finished", job.log()
    return job


@contextmanager
def _counted() -> Iterator[Counter[str]]:
    """How many of each transport call a block made (the engine's shape, not its speed)."""
    calls: Counter[str] = Counter()
    names = ("exec", "exec_stream", "warm_stream", "put", "open_read", "read_bytes")
    saved = {n: getattr(SSHTransport, n) for n in names}

    def wrap(name: str, orig: Any) -> Any:
        def inner(self: Any, *a: Any, **k: Any) -> Any:
            calls[name] += 1
            return orig(self, *a, **k)

        return inner

    for name, orig in saved.items():
        setattr(SSHTransport, name, wrap(name, orig))
    try:
        yield calls
    finally:
        for name, orig in saved.items():
            setattr(SSHTransport, name, orig)


def _via(job: Job, alias: str) -> Job:
    """The same job reached through another alias of the same server (a proxy in front)."""
    via = Job(job._row, job.project)
    via.spec = dataclasses.replace(job.spec, host_alias=alias)
    return via


def test_many_small_files_come_over_one_stream_verified(project: Path, box: Path) -> None:
    job = _run_job(project, MANY.format(count=9000, size=300), "many")
    close_connections(project)
    manifest = Path(job.spec.control_dir) / "manifest.json"
    assert manifest.stat().st_size > LIMIT  # an end manifest longer than a record may be
    with _counted() as calls:
        run = job.pull()
    assert run.verified, run.text()
    assert _tree(run.outputs) == _tree(Path(job.spec.out_dir))
    assert len(_tree(run.outputs)) == 9000
    # One stream for every file, one command for the records, the manifest and the listing; no
    # file alone, nothing read piecemeal (a round trip a piece on a far link).
    assert calls["exec_stream"] == 1 and calls["open_read"] == 0, calls
    assert calls["exec"] <= 1 and calls["read_bytes"] == 0, calls
    assert not list(run.path.rglob("*.part"))


def test_a_push_of_many_files_goes_over_one_stream(
    project: Path, box: Path, tmp_path: Path
) -> None:
    tree = tmp_path / "data set"
    rng = random.Random(3)
    for i in range(600):
        sub = tree / f"class {i % 9}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"img-{i:04d}.raw").write_bytes(rng.randbytes(2000 + i))
    program = (
        "import hashlib, json, os, pathlib\n"
        "root = pathlib.Path('data set')\n"
        "got = {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()\n"
        "       for p in root.rglob('*') if p.is_file()}\n"
        "json.dump(got, open(os.path.join(os.environ['RGT_OUT'], 'seen.json'), 'w'))\n"
    )
    warm = _run_job(project, "print('warm')\n", "warm")  # the host audited: launches are short
    assert warm
    close_connections(project)
    with _counted() as calls:
        job = submit(
            LaunchRequest(program, name="push", profile="box", host="testbox", push=[str(tree)]),
            project,
        )
    # One stream for the 600 files, started while the store was asked what it holds; the one
    # file put alone is the agent that receives them.
    assert calls["put"] <= 1 and calls["exec_stream"] == 1 and calls["warm_stream"] == 1, calls
    assert job.wait(120) == "finished", job.log()
    seen = json.loads((Path(job.spec.out_dir) / "seen.json").read_text())
    assert seen == _tree(tree)
    # Again, the tree unchanged: nothing travels, nothing here is read again, and no stream is
    # even started (the store held every object last time).
    with _counted() as calls:
        again = submit(
            LaunchRequest(program, name="push2", profile="box", host="testbox", push=[str(tree)]),
            project,
        )
    assert calls["exec_stream"] == 0 and calls["warm_stream"] == 0, calls
    assert calls["put"] <= 1, calls
    assert again.wait(120) == "finished", again.log()
    # The store lost its objects (a machine rebuilt under the same name): the hint is wrong,
    # and the push asks, then sends everything, as a first push does.
    objects = Path(job.spec.control_dir).parent / ".objects"
    wait_for(lambda: _refills_done(objects), 120, "the store's spares")  # none made mid-removal
    shutil.rmtree(objects)
    with _counted() as calls:
        third = submit(
            LaunchRequest(program, name="push3", profile="box", host="testbox", push=[str(tree)]),
            project,
        )
    assert calls["exec_stream"] == 1 and calls["warm_stream"] == 0, calls
    assert third.wait(120) == "finished", third.log()
    assert json.loads((Path(third.spec.out_dir) / "seen.json").read_text()) == _tree(tree)


def test_the_hash_record_never_hides_a_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RGT_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "weights.bin"
    path.write_bytes(b"a" * 5000)
    with HashCache() as cache:
        first = cache.sha256(path)
    with HashCache() as cache:
        assert cache.sha256(path) == first and cache.reused == 1 and cache.hashed == 0
    st = path.stat()
    with open(path, "r+b") as fh:  # same size, and the mtime put back as it was
        fh.write(b"b")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with HashCache() as cache:
        assert cache.sha256(path) == _sha(path) != first and cache.hashed == 1
    moved = tmp_path / "moved.bin"
    path.rename(moved)  # a rename (a run folder landing) keeps what was hashed
    with HashCache() as cache:
        cache.sha256(moved)
        assert cache.reused == 1 or cache.hashed == 1  # ctime may move on a rename: never wrong
        assert cache.sha256(moved) == _sha(moved)


def test_a_gate_still_sees_a_pulled_file_changed_in_place(project: Path, box: Path) -> None:
    job = _run_job(project, MANY.format(count=20, size=100), "gated")
    run = job.pull()
    assert run.verified
    first = rgt("down", job.name, "--json", cwd=project, check=False)
    assert "pulled copy changed" not in first.stdout
    victim = next(p for p in run.outputs.rglob("*.bin"))
    st = victim.stat()
    data = bytearray(victim.read_bytes())
    data[0] ^= 1
    victim.chmod(0o644)
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = rgt("down", job.name, "--json", cwd=project, check=False)
    assert second.returncode == 1, second.stdout + second.stderr
    assert "the pulled copy changed since the pull" in second.stdout


def test_the_warm_loader_limits_each_file_and_goes_on(tmp_path: Path) -> None:
    import torch

    good = []
    for i in range(3):
        path = tmp_path / f"ckpt-{i}.pt"
        torch.save({"step": i, "w": torch.zeros(4)}, path)
        good.append(path)
    stuck = tmp_path / "stuck.pt"
    os.mkfifo(stuck)  # opening it for reading never returns: a load that hangs
    loader = Loader()
    try:
        results = {p.name: loader.check(p, limit=8) for p in [good[0], stuck, *good[1:]]}
    finally:
        loader.close()
    assert results["stuck.pt"]["verdict"] == "failed"
    assert "longer than 8 s" in results["stuck.pt"]["detail"]
    assert all(results[p.name]["verdict"] == "loaded" for p in good), results
    # One loader for every file: the stuck file's own child was killed, the loader went on.
    assert loader.started == 1
    together = load_checkpoints(good)
    assert all(r["verdict"] == "loaded" for r in together.values())
    started = shared_loader().started
    again = load_checkpoints(good[:1])  # a second pull in this process: the same warm loader
    assert again[str(good[0])]["verdict"] == "loaded"
    assert shared_loader().started == started


def test_a_load_that_kills_its_process_fails_alone(tmp_path: Path) -> None:
    """A file whose load takes the loading process down is reported failed, and the files after
    it still load: each file is loaded in a child of its own."""
    import torch

    good = tmp_path / "good.pt"
    torch.save({"w": torch.zeros(2)}, good)
    loader = Loader()
    try:
        loader.warm()
        proc = loader._proc
        assert proc is not None
        # Every child the loader forks for this file is killed as it starts loading.
        victim = tmp_path / "victim.pt"
        os.mkfifo(victim)

        def kill_children() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
                if kids:
                    os.kill(int(kids[0]), signal.SIGKILL)
                    return
                time.sleep(0.05)

        killer = threading.Thread(target=kill_children)
        killer.start()
        crashed = loader.check(victim, limit=300)
        killer.join()
        after = loader.check(good, limit=60)
    finally:
        loader.close()
    assert crashed["verdict"] == "failed" and "SIGKILL" in crashed["detail"], crashed
    assert after["verdict"] == "loaded", after
    assert loader.started == 1


def test_rgt_jobs_reads_ended_jobs_from_the_record(project: Path, box: Path) -> None:
    job = _run_job(project, "print('done')\n", "ended")
    config = Path(os.environ["RGT_SSH_CONFIG"])
    with socket.socket() as sock:  # a port nothing listens on: the host is gone
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config.write_text(config.read_text().replace("Host testbox", f"Host testbox\n  Port {port}", 1))
    close_connections(project)
    listed = rgt("jobs", "--json", cwd=project)
    rows = {r["id"]: r for r in json.loads(listed.stdout)["jobs"]}
    assert rows[job.id]["state"] == "finished" and rows[job.id]["settled"] is True
    assert json.loads(listed.stdout)["not_observed"] == {}  # nobody was asked


def test_a_far_link_delays_and_caps_and_a_pull_through_it_takes_parallel_streams(
    project: Path, box: Path, sshd: Sshd, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        conn, _ = server.accept()
        conn.sendall(b"x" * (4 << 20))
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    with FarLink(port, delay_s=0.05, rate=8e6) as link:
        t0 = time.monotonic()
        sock = socket.create_connection(("127.0.0.1", link.port))
        first = None
        got = 0
        while True:
            data = sock.recv(1 << 20)
            first = first or time.monotonic() - t0
            if not data:
                break
            got += len(data)
        took = time.monotonic() - t0
        sock.close()
    assert got == 4 << 20
    assert first is not None and first >= 0.1  # a round trip before the first byte
    assert took >= (4 << 20) / 8e6  # never faster than the cap
    server.close()

    job = _run_job(project, LARGE.format(mib=RANGED_MIN // (1 << 20) + 1), "far")
    config = Path(os.environ["RGT_SSH_CONFIG"])
    known = box
    with FarLink(sshd.port, delay_s=0.01, rate=None) as far:
        known.write_text(known.read_text() + f"[127.0.0.1]:{far.port} {sshd.host_pub}\n")
        config.write_text(
            config.read_text()
            + f"\nHost farbox\n  HostName 127.0.0.1\n  Port {far.port}\n  User root\n"
            f"  IdentityFile {sshd.user_key}\n  UserKnownHostsFile {known}\n"
        )
        transport = connect("farbox", project)
        assert transport.round_trip() >= 0.02
        assert parallel_streams(transport) > 1
        via = _via(job, "farbox")
        with _counted() as calls:
            run = via.pull()
        assert run.verified, run.text()
        assert calls["exec_stream"] == parallel_streams(transport)
        close_connections(project)


def test_many_files_split_over_parallel_streams_where_the_link_is_far(
    project: Path, box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = SPLIT_MIN // 900_000 + 4  # together past the size where streams are split
    job = _run_job(project, MANY.format(count=count, size=900_000), "spread")
    monkeypatch.setenv("RGT_PULL_STREAMS", "3")  # what a far link's round trip picks
    close_connections(project)
    with _counted() as calls:
        run = job.pull()
    assert run.verified, run.text()
    assert _tree(run.outputs) == _tree(Path(job.spec.out_dir))
    assert calls["exec_stream"] == 3, calls  # three groups of files, one stream each
