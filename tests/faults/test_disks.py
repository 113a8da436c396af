"""Disks that refuse the work: too small for a pull (bytes, inodes), filling up during one, full
where the job saves its checkpoints, fsync failing with EIO, and listings that claim more than
any disk holds.

Every limit is a real one: a tmpfs mounted with ``size=`` / ``nr_inodes=`` under the test's tmp
dir (unmounted in every case), another writer filling it while a pull runs, and the LD_PRELOAD
shim making fsync return EIO for chosen paths after the data was written.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.errors import PullError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.pull import MAX_LISTING_BYTES, MAX_LISTING_FILES
from rgt_jupyter.run.teardown import compute_gate
from rgt_jupyter.store.registry import Registry

from ..machines import POD
from .evidence import Evidence, sha256
from .shim import env_with

# Outputs of N files of SIZE random bytes under outputs/SUB, a checkpoint of CKPT float32s.
FILES_JOB = """\
import os
import torch
import rgt_jupyter.job as job
out = os.path.join(os.environ["RGT_OUT"], {sub!r})
os.makedirs(out, exist_ok=True)
for i in range({n}):
    with open(os.path.join(out, "f%03d.bin" % i), "wb") as fh:
        fh.write(os.urandom({size}))
job.save_checkpoint({{"w": torch.randn({ckpt})}}, step=1)
job.save_results({{"files": {n}}})
"""

# Saves checkpoint 1, waits for the test to take it as evidence, then tries checkpoint 2 (the
# fault strikes there); whatever save_checkpoint raises is reported with what load_latest gives
# afterwards, and raised again, so the job fails with it.
CKPT_JOB = """\
import json, os, time
import torch
import rgt_jupyter.job as job
first = torch.arange(4096, dtype=torch.float32)
job.save_checkpoint({{"w": first}}, step=1, keep=1)
go = os.path.join(os.environ["RGT_OUT"], "..", "go")
while not os.path.exists(go):
    time.sleep(0.02)
{before_second}
try:
    job.save_checkpoint({{"w": torch.ones({second_floats})}}, step=2, keep=1)
except OSError as exc:
    state = job.load_latest()
    report = {{
        "errno": exc.errno,
        "type": type(exc).__name__,
        "latest_step": None if state is None else int(state["step"]),
        "latest_is_first": state is not None and bool(torch.equal(state["w"], first)),
    }}
    with open(os.path.join(os.environ["RGT_OUT"], "after.json"), "w") as fh:
        json.dump(report, fh)
    raise
job.save_results({{"second": "saved"}})
"""


# -- helpers ----------------------------------------------------------------------------------


def _pod(project: Path) -> None:
    folder = project / ".rgt" / "profiles"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pod.toml").write_text(POD)


def _finished(project: Path, program: str, name: str, profile: str = "local", **kw: Any) -> Job:
    if profile == "pod":
        _pod(project)
    req = LaunchRequest(program=program, name=name, profile=profile, smoke=False, **kw)
    job = submit(req, project)
    assert job.wait(120) == "finished", job.log()
    return job


def _pulled_to(
    project: Path, evidence: Evidence, program: str, name: str, mount: Path
) -> tuple[Job, dict[str, Path], Path]:
    """A finished pod job of ``program``, a sentinel beside the pull's destination on ``mount``
    and the job's files kept as evidence: the job, its files as listed, the destination."""
    job = _finished(project, program, name, profile="pod")
    sentinel = mount / "sentinel"
    sentinel.write_bytes(b"beside the destination, untouched\n")
    evidence.keep(*_remote(job), sentinel)
    return job, _source_files(job), mount / "runs"


def _remote(job: Job) -> tuple[Path, Path]:
    return Path(job.spec.out_dir), Path(job.spec.ckpt_dir)


def _source_files(job: Job) -> dict[str, Path]:
    """The job's files as a pull lists them (``outputs/...``, ``checkpoints/...``)."""
    found: dict[str, Path] = {}
    for prefix, root in zip(("outputs", "checkpoints"), _remote(job), strict=True):
        for path in root.rglob("*"):
            if path.is_file() and ".tmp-" not in path.name:
                found[f"{prefix}/{path.relative_to(root).as_posix()}"] = path
    return found


