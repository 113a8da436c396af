"""Disk faults under a batched pull over SSH, where the stream is read on one thread while
others write and confirm each file (``rgt_jupyter/run/pull/sink.py``): an fsync that fails
with EIO for one part (a large one, written O_DIRECT, and a small one, through the page cache),
and a disk that fills up while the writer is behind the stream. Each with real parts: the
LD_PRELOAD shim, a tmpfs with ``size=``, another writer filling it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.pull.sink import DIRECT_MIN
from rgt_jupyter.store.registry import Registry

from ..sshbox import close_connections
from .evidence import sha256
from .shim import env_with
from .test_disks import Filler, _free, _landed_correctly, _source_files

FILES = """\
import os, random
out = os.environ["RGT_OUT"]
rng = random.Random(17)
for name, size in {files!r}:
    with open(os.path.join(out, name), "wb") as fh:
        fh.write(rng.randbytes(size))
"""


def _job(project: Path, files: list[tuple[str, int]], name: str) -> Job:
    program = FILES.format(files=files)
    job = submit(LaunchRequest(program, name=name, profile="box", host="testbox"), project)
    assert job.wait(120) == "finished", job.log()
    close_connections(project)
    return job


@pytest.mark.parametrize("size", [3 * DIRECT_MIN + 5, DIRECT_MIN // 4 + 3])
def test_a_batched_pull_whose_fsync_fails_discards_that_part_only(
    project: Path, box: Path, faultshim: Path, size: int
) -> None:
    files = [("a.bin", 1 << 20), ("target.bin", size), ("z.bin", 300_000)]
    job = _job(project, files, f"eio-{size}")
    sources = _source_files(job)
    partial = project / "runs" / f".partial-{job.id}"
    proc = subprocess.run(
        [sys.executable, "-m", "rgt_jupyter", "pull", job.id],
        cwd=project,
        env=env_with(faultshim, RGT_FAULT_FSYNC_EIO="target.bin.part"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said
    assert "the disk did not confirm the write of outputs/target.bin" in said, said
    assert "Input/output error" in said and "discarded, never renamed into place" in said
    assert not (partial / "outputs" / "target.bin.part").exists(), "the untrusted part was kept"
    assert not (partial / "outputs" / "target.bin").exists()
    kept = _landed_correctly(partial, sources)
    assert kept.get("outputs/a.bin") == 1 << 20, kept
    assert Registry(project).runs(job.id) == []

    run = job.pull()  # the disk confirms writes again
    assert run.verified, run.text()
    assert run.verification["bytes_sent"] == size  # only the discarded part travels again
    for rel, path in sources.items():
        assert sha256(run.path / rel) == sha256(path), rel


def test_a_disk_filling_up_behind_a_batched_pull_keeps_what_landed_and_resumes(
    project: Path, box: Path, tmpfs: Callable[..., Path]
) -> None:
    files = [(f"f{i}.bin", 4 << 20) for i in range(4)] + [("small.bin", 5000)]
    job = _job(project, files, "fills")
    sources = _source_files(job)
    total = sum(p.stat().st_size for p in sources.values())
    mount = tmpfs("dest", size="32m")
    dest = mount / "runs"
    partial = dest / f".partial-{job.id}"
    filler = Filler(mount, partial, "bytes")
    message = str(filler.pull_against(job, dest))
    assert f"the disk under {dest} filled up during the pull of {job.id}" in message, message
    assert "No space left on device" in message and "resumed by the next pull" in message
    kept = _landed_correctly(partial, sources)
    assert kept, "nothing that landed was kept"
    assert _free(mount)[0] < (1 << 20)
    assert [p.name for p in dest.iterdir()] == [partial.name], "a run dir was claimed"

    filler.remove()
    run = job.pull(to=dest)
    assert run.verified, run.text()
    assert not partial.exists()
    assert run.verification["bytes_sent"] == total - sum(kept.values())  # what landed stays
    for rel, path in sources.items():
        assert sha256(run.path / rel) == sha256(path), rel
    assert os.path.getsize(run.path / "outputs" / "small.bin") == 5000
