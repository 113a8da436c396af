"""Pull: verified by hash against what the job wrote, and by loading; immutable, append-only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rgt_jupyter import submit
from rgt_jupyter.errors import PullError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.pull import check_space, safe_relpath

from .pulljobs import finished, sha


def test_pull_lands_an_immutable_verified_run(project: Path) -> None:
    job = finished(project)
    run = job.pull()
    assert run.verified, run.text()
    assert run.path == project / "runs" / f"{job.id}-r1"
    assert run.results == {"val": {"acc": 0.75}}
    manifest = run.manifest
    paths = {f["path"] for f in manifest["files"]}
    assert {"outputs/results.json", "outputs/preds.csv", "results.json"} <= paths
    assert {"checkpoints/ckpt-0000000001.pt", "checkpoints/ckpt-0000000002.pt"} <= paths
    for entry in manifest["files"]:
        local = run.path / entry["path"]
        assert local.stat().st_size == entry["size"] and sha(local) == entry["sha256"]
    assert not list(run.path.rglob("*.part"))
    loads = run.verification["checkpoint_loads"]
    assert len(loads) == 2 and all(r["ok"] for r in loads)
    prov = run.provenance
    assert prov["job_id"] == job.id and prov["profile"] == "local"
    assert prov["code_hash"] == job.spec.code_hash
    assert prov["exit"]["exit_code"] == 0 and prov["env_lock"]
    import torch

    assert prov["hardware"]["torch"]["version"] == torch.__version__
    assert prov["hardware"]["torch"]["cuda_available"] is torch.cuda.is_available()
    body = {k: v for k, v in prov.items() if k not in ("provenance_hash", "state_at_pull")}
    from rgt_jupyter.store.provenance import canonical_hash

    assert prov["provenance_hash"] == canonical_hash(body)

    # A second pull never overwrites the first: a new run id, the old files untouched.
    before = {p: sha(p) for p in run.path.rglob("*") if p.is_file()}
    second = job.pull()
    assert second.path != run.path and second.path.name == f"{job.id}-r2"
    assert {p: sha(p) for p in run.path.rglob("*") if p.is_file()} == before
    assert [r.run_id for r in job.runs()] == [run.run_id, second.run_id]


def test_pull_refuses_a_running_job_and_an_empty_job(project: Path) -> None:
    job = submit(LaunchRequest(program="import time\ntime.sleep(5)\n", name="busy"), project)
    with pytest.raises(PullError, match="wait for it"):
        job.pull()
    assert job.wait(60) == "finished"
    with pytest.raises(PullError, match="nothing to pull"):
        job.pull()
    assert not (project / "runs").exists() or not any((project / "runs").iterdir())


def test_pull_to_another_folder(project: Path, tmp_path: Path) -> None:
    job = finished(project, "import rgt_jupyter.job as job\njob.save_results({'a': 1})\n", "to")
    run = job.pull(to=tmp_path / "elsewhere")
    assert run.path.parent == tmp_path / "elsewhere" and run.verified
    # Run ids are unique per job, whatever folder each run landed in.
    other = job.pull(to=tmp_path / "third")
    assert other.run_id != run.run_id and other.verified
    assert [r.run_id for r in job.runs()] == [run.run_id, other.run_id]


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "a/../../b", "a//b", "./a", "a/.", ""])
def test_manifest_paths_cannot_escape(bad: str) -> None:
    with pytest.raises(PullError, match="escape"):
        safe_relpath(bad)


def test_space_is_checked_up_front(tmp_path: Path) -> None:
    with pytest.raises(PullError, match=r"needs \d+ bytes, \d+ are free"):
        check_space(tmp_path, 1 << 60, 1)
    with pytest.raises(PullError, match="inodes"):
        check_space(tmp_path, 1, 1 << 60)


def test_lost_job_pull_discloses_missing_end_manifest(project: Path) -> None:
    job = finished(project, "import rgt_jupyter.job as job\njob.save_results({'a': 1})\n", "nm")
    control = Path(job.spec.control_dir)
    (control / "manifest.json").unlink()
    run = job.pull()
    assert run.verified
    assert "without an end-of-job manifest" in run.verification["reference"]
    assert json.loads((run.path / "results.json").read_text()) == {"a": 1}


def test_listing_reuses_end_hashes_only_for_untouched_files(project: Path) -> None:
    """Files untouched since the job ended are not read again for the listing; a file whose
    bytes were replaced and whose mtime was set back is still read, and caught."""
    import os

    from rgt_jupyter.run.pull import remote_listing
    from rgt_jupyter.transport.local import LocalTransport

    job = finished(project)
    listing = remote_listing(LocalTransport(), job.spec)["files"]
    assert listing and all(entry.get("reused") for entry in listing.values())
    preds = Path(job.spec.out_dir) / "preds.csv"
    before = preds.stat()
    data = bytearray(preds.read_bytes())
    data[10] ^= 0x01  # same size ...
    preds.write_bytes(bytes(data))
    os.utime(preds, ns=(before.st_atime_ns, before.st_mtime_ns))  # ... and the same mtime
    listing = remote_listing(LocalTransport(), job.spec)["files"]
    assert not listing["outputs/preds.csv"].get("reused")
    assert listing["outputs/preds.csv"]["sha256"] == sha(preds)
    run = job.pull()
    assert not run.verified
    reasons = {m["path"]: m["reason"] for m in run.verification["mismatches"]}
    assert "altered or truncated" in reasons["outputs/preds.csv"]
    assert set(reasons) == {"outputs/preds.csv"}
