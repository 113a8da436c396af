"""End to end: ``rgt demo`` executes the quickstart notebook headless and lands a verified run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent


def test_quickstart_notebook_lands_a_verified_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RGT_PROJECT", raising=False)
    project = tmp_path / "demo"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RGT_")}
    proc = subprocess.run(
        [sys.executable, "-m", "rgt_jupyter", "demo", "--dir", str(project), "--timeout", "240"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    report = f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 0, report
    assert "executing cell 1/" in proc.stdout, report

    runs = [p for p in (project / "runs").iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(runs) == 1, runs
    run = runs[0]
    assert str(run) in proc.stdout, report

    verification = json.loads((run / "verification.json").read_text())
    assert verification["verified"] is True, verification
    assert verification["mismatches"] == []
    assert verification["checkpoint_loads"], "the job saved checkpoints; they must be checked"
    assert all(r["ok"] for r in verification["checkpoint_loads"])

    results = json.loads((run / "results.json").read_text())
    curve = results["loss_curve"]
    final = results["train"]["loss"]
    assert len(curve) == 200
    assert math.isfinite(final)
    assert final < curve[0]
    assert results["device"] in ("cpu", "cuda")

    provenance = json.loads((run / "run.json").read_text())
    assert provenance["job_id"]
    assert run.name.startswith(provenance["job_id"])
    assert provenance["profile"] == "local"
    assert len(provenance["provenance_hash"]) == 64
    assert provenance["seed"] == 0

    executed = nbformat.read(str(project / "quickstart.executed.ipynb"), as_version=4)
    code_cells = [c for c in executed.cells if c.cell_type == "code"]
    assert code_cells and all(c.execution_count is not None for c in code_cells)
    errors = [
        (i, o.get("ename"), o.get("evalue"))
        for i, c in enumerate(executed.cells)
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert errors == []
    printed = "".join(
        o.get("text", "") for c in code_cells for o in c.outputs if o.get("output_type") == "stream"
    )
    assert "verified:   True" in printed, printed
