"""What a pull is given that it must not trust: files altered after the job wrote them, a
pickled checkpoint that would run code, a lying listing from the job's machine, symlinks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rgt_jupyter.errors import PullError

from ..pulljobs import finished, sha
from .evidence import Evidence

LISTING = (
    "rgt_jupyter/run/pull/__init__.py",
    '    validate_listing(files, listing.get("refused", []))',
    "    pass",
)


@pytest.mark.fault(
    "F8-altered",
    asserts="an output appended to and a checkpoint truncated after the job wrote them are "
    "mismatches kept as .part, never under their names; the run is not verified; the earlier "
    "good run is untouched",
    mutation=(
        "rgt_jupyter/run/pull/transfer.py",
        '    if end_manifest is not None and end_manifest[rel]["sha256"] != got:',
        "    if False:",
    ),
)
def test_altered_and_truncated_sources_are_mismatches(project: Path, evidence: Evidence) -> None:
    """The job's files changed on its machine after it ended (and after a first good pull).

    Protection: rgt_jupyter/run/pull/transfer.py ``_judge``: the bytes that arrived are compared with the
    end-of-job manifest the agent wrote; removed, the altered files are taken as they are now
    and the case fails.
    """
    job = finished(project)
    out = Path(job.spec.out_dir)
    ckpt = Path(job.spec.ckpt_dir)
    good = job.pull()
    evidence.keep(good.path)
    good_files = {p: sha(p) for p in good.path.rglob("*") if p.is_file()}
    # After the job wrote them: one output altered, one checkpoint truncated.
    with open(out / "preds.csv", "a") as fh:
        fh.write("999,1\n")
    newest = ckpt / "ckpt-0000000002.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    run = job.pull()
    assert not run.verified
    reasons = {m["path"]: m["reason"] for m in run.verification["mismatches"]}
    assert "altered or truncated" in reasons["outputs/preds.csv"]
    assert "altered or truncated" in reasons["checkpoints/ckpt-0000000002.pt"]
    # Nothing untrusted under its final name: the bytes are kept aside as .part.
    assert not (run.path / "outputs" / "preds.csv").exists()
    assert (run.path / "outputs" / "preds.csv.part").exists()
    assert not (run.path / "checkpoints" / "ckpt-0000000002.pt").exists()
    assert (run.path / "outputs" / "results.json").exists()
    listed = {f["path"] for f in run.manifest["files"]}
    assert "outputs/preds.csv" not in listed
    assert "verified: NO" in run.text() and "MISMATCH outputs/preds.csv" in run.text()
    # The earlier good run is untouched.
    assert {p: sha(p) for p in good.path.rglob("*") if p.is_file()} == good_files
    corrupt = {"outputs/preds.csv", "checkpoints/ckpt-0000000002.pt"}
    assert evidence.trusted(run.path, corrupt) == 0
    assert evidence.account(good.path) == 0


@pytest.mark.fault(
    "B-pickle",
    asserts="a pickled checkpoint that runs a command when unpickled is refused by the "
    "weights_only loader in its own process: no code runs, the checkpoint is not trusted, "
    "the run is not verified",
    mutation=(
        "rgt_jupyter/run/safe_load.py",
        'obj = torch.load(path, map_location="cpu", weights_only=True)',
        'obj = torch.load(path, map_location="cpu", weights_only=False)',
    ),
)
def test_checkpoint_that_does_not_load_safely_is_not_verified(
    project: Path, evidence: Evidence
) -> None:
    """A pickled object that runs code when unpickled: weights_only=True must refuse it.

    Protection: rgt_jupyter/run/safe_load.py: ``torch.load(..., weights_only=True)``; with a plain
    load the pickle runs ``os.system``, the marker file appears and the case fails.
    """
    sentinel = evidence.sentinel(project.parent / "beside")
    program = """\
import os, torch
import rgt_jupyter.job as job

class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + os.path.join(os.environ["RGT_OUT"], "..", "PWNED"),))

