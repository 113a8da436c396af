"""``example_notebooks/verify.ipynb`` runs under nbclient: three arms of three seeds each run as
real local jobs, are pulled, and ``%verify`` calls one comparison an effect and the other noise."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from rgt_jupyter.cli.demo import error_outputs
from rgt_jupyter.deliver.execute import KERNEL_NAME, kernel_manager

NOTEBOOK = Path(__file__).resolve().parent.parent / "example_notebooks" / "verify.ipynb"


@pytest.mark.timeout(900)
def test_the_verify_example_notebook_runs_and_tells_effect_from_noise(project: Path) -> None:
    target = project / NOTEBOOK.name
    shutil.copyfile(NOTEBOOK, target)
    nb = nbformat.read(str(target), as_version=4)
    client = NotebookClient(
        nb,
        km=kernel_manager(),
        timeout=600,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(project)}},
    )
    client.execute(env={**os.environ, "RGT_PROJECT": str(project)}, cleanup_kc=True)
    assert error_outputs(nb) == []
    last = next(c for c in nb.cells if c.get("id") == "verify-11")
    text = "".join(o.get("text", "") for o in last.outputs)
    assert "wide vs base: effect" in text, text
    assert "l2 vs base:   noise" in text, text
    assert "problems: []" in text, text
    runs = [p for p in (project / "runs").iterdir() if (p / "run.json").is_file()]
    assert len(runs) == 9
    findings = (project / "verify" / "findings.jsonl").read_text().splitlines()
    assert len(findings) >= 16  # every check said something, twice