def _free(path: Path) -> tuple[int, int]:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_favail


def _gate_closed(job: Job, project: Path, evidence: Evidence) -> None:
    """The teardown gate of the job's machine refuses: the job has no verified pull."""
    gate = compute_gate(job._row, project)
    assert not evidence.teardown(reachable=gate.passed, gate_should_pass=False), gate.text()
    failing = {c.name: c.detail for c in gate.checks if not c.ok}
    assert "never pulled" in failing.get("every file pulled", ""), gate.text()


def _no_run(job: Job, project: Path) -> None:
    assert Registry(project).runs(job.id) == []
    assert not (project / "runs").exists() or not any((project / "runs").iterdir())


def _landed_correctly(partial: Path, sources: dict[str, Path]) -> dict[str, int]:
    """Every file under its final name in ``partial`` holds the source's bytes (no part was
    renamed into place); returns the bytes kept per listed path (final files and parts)."""
    kept: dict[str, int] = {}
    for path in partial.rglob("*"):
        if not path.is_file():
            continue
        rel = path.relative_to(partial).as_posix()
        if rel.endswith(".part"):
            rel = rel[: -len(".part")]
            assert not (partial / rel).exists(), f"{rel} is both a part and a landed file"
        else:
            assert sha256(path) == sha256(sources[rel]), f"{rel} landed with other bytes"
        kept[rel] = path.stat().st_size
    return kept


# -- F6: the local disk ----------------------------------------------------------------------


@pytest.mark.fault(
    "F6-disk-upfront",
    asserts="a pull to a tmpfs too small for the listing (bytes, inodes) is refused before any "
    "write with what it needs and what is free; no run, no partial folder, the gate stays closed",
    mutation=[
        ("rgt_jupyter/run/pull/__init__.py", "    if nbytes + margin > free:", "    if False:"),
        (
            "rgt_jupyter/run/pull/__init__.py",
            "    if st.f_files and nfiles + 16 > st.f_favail:",
            "    if False:",
        ),
    ],
)
@pytest.mark.parametrize("limit", ["bytes", "inodes"])
def test_pull_to_a_disk_too_small_is_refused_up_front(
    project: Path, tmpfs: Callable[..., Path], evidence: Evidence, limit: str
) -> None:
    """The destination is a real tmpfs: 4 MiB for 6 MiB of files, or 24 inodes for 40 files.

    Protection: rgt_jupyter/run/pull/__init__.py: ``check_space``: ``if nbytes + margin > free`` and ``if
    st.f_files and nfiles + 16 > st.f_favail``, called before the partial folder is made;
    removed, the pull starts, runs out of room midway and leaves a partial folder behind.
    """
    if limit == "bytes":
        program = FILES_JOB.format(sub="big", n=3, size=2 << 20, ckpt=256)
        mount = tmpfs("dest", size="4m")
    else:
        program = FILES_JOB.format(sub="many", n=40, size=64, ckpt=256)
        mount = tmpfs("dest", size="64m", inodes=24)
    job, sources, dest = _pulled_to(project, evidence, program, f"up-{limit}", mount)
    need_bytes = sum(p.stat().st_size for p in sources.values())
    free_bytes, free_inodes = _free(mount)

    with pytest.raises(PullError) as err:
        job.pull(to=dest)

    message = str(err.value)
    if limit == "bytes":
        assert f"not enough space in {dest}" in message, message
        assert f"needs {need_bytes} bytes, {free_bytes} are free" in message, message
    else:
        assert f"not enough inodes in {dest}" in message, message
        assert f"needs {len(sources) + 16} inodes ({len(sources)} files" in message, message
        assert f"{free_inodes} are free" in message, message
    assert "--to DIR" in message
    assert sorted(os.listdir(mount)) == ["sentinel"], "the refused pull wrote something"
    _no_run(job, project)
    _gate_closed(job, project, evidence)
    assert evidence.account(*_remote(job), mount) == 0


