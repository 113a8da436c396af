"""Cuts inside the bulk streams of a pull, for real (a proxy drops the connection): in the middle
of the one stream that carries many files, and of one of several parallel streams that carry one
large file. Each next pull resumes from what the disk confirmed and ends verified."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.errors import PullError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.pull.ranges import record_path
from rgt_jupyter.run.pull.transfer import RANGED_MIN

from ..pulljobs import LARGE, MANY
from ..sshbox import close_connections, cutbox
from ..sshd import Sshd
from .evidence import Evidence


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _job(project: Path, program: str, name: str) -> Job:
    """A job run through ``cutbox`` (the proxy), finished."""
    job = submit(LaunchRequest(program, name=name, profile="box", host="cutbox"), project)
    assert job.wait(180) == "finished", job.log()
    return job


def _partial(project: Path, job: Job) -> Path:
    return project / "runs" / f".partial-{job.id}"


@pytest.mark.fault(
    "F1-batched-cut",
    asserts="a connection cut in the middle of the one stream that carries 400 files leaves "
    "every file that came whole under its name with the job's bytes, and the next pull asks "
    "only for the rest (re-sends at most max(8 MiB, 1 %) of what landed) and ends verified",
    mutation=(
        "rgt_jupyter/run/pull/batch.py",
        'request = {"files": [[w.src, w.have, -1] for w in wanted]}',
        'request = {"files": [[w.src, 0, -1] for w in wanted]}',
    ),
)
def test_a_cut_batched_stream_resumes_without_sending_again(
    project: Path, box: Path, sshd: Sshd, evidence: Evidence
) -> None:
    """Protection: rgt_jupyter/run/pull/batch.py ``fetch_batch``: the stream is asked for each
    file from the end of the part an interrupted pull left; asked from the start instead, the
    cut file's part no longer matches what comes, is dropped and sent again whole, and files
    the next pull gets differ from the job's, so the case fails.
    """
    with cutbox(sshd, box) as proxy:
        job = _job(project, MANY.format(count=400, size=60000), "cutmany")
        source = Path(job.spec.out_dir)
        evidence.keep(source)
        total = sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
        close_connections(project)
        proxy.arm(total // 2)
        with pytest.raises(PullError, match="interrupted") as info:
            job.pull()
        assert "Pull again to resume" in str(info.value)
        assert proxy.cuts == 1
        partial = _partial(project, job)
        landed = sum(p.stat().st_size for p in partial.rglob("*") if p.is_file())
        whole = [p for p in partial.rglob("*.bin") if p.is_file()]
        assert whole and 0 < landed < total  # the cut fell in the middle of the stream
        for path in whole:  # what stands under its name is the job's bytes
            assert _sha(path) == _sha(source / path.relative_to(partial / "outputs"))
        assert len(list(partial.rglob("*.part"))) <= 1  # at most the file it was cut in
        proxy.disarm()
        close_connections(project)
        run = job.pull()
    assert run.verified, run.text()
    assert {p.relative_to(run.outputs).as_posix(): _sha(p) for p in run.outputs.rglob("*.bin")} == {
        p.relative_to(source).as_posix(): _sha(p) for p in source.rglob("*.bin")
    }
    resent = run.verification["bytes_sent"] - (total - landed)
    assert resent <= max(8 << 20, landed // 100), (resent, landed)
    assert evidence.account(run.path) == 0


@pytest.mark.fault(
    "F1-parallel-cut",
    asserts="one of four parallel streams of a large file cut mid-way: the other three finish, "
    "the record beside the part says how far each range landed, and the next pull sends only "
    "the cut range's rest (at most max(8 MiB, 1 %) again) and ends verified, the file the job's "
    "to the byte",
    mutation=(
        "rgt_jupyter/run/pull/ranges.py",
        '        if part.exists() and saved.get("size") == size:',
        "        if False:",
    ),
)
def test_one_of_several_parallel_streams_cut(
    project: Path, box: Path, sshd: Sshd, monkeypatch: pytest.MonkeyPatch, evidence: Evidence
) -> None:
    """Protection: rgt_jupyter/run/pull/ranges.py ``plan``: a part begun by parallel streams is
    resumed range by range from its record; ignored, the part (full length, with holes) is
    taken for a prefix, its hash cannot match, and the case fails.
    """
    monkeypatch.setenv("RGT_PULL_STREAMS", "4")
    with cutbox(sshd, box) as proxy:
        job = _job(project, LARGE.format(mib=RANGED_MIN // (1 << 20) + 16), "large")
        source = Path(job.spec.out_dir) / "weights.bin"
        evidence.keep(source)
        size = source.stat().st_size
        close_connections(project)
        before = proxy.accepted
        proxy.arm(size // 3, one=True)  # one stream cut, the others go on
        with pytest.raises(PullError, match="interrupted"):
            job.pull()
        assert proxy.cuts == 1
        assert proxy.accepted - before >= 5  # the records' connection and four streams
        part = _partial(project, job) / "outputs" / "weights.bin.part"
        ranges = json.loads(record_path(part).read_text())["ranges"]
        assert len(ranges) == 4
        short = [r for r in ranges if r[1] < r[2]]
        assert len(short) == 1, ranges  # only the cut one
        landed = sum(r[1] - r[0] for r in ranges)
        proxy.disarm()
        close_connections(project)
        pulled = job.pull()
    assert pulled.verified, pulled.text()
    assert _sha(pulled.outputs / "weights.bin") == _sha(source)
    assert not record_path(part).exists()
    resent = pulled.verification["bytes_sent"] - (size - landed)
    assert 0 <= resent <= max(8 << 20, landed // 100), (resent, landed)
    assert evidence.account(pulled.path) == 0
