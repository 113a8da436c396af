"""A pull from the job's bucket, for a job whose machine is gone (or cannot be reached): its
newest complete checkpoint, the way a pull from the machine lands one.

Only a checkpoint with its ``.sha256`` record in the bucket and an object of the size and
sha256 the upload stated counts (:func:`rgt_jupyter.transport.bucket.complete`); its bytes are
checked against that record as they land, then it is loaded in the separate, time-limited
loader like every pulled checkpoint. The run says what it is: ``source: bucket``, and that the
job's outputs (``$RGT_OUT``) were on the machine and are not in it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from ...errors import PullError, RgtError
from ...jobs.spec import JobSpec
from ...store.fsutil import atomic_write_bytes, fsync_dir, sha256_file
from ...store.locks import held, lock_path
from ...store.project import runs_dir
from ...store.registry import Registry
from ...transport import bucket as buckets
from ..phases import phase
from . import claim_run_dir
from .formats import PASSING, file_checks, verdict
from .loader import load_checkpoints
from .record import build_run_json
from .resume import partial_dir

#: What a bucket run says of the files that were only on the machine.
NOT_HERE = (
    "the job's outputs ($RGT_OUT) were on its machine, which could not be pulled: this run "
    "holds the newest checkpoint its bucket held, nothing else"
)


def _write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(
        path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode()
    )


def pull_from_bucket(spec: JobSpec, project: Path, to: Path | None = None) -> Path:
    """Pull the newest complete checkpoint of ``spec``'s lineage from its bucket into a new run
    dir and return it (see the module docstring)."""
    if not spec.bucket or not spec.bucket.get("lineage_url"):
        raise PullError(
            f"job {spec.job_id} has no bucket: its checkpoints were only on its machine. Give "
            "the profile a [bucket] (or --bucket s3://...) for the jobs to come."
        )
    cfg = buckets.config_of(spec.bucket, spec.bucket.get("url"))
    assert cfg is not None
    lineage = str(spec.bucket["lineage_url"])
    with held(lock_path(project, "pull", spec.job_id), f"the pull of job {spec.job_id}"):
        try:
            with phase(f"listing the complete checkpoints in {lineage}"):
                found = buckets.complete(cfg, lineage)
        except RgtError as exc:
            raise PullError(f"the bucket could not be listed: {exc}") from exc
        if not found:
            raise PullError(
                f"no complete checkpoint of {spec.name} is in {lineage} (an object without its "
                ".sha256 record is an upload cut short, and is never trusted): nothing to pull"
            )
        newest = found[-1]
        root = (to if to is not None else runs_dir(project)).resolve()
        partial = partial_dir(root, spec.job_id)
        dest = partial / "checkpoints" / newest.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        with phase(f"downloading {newest.name} ({newest.size} bytes) from the bucket"):
            if not buckets.download(cfg, newest, dest):
                raise PullError(
                    f"{newest.key} does not match its sha256 record in the bucket: it was not "
                    "kept. The bucket's copy is damaged; an older one may be whole "
                    f"({', '.join(c.name for c in found[:-1]) or 'none'})."
                )
        rel = f"checkpoints/{newest.name}"
        with phase("checking that the checkpoint loads (a separate process)"):
            loads = load_checkpoints([dest])
        report = [{"path": rel, **v} for v in loads.values()]
        verified = all(verdict(r) in PASSING for r in report)
        landed = [{"path": rel, "size": newest.size, "sha256": sha256_file(dest)[0]}]
        verification = {
            "verified": verified,
            "checked_at": time.time(),
            "reference": f"the bucket's sha256 record of {newest.key}",
            "summary": f"1 checkpoint from the bucket (step {newest.step}), "
            f"{sum(verdict(r) == 'loaded' for r in report)}/1 loads; {NOT_HERE}",
            "mismatches": [],
            "checkpoint_loads": report,
            "files": file_checks([rel], report),
            "bytes_sent": newest.size,
            "bytes_total": newest.size,
            "source": "bucket",
        }
        return _record(spec, project, root, partial, landed, verification, newest.step, lineage)


def _record(
    spec: JobSpec,
    project: Path,
    root: Path,
    partial: Path,
    landed: list[dict[str, Any]],
    verification: dict[str, Any],
    step: int,
    lineage: str,
) -> Path:
    registry = Registry(project)
    run_id, final = claim_run_dir(
        root, spec.job_id, {r["run_id"] for r in registry.runs(spec.job_id)}
    )
    _write_json(
        partial / "manifest.json",
        {
            "schema": "rgt-manifest/1",
            "run_id": run_id,
            "files": landed,
            "totals": {"files": 1, "bytes": landed[0]["size"]},
            "unverified": [],
        },
    )
    _write_json(partial / "verification.json", verification)
    run_json = build_run_json(
        run_id=run_id,
        spec=spec,
        exit_rec=None,
        env=None,
        torch=None,
        config=None,
        verification=verification,
        pulled_at=time.time(),
        findings=[],
    )
    run_json["source"] = {"kind": "bucket", "lineage_url": lineage, "step": step, "note": NOT_HERE}
    _write_json(partial / "run.json", run_json)
    fsync_dir(partial)
    try:
        os.rename(partial, final)
    except BaseException:
        with contextlib.suppress(OSError):
            final.rmdir()
        raise
    fsync_dir(root)
    registry.add_run(run_id, spec.job_id, final, bool(verification["verified"]))
    return final