class Filler(threading.Thread):
    """Another writer: once the pull's first ``.part`` appears under ``partial``, it fills the
    file system (bytes: one growing file; inodes: empty files) until ENOSPC."""

    def __init__(self, mount: Path, partial: Path, limit: str) -> None:
        super().__init__(daemon=True)
        self.mount, self.partial, self.limit = mount, partial, limit
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.filled = 0

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 60
            while not (self.partial.is_dir() and any(self.partial.rglob("*.part"))):
                if time.monotonic() > deadline:
                    raise AssertionError("the pull never started a .part")
                time.sleep(0.001)
            if self.limit == "bytes":
                self._fill_bytes()
            else:
                self._fill_inodes()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self.done.set()

    def _fill_bytes(self) -> None:
        fd = os.open(self.mount / "filler.bin", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for chunk in (b"\0" * (1 << 20), b"\0" * 4096):
                while True:
                    try:
                        self.filled += os.write(fd, chunk)
                    except OSError as exc:
                        assert exc.errno == errno.ENOSPC, exc
                        break
        finally:
            os.close(fd)

    def _fill_inodes(self) -> None:
        folder = self.mount / "filler"
        folder.mkdir()
        while True:
            try:
                (folder / f"f{self.filled:06d}").touch()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return
            self.filled += 1

    def pull_against(self, job: Job, dest: Path) -> PullError:
        """Pull ``job`` to ``dest`` while this filler runs (the pull waits at its first progress
        report until the disk is full); the PullError it ends with."""
        self.start()

        def hold(done: int, of: int, rel: str) -> None:
            assert self.done.wait(60), "the filler never finished"

        with pytest.raises(PullError) as err:
            job.pull(to=dest, on_progress=hold)
        self.join(10)
        assert self.error is None, self.error
        assert self.filled > 0
        return err.value

    def remove(self) -> None:
        if self.limit == "bytes":
            (self.mount / "filler.bin").unlink()
        else:
            shutil.rmtree(self.mount / "filler")


@pytest.mark.fault(
    "F6-disk-midway",
    asserts="a disk (bytes or inodes) filled by another writer during a pull ends it with a "
    "PullError saying what is still needed and free now; no part renamed, no run, gate closed; "
    "after the filler goes, the next pull resumes what landed and verifies",
    mutation=(
        "rgt_jupyter/run/pull/__init__.py",
        "        raise _disk_filled(spec.job_id, root, files, exc) from exc",
        "        raise",
    ),
)
@pytest.mark.parametrize("limit", ["bytes", "inodes"])
def test_disk_filling_up_during_a_pull(
    project: Path, tmpfs: Callable[..., Path], evidence: Evidence, limit: str
) -> None:
    """The listing fits when the pull starts; a filler takes the rest once the first part
    appears (the pull waits at its first progress report until the filler is done).

    Protection: rgt_jupyter/run/pull/__init__.py: ``pull``: an OSError with ENOSPC/EDQUOT from ``_land`` is
    raised as ``_disk_filled(...)`` (what is needed, what is free, what is kept); removed, the
    user gets a bare ``[Errno 28]`` from deep inside the transfer.
    """
    if limit == "bytes":  # a 6 MB checkpoint lands partly before the disk is full
        program = FILES_JOB.format(sub="big", n=3, size=4 << 20, ckpt=1_500_000)
        mount = tmpfs("dest", size="32m")
    else:
        program = FILES_JOB.format(sub="many", n=40, size=64, ckpt=256)
        mount = tmpfs("dest", size="64m", inodes=100)
    job, sources, dest = _pulled_to(project, evidence, program, f"mid-{limit}", mount)
    total = sum(p.stat().st_size for p in sources.values())
    partial = dest / f".partial-{job.id}"
    filler = Filler(mount, partial, limit)
    message = str(filler.pull_against(job, dest))
    kept = _landed_correctly(partial, sources)
    still_bytes = total - sum(kept.get(rel, 0) for rel in sources)
    still_files = sum(1 for rel in sources if rel not in kept)
    free_bytes, free_inodes = _free(mount)
    assert f"the disk under {dest} filled up during the pull of {job.id}" in message, message
    assert "No space left on device" in message
    assert (
        f"still needs {still_bytes} bytes and {still_files} inodes (files) there, and "
        f"{free_bytes} bytes and {free_inodes} inodes are free now"
    ) in message, message
    assert f"kept in {partial}" in message and "resumed by the next pull" in message
    assert "Free some space" in message and "--to DIR" in message
    if limit == "bytes":
        assert free_bytes < (1 << 20) and kept, (free_bytes, kept)
    else:
        assert free_inodes == 0 and kept, (free_inodes, kept)
    assert [p.name for p in dest.iterdir()] == [partial.name], "a run dir was claimed"
    _no_run(job, project)
    _gate_closed(job, project, evidence)

    filler.remove()
    run = job.pull(to=dest)
    assert run.verified, run.text()
    assert run.path == dest / f"{job.id}-r1" and not partial.exists()
    assert run.verification["bytes_sent"] == total - sum(kept.values())  # what landed was reused
    assert {f["path"] for f in run.manifest["files"]} >= set(sources)
    gate = compute_gate(job._row, project)
    evidence.teardown(reachable=gate.passed, gate_should_pass=True)
    assert gate.passed, gate.text()
    assert evidence.account(run.path, *_remote(job), mount) == 0
    assert evidence.account(run.path, mount / "sentinel") == 0  # the run alone holds every file too


# -- F7: the job's disk ----------------------------------------------------------------------


def _ckpt_job_until_go(
    project: Path, name: str, evidence: Evidence, before_second: str = "", **kw: Any
) -> Job:
    """Launch CKPT_JOB, keep checkpoint 1 (and its record) as evidence, let the job go on."""
    program = CKPT_JOB.format(before_second=before_second, second_floats=4 << 20)
    job = submit(LaunchRequest(program=program, name=name, smoke=False, **kw), project)
    out, ckpt = _remote(job)
    first = ckpt / "ckpt-0000000001.pt"
    deadline = time.monotonic() + 90
    while not first.exists():  # renamed into place once it and its record are durable
        assert not job.done(), f"the job ended before checkpoint 1:\n{job.log()}"
        assert time.monotonic() < deadline, "checkpoint 1 never appeared"
        time.sleep(0.05)
    evidence.keep(first, ckpt / "ckpt-0000000001.pt.sha256")
    (out.parent / "go").write_text("")
    assert job.wait(120) == "failed", job.log()
    return job


def _after_the_fault(job: Job, evidence: Evidence, errno_name: str) -> list[str]:
    """What every failed checkpoint write must leave: checkpoint 1 the latest and intact, no
    temporary, and a pull that loads checkpoint 1 and nothing else. Returns the job's
    traceback."""
    out, ckpt = _remote(job)
    after = json.loads((out / "after.json").read_text())
    assert after["type"] == "CheckpointNotSaved", after
    assert after["errno"] == getattr(errno, errno_name), after
    assert after["latest_step"] == 1 and after["latest_is_first"], after
    names = sorted(os.listdir(ckpt))
    assert names == ["ckpt-0000000001.pt", "ckpt-0000000001.pt.sha256"], names
    record = (ckpt / "ckpt-0000000001.pt.sha256").read_text().split()[0]
    assert record == sha256(ckpt / "ckpt-0000000001.pt")
    tb = job.traceback()
    assert tb is not None, job.log()

    run = job.pull()
    loads = {r["path"]: r["ok"] for r in run.verification["checkpoint_loads"]}
    assert loads == {"checkpoints/ckpt-0000000001.pt": True}, loads
    assert run.verified, run.text()
    bad = {f"checkpoints/{n}" for n in names if not n.startswith("ckpt-0000000001.pt")}
    assert evidence.trusted(run.path, bad) == 0
    assert evidence.account(run.path, ckpt) == 0
    return tb


@pytest.mark.fault(
    "F7-remote-disk-full",
    asserts="save_checkpoint on a full tmpfs raises an error that says the disk is full, leaves "
    "no temporary, keeps checkpoint 1 the latest (load_latest, a pull that loads it only)",
    mutation=[
        (
            "rgt_jupyter/remote/job.py",
            "        if os.path.exists(tmp):\n            os.unlink(tmp)\n        raise",
            "        raise",
        ),
        (
            "rgt_jupyter/remote/job.py",
            "        raise _not_saved(name, int(step), directory, cause, free) from exc",
            "        raise",
        ),
    ],
)
def test_checkpoint_that_does_not_fit_on_the_job_disk(
    project: Path, tmpfs: Callable[..., Path], evidence: Evidence
) -> None:
    """The checkpoint root is a 4 MiB tmpfs; checkpoint 1 is 16 KB, checkpoint 2 is 16 MiB.

    Protection: rgt_jupyter/remote/job.py: ``_atomic_write`` removes its temporary on any failure,
    and ``save_checkpoint`` raises ``_not_saved(...)`` (the disk's errno found behind torch's
    "unexpected pos" RuntimeError); without the first the torn temporary keeps the disk full,
    without the second the job dies with "unexpected pos N vs M".
    """
    disk = tmpfs("ckptdisk", size="4m")
    job = _ckpt_job_until_go(project, "full", evidence, ckpt_dir=str(disk))
    assert Path(job.spec.ckpt_dir).is_relative_to(disk)
    tb = _after_the_fault(job, evidence, "ENOSPC")
    text = "\n".join(tb)
    assert "CheckpointNotSaved" in text and "No space left on device" in text, text
    assert f"the disk holding {job.spec.ckpt_dir} is full" in text, text
    assert "ckpt-0000000001.pt is still the latest checkpoint" in text, text
    assert "--ckpt-dir" in text
    used = shutil.disk_usage(disk).used
    assert used < (1 << 20), f"{used} bytes still taken on the checkpoint disk"


# -- F9: fsync failing with EIO --------------------------------------------------------------


def _pull_in_subprocess(
    project: Path, job: Job, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rgt_jupyter", "pull", job.id],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.fault(
    "F9-fsync-eio",
    asserts="a pull whose fsync (or background fdatasync) of one part fails with EIO says the "
    "disk did not confirm it, discards that part, records nothing; the next pull re-sends it "
    "whole and verifies",
    mutation=[
        (
            "rgt_jupyter/run/pull/transfer.py",
            "            part.unlink(missing_ok=True)  # never renamed, never resumed",
            "            pass  #",
        ),
        ("rgt_jupyter/store/fsutil.py", "            raise self._error", "            pass"),
    ],
)
@pytest.mark.parametrize("where", ["fsync", "sync-behind"])
def test_pull_whose_fsync_fails_discards_the_part(
    project: Path, faultshim: Path, evidence: Evidence, where: str
) -> None:
    """The pull runs as ``rgt pull`` with the shim preloaded: fsync and fdatasync of the part of
    outputs/target.bin return EIO. A 2 MiB target meets it at the final fsync; a 96 MiB one
    first in the background flush that runs every 64 MiB.

    Protection: rgt_jupyter/run/pull/transfer.py: ``_fetch``: ``except UnconfirmedWrite: part.unlink(...)``,
    and rgt_jupyter/store/fsutil.py: ``SyncBehind.close`` raises what a background flush hit;
    without the first the untrusted part stays to be resumed from, without the second the
    background EIO is lost (a real disk reports it once, so the final fsync passes).
    """
    size = (2 << 20) if where == "fsync" else (96 << 20)
    program = (
        "import os\nimport rgt_jupyter.job as job\n"
        "out = os.environ['RGT_OUT']\n"
        "open(os.path.join(out, 'a.bin'), 'wb').write(os.urandom(1 << 20))\n"
        f"open(os.path.join(out, 'target.bin'), 'wb').write(os.urandom({size}))\n"
        "open(os.path.join(out, 'z.bin'), 'wb').write(os.urandom(1 << 20))\n"
        "job.save_checkpoint({'step': 1}, step=1)\n"
        "job.save_results({'ok': 1})\n"
    )
    job = _finished(project, program, f"eio-{where}")
    evidence.keep(*_remote(job))
    sources = _source_files(job)
    partial = project / "runs" / f".partial-{job.id}"

    proc = _pull_in_subprocess(
        project, job, env_with(faultshim, RGT_FAULT_FSYNC_EIO="target.bin.part")
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said
    assert "the disk did not confirm the write of outputs/target.bin" in said, said
    assert "Input/output error" in said and "discarded, never renamed into place" in said
    detail = "on fdatasync while it was being written" if where == "sync-behind" else "on fsync)"
    assert detail in said, said
    assert not (partial / "outputs" / "target.bin.part").exists(), "the untrusted part was kept"
    assert not (partial / "outputs" / "target.bin").exists()
    kept = _landed_correctly(partial, sources)
    assert "outputs/a.bin" in kept and "outputs/z.bin" not in kept, kept
    assert [p.name for p in (project / "runs").iterdir()] == [partial.name]
    assert Registry(project).runs(job.id) == []

    run = job.pull()  # the disk confirms writes again
    assert run.verified, run.text()
    total = sum(p.stat().st_size for p in sources.values())
    assert run.verification["bytes_sent"] == total - sum(kept.values())  # target sent whole
    assert evidence.account(run.path, *_remote(job)) == 0


@pytest.mark.fault(
    "F9-fsync-eio",
    asserts="a job whose save_checkpoint fsync fails with EIO gets an error saying the disk did "
    "not confirm the write; checkpoint 2 is never renamed into place, checkpoint 1 stays latest",
    mutation=(
        "rgt_jupyter/remote/job.py",
        "            fh.flush()\n            os.fsync(fh.fileno())\n        if before_commit",
        "            fh.flush()\n            try:\n                os.fsync(fh.fileno())\n"
        "            except OSError:\n                pass\n        if before_commit",
    ),
)
def test_checkpoint_whose_fsync_fails_is_not_committed(
    project: Path, faultshim: Path, evidence: Evidence
) -> None:
    """The job runs with the shim preloaded, passed like any variable of the job's environment
    (``LaunchRequest.env``, what ``--env`` sets). The fault's trigger, RGT_FAULT_FSYNC_EIO, is
    set by the job itself just before checkpoint 2: ``--env`` refuses the RGT_ prefix, and set
    there, the fault strikes that write only.

    Protection: rgt_jupyter/remote/job.py: ``_atomic_write``: ``os.fsync(fh.fileno())`` raises before
    ``os.replace``; swallowed, the unconfirmed checkpoint 2 gets its name and load_latest
    returns it.
    """
    before = "os.environ['RGT_FAULT_FSYNC_EIO'] = 'ckpt-0000000002'"
    job = _ckpt_job_until_go(
        project, "eio", evidence, before_second=before, env={"LD_PRELOAD": str(faultshim)}
    )
    tb = _after_the_fault(job, evidence, "EIO")
    text = "\n".join(tb)
    assert "CheckpointNotSaved" in text and "did not confirm the write" in text, text
    assert "Input/output error" in text and "ckpt-0000000001.pt is still the latest" in text


# -- B: listings that claim more than a disk holds --------------------------------------------

# Agents that lie about the job's files, put in place of the job's own agent.py (they answer
# nothing but `manifest`). The long ones stream their listing, so they stay small and quick.
LIARS = {
    "10TB": """
import json, sys
if sys.argv[1] == "manifest":
    huge = {"size": 10 * 2**40, "sha256": "b" * 64}
    print(json.dumps({"files": {"outputs/huge.bin": huge}, "refused": []}))
""",
    "1e6-entries": """
import sys
if sys.argv[1] == "manifest":
    entry = '"outputs/f%07d": {"size": 3, "sha256": "' + "a" * 64 + '"}'
    sys.stdout.write('{"files": {')
    for start in range(0, 1000000, 50000):
        batch = ",".join(entry % i for i in range(start, start + 50000))
        sys.stdout.write(("," if start else "") + batch)
    sys.stdout.write('}, "refused": []}')
""",
    "160MiB": """
import sys
if sys.argv[1] == "manifest":  # one entry, then 160 MiB of blanks: still valid JSON
    sys.stdout.write('{"files": {"outputs/a": {"size": 3, "sha256": "' + "a" * 64 + '"}},')
    for _ in range(160):
        sys.stdout.write(" " * (1 << 20))
    sys.stdout.write('"refused": []}')
""",
}


# `rgt pull JOB`, then the peak resident memory of it and of what it started (the lying agent
# streams its listing, so its own share is small).
MEASURED_PULL = """\
import resource, subprocess, sys
rc = subprocess.call([sys.executable, "-m", "rgt_jupyter", "pull", sys.argv[1]])
sys.stderr.write("\\npeak-kib %d\\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)
"""


@pytest.mark.fault(
    "B-manifest-size",
    asserts="a listing claiming 10 TB is refused by the space check, one of 1e6 entries by the "
    "entry limit, one of 160 MiB unread, each before any write, in bounded time and memory",
    mutation=[
        ("rgt_jupyter/run/pull/__init__.py", "    if nbytes + margin > free:", "    if False:"),
        (
            "rgt_jupyter/run/pull/__init__.py",
            "    if len(files) > MAX_LISTING_FILES:",
            "    if False:",
        ),
        (
            "rgt_jupyter/run/pull/__init__.py",
            "    if len(stdout) > MAX_LISTING_BYTES:",
            "    if False:",
        ),
    ],
)
@pytest.mark.parametrize("claim", ["10TB", "1e6-entries", "160MiB"])
def test_listing_that_claims_too_much_is_refused(
    project: Path, evidence: Evidence, claim: str
) -> None:
    """The job's agent is replaced by one that lies; ``rgt pull`` runs in a process of its own
    so its time and peak memory are its own.

    Protection: rgt_jupyter/run/pull/__init__.py: ``check_space``: ``if nbytes + margin > free``,
    ``validate_listing``: ``if len(files) > MAX_LISTING_FILES`` and ``remote_listing``: ``if
    len(result.stdout) > MAX_LISTING_BYTES``; without them the pull starts landing (or failing
    to find) files it cannot hold, or walks a million entries for minutes.
    """
    job = _finished(project, "import rgt_jupyter.job as job\njob.save_results({'a': 1})\n", "big")
    sentinel = project / "sentinel"
    sentinel.write_text("untouched")
    evidence.keep(*_remote(job), sentinel)
    control = Path(job.spec.control_dir)
    (control / "agent.py").write_text(LIARS[claim])

    proc = subprocess.Popen(
        [sys.executable, "-c", MEASURED_PULL, job.id],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"the pull was still running after 240 s on a {claim} listing")
    peak_mib = int(err.rsplit("peak-kib ", 1)[1]) / 1024
    said = out + err
    assert proc.returncode == 2, said
    if claim == "10TB":
        assert "not enough space in" in said and "needs 10995116277760 bytes" in said, said
    elif claim == "1e6-entries":
        assert f"names 1000000 files, more than the {MAX_LISTING_FILES}" in said, said
        assert "nothing was written" in said and "Archive them into fewer files" in said
    else:
        assert f"bytes, more than the {MAX_LISTING_BYTES} a pull reads" in said, said
        assert "nothing was written" in said and "Archive the job's files" in said
    assert peak_mib < 1536, f"the pull took {peak_mib:.0f} MiB for a {claim} listing"
    assert sentinel.read_text() == "untouched"
    assert not (project / "runs").exists()
    assert Registry(project).runs(job.id) == []
    assert evidence.account(*_remote(job), sentinel) == 0
