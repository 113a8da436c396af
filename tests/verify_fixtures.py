"""Run folders for the VERIFY tests, in the layout a pull writes (``runs/<run-id>/`` with
``run.json``, ``results.json``, ``manifest.json``, ``outputs/`` and ``checkpoints/``), with what a
job can declare (see :mod:`rgt_jupyter.verify.model`). Each test plants its defect in them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()


def make_run(
    runs: Path,
    run_id: str,
    *,
    config: dict[str, Any] | None = None,
    seed: int | None = 0,
    results: dict[str, Any] | None = None,
    metric: dict[str, Any] | None = None,
    splits: dict[str, list[str]] | None = None,
    split_hashes: dict[str, dict[str, str]] | None = None,
    predictions: dict[str, list[dict[str, Any]]] | None = None,
    evals: list[dict[str, Any]] | None = None,
    outputs: dict[str, dict[str, Any]] | None = None,
    shuffle: dict[str, Any] | None = None,
    changed: list[str] | None = None,
    checkpoints: dict[str, bytes] | None = None,
    git: dict[str, Any] | None = None,
    code_hash: str = "c0de",
    env_lock: dict[str, str] | None = None,
    hardware: dict[str, Any] | None = None,
    extra: dict[str, bytes] | None = None,
) -> Path:
    """Write one run folder under ``runs`` and return it. ``extra``: more files, by path
    relative to the run folder."""
    root = runs / run_id
    files: dict[str, bytes] = {}
    if results is not None:
        files["outputs/results.json"] = _json(results)
    if config is not None:
        files["outputs/config.json"] = _json(config)
    if metric is not None:
        files["outputs/verify/metric.json"] = _json(metric)
    for split, ids in (splits or {}).items():
        files[f"outputs/splits/{split}.ids"] = ("\n".join(ids) + "\n").encode()
    for split, hashes in (split_hashes or {}).items():
        lines = "".join(f"{digest}  {item}\n" for item, digest in hashes.items())
        files[f"outputs/splits/{split}.sha256"] = lines.encode()
    for split, rows in (predictions or {}).items():
        files[f"outputs/predictions/{split}.jsonl"] = "".join(
            json.dumps(r) + "\n" for r in rows
        ).encode()
    if evals is not None:
        files["outputs/verify/evals.jsonl"] = "".join(json.dumps(e) + "\n" for e in evals).encode()
    for split, value in (outputs or {}).items():
        files[f"outputs/verify/outputs/{split}.json"] = _json(value)
    if shuffle is not None:
        files["outputs/verify/shuffle.json"] = _json(shuffle)
    if changed is not None:
        files["outputs/verify/changed.json"] = _json({"keys": changed})
    for name, data in (checkpoints or {}).items():
        files[f"checkpoints/{name}"] = data
    files.update(extra or {})
    for rel, data in files.items():
        _write(root / rel, data)
    if results is not None:
        _write(root / "results.json", files["outputs/results.json"])
    manifest = {
        "files": [
            {"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for rel, data in sorted(files.items())
        ],
        "unverified": [],
    }
    _write(root / "manifest.json", _json(manifest))
    run = {
        "schema": "rgt-run/1",
        "run_id": run_id,
        "job_id": f"job-{run_id}",
        "name": run_id.rsplit("-", 1)[0],
        "profile": "local",
        "host": "localhost",
        "code_hash": code_hash,
        "config": config,
        "seed": seed,
        "git": git or {"commit": "abc123", "dirty": False},
        "env_lock": env_lock or {"torch": "2.13.0", "numpy": "2.1.0"},
        "hardware": hardware or {"platform": "Linux", "nvidia_smi": None},
        "verification": {"verified": True, "reference": "manifest", "summary": "ok"},
    }
    _write(root / "run.json", _json(run))
    return root