torch.save({"evil": Evil()}, os.path.join(os.environ["RGT_CKPT_DIR"], "model.pt"))
job.save_results({"ok": True})
"""
    job = finished(project, program, "evil")
    run = job.pull()
    assert not run.verified
    loads = {r["path"]: r for r in run.verification["checkpoint_loads"]}
    assert not loads["checkpoints/model.pt"]["ok"]
    assert "Weights only load failed" in loads["checkpoints/model.pt"]["detail"]
    assert not list(project.rglob("PWNED"))
    assert "DOES NOT LOAD checkpoints/model.pt" in run.text()
    assert evidence.trusted(run.path, {"checkpoints/model.pt"}, bytes_differ=False) == 0
    assert evidence.account(sentinel.parent) == 0


HOSTILE_AGENT = """\
import json, sys
if sys.argv[1] == "manifest":
    print(json.dumps({"files": FILES, "refused": []}))
"""
GOOD = {"size": 3, "sha256": "a" * 64}


@pytest.mark.parametrize(
    "files",
    [
        {"outputs/../../x": GOOD},
        {"/etc/x": GOOD},
        {"outputs//results.json": GOOD, "outputs/results.json": GOOD},
        {"outputs/a": GOOD, "outputs/a/b": GOOD},
        {"outputs/" + "n" * 300: GOOD},
        {"outputs/huge.bin": {"size": 10 * 2**40, "sha256": "b" * 64}},
        {"outputs/neg": {"size": -1, "sha256": "c" * 64}},
    ],
    ids=["dotdot", "absolute", "duplicate", "file-under-file", "long-name", "10TB", "negative"],
)
@pytest.mark.fault(
    "B-manifest",
    asserts="a listing that escapes, repeats a name, nests a file under a file, names past "
    "NAME_MAX, claims 10 TB or a negative size is refused whole before any write; the "
    "sentinel and the job's files are untouched",
    mutation=LISTING,
)
def test_hostile_listing_is_rejected_before_any_write(
    project: Path, files: dict[str, dict[str, object]], evidence: Evidence
) -> None:
    """The machine the job ran on is not trusted: its agent is replaced by one that lies.

    Protection: rgt_jupyter/run/pull/__init__.py ``pull``: ``validate_listing`` runs on the listing before
    anything is written; removed, the lying names reach the disk and the case fails.
    """
    job = finished(project, "import rgt_jupyter.job as job\njob.save_results({'a': 1})\n", "h")
    sentinel = project / "x"
    sentinel.write_text("untouched")
    evidence.keep(sentinel, job.spec.out_dir)
    control = Path(job.spec.control_dir)
    (control / "agent.py").write_text(HOSTILE_AGENT.replace("FILES", json.dumps(files)))
    with pytest.raises(PullError, match="rejected|not enough space"):
        job.pull()
    assert sentinel.read_text() == "untouched"
    assert not (project / "runs").exists()
    assert not Path("/etc/x").exists()
    assert evidence.account(project, job.spec.out_dir) == 0


@pytest.mark.parametrize("target", ["/etc", "/no/such/folder"])
@pytest.mark.fault(
    "B-manifest",
    asserts="a symlink among the job's outputs (to a folder, or dangling) rejects the listing: "
    "nothing is followed or written",
    mutation=LISTING,
)
def test_symlink_in_outputs_rejects_the_listing(
    project: Path, target: str, evidence: Evidence
) -> None:
    """A link to a folder that exists (listed among folders by a walk) or to nothing.

    Protection: rgt_jupyter/run/pull/__init__.py ``pull``: ``validate_listing`` refuses the entries the
    agent reported as symlinks; removed, the pull goes on and the case fails.
    """
    sentinel = evidence.sentinel(project.parent / "beside")
    program = (
        "import os, rgt_jupyter.job as job\n"
        f"os.symlink({target!r}, os.path.join(os.environ['RGT_OUT'], 'keys'))\n"
        "job.save_results({'a': 1})\n"
    )
    job = finished(project, program, "sym")
    with pytest.raises(PullError, match="'outputs/keys': a symlink"):
        job.pull()
    assert not (project / "runs").exists()
    assert evidence.account(sentinel.parent) == 0
