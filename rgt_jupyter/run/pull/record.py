"""``run.json``: where a pulled run came from (job, code, config, git, environment, hardware,
times), sealed by its ``provenance_hash``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...jobs.spec import JobSpec
from ...store.provenance import canonical_hash, git_state

#: ``run.json`` names at most this many files per kind of check (``verification.json`` all).
MAX_LISTED = 200


def _capped(checks: dict[str, Any]) -> dict[str, Any]:
    """What was done to each file (loaded, pickled, refused, failed, only hashed), with the
    folders recognised; each list cut at :data:`MAX_LISTED`, with its count."""
    out: dict[str, Any] = {"formats": checks.get("formats", [])}
    for kind in ("loaded", "pickled", "refused", "failed", "hashed"):
        paths = checks.get(kind, [])
        out[kind] = paths[:MAX_LISTED]
        out[f"{kind}_count"] = len(paths)
    return out


def build_run_json(
    *,
    run_id: str,
    spec: JobSpec,
    exit_rec: dict[str, Any] | None,
    env: dict[str, Any] | None,
    torch: dict[str, Any] | None,
    config: dict[str, Any] | None,
    verification: dict[str, Any],
    pulled_at: float,
    findings: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The provenance record of a pulled run, with its ``provenance_hash``; ``findings``: what
    the training-debug probes disclosed (``findings.json``)."""
    env = env or {}
    record: dict[str, Any] = {
        "schema": "rgt-run/1",
        "run_id": run_id,
        "job_id": spec.job_id,
        "name": spec.name,
        "lineage": spec.lineage,
        "attempt": spec.attempt,
        "resumed": bool(spec.resume),
        "profile": spec.profile,
        "host": spec.host,
        "code_hash": spec.code_hash,
        "pushed": spec.pushed,
        "inputs": spec.inputs,
        "env_keys": sorted(spec.env),
        "secret_names": spec.secret_names,
        "audit": spec.audit,
        "durability": spec.durability,
        "instance_id": spec.instance_id,
        "group": spec.group,
        "scheduler": {
            "launcher": spec.launcher,
            "slurm_job_id": spec.slurm_job_id,
            "restarts": (exit_rec or {}).get("restart", 0),
        },
        "config": config,
        "seed": (config or {}).get("seed", (spec.group or {}).get("seed")),
        "git": git_state(Path(spec.project)),
        "python": env.get("python"),
        "env_lock": env.get("packages"),
        "hardware": {
            "platform": env.get("platform"),
            "hostname": env.get("hostname"),
            "cpu_count": env.get("cpu_count"),
            "nvidia_smi": env.get("nvidia_smi"),
            "torch": torch,
        },
        "times": {
            "created": spec.created_at,
            "launched": spec.launched_at,
            "started": (exit_rec or {}).get("started_at"),
            "ended": (exit_rec or {}).get("ended_at"),
            "pulled": pulled_at,
        },
        "exit": exit_rec,
        "verification": {
            **{k: verification[k] for k in ("verified", "reference", "summary")},
            "files": _capped(verification.get("files") or {}),
        },
        "findings": findings or [],
    }
    record["provenance_hash"] = canonical_hash(record)
    return record
