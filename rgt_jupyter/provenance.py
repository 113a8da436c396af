"""``run.json``: where a run came from (job, code, config, git, environment, hardware, times)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any


def git_state(project: Path) -> dict[str, Any]:
    """The project's git commit and dirty flag (None when it is not a git repository)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(project), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        if head.returncode != 0:
            return {"commit": None, "dirty": None}
        status = subprocess.run(
            ["git", "-C", str(project), "status", "--porcelain"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}


def canonical_hash(record: dict[str, Any]) -> str:
    """sha256 of the record's canonical JSON (sorted keys, no whitespace)."""
    data = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(data.encode()).hexdigest()


def build_run_json(
    *,
    run_id: str,
    spec: dict[str, Any],
    exit_rec: dict[str, Any] | None,
    env: dict[str, Any] | None,
    torch: dict[str, Any] | None,
    config: dict[str, Any] | None,
    verification: dict[str, Any],
    pulled_at: float,
) -> dict[str, Any]:
    """The provenance record of a pulled run, with its ``provenance_hash``."""
    env = env or {}
    record: dict[str, Any] = {
        "schema": "rgt-run/1",
        "run_id": run_id,
        "job_id": spec["job_id"],
        "name": spec["name"],
        "lineage": spec["lineage"],
        "attempt": spec["attempt"],
        "resumed": bool(spec.get("resume")),
        "profile": spec["profile"],
        "host": spec["host"],
        "code_hash": spec["code_hash"],
        "pushed": spec.get("pushed", []),
        "inputs": spec.get("inputs", []),
        "env_keys": sorted(spec.get("env", {})),
        "secret_names": spec.get("secret_names", []),
        "audit": spec.get("audit"),
        "durability": spec.get("durability"),
        "instance_id": spec.get("instance_id"),
        "group": spec.get("group"),
        "scheduler": {
            "launcher": spec.get("launcher"),
            "slurm_job_id": spec.get("slurm_job_id"),
            "restarts": (exit_rec or {}).get("restart", 0),
        },
        "config": config,
        "seed": (config or {}).get("seed", (spec.get("group") or {}).get("seed")),
        "git": git_state(Path(spec["project"])),
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
            "created": spec.get("created_at"),
            "launched": spec.get("launched_at"),
            "started": (exit_rec or {}).get("started_at"),
            "ended": (exit_rec or {}).get("ended_at"),
            "pulled": pulled_at,
        },
        "exit": exit_rec,
        "verification": {k: verification[k] for k in ("verified", "reference", "summary")},
    }
    record["provenance_hash"] = canonical_hash(record)
    return record
