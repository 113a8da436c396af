"""A notebook saved after its job ended tells the truth from the ``.ipynb`` alone: the launch
cell's fallback outputs (what GitHub, nbviewer and nbconvert show) were replaced in place as the
job's state changed, so they show the end, not the queued state of the launch."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter

from rgt_jupyter.cli.demo import error_outputs
from rgt_jupyter.deliver.execute import KERNEL_NAME, kernel_manager

LAUNCH = """%%remote_run --name saved
import time
from rgt_jupyter import job
for step in range(1, 4):
    job.progress(step, 3, loss=1.0 / step)
    time.sleep(0.5)
job.save_results({"acc": 0.9})
"""
# Waits in the kernel until the launch cell's view has shown the end: that is when its
# fallbacks were replaced (what a researcher does by looking, or by `%watch --wait`).
WAIT = """import time
from rgt_jupyter import find
from rgt_jupyter.widgets import SHOWN
job = find("saved")
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    view = SHOWN.get(job.id)
    if view is not None and view.saved.terminal:
        break
    time.sleep(0.2)
print("shown:", SHOWN[job.id].saved.state)
"""


def _fallbacks(cell: nbformat.NotebookNode) -> tuple[str, str]:
    texts, pages = [], []
    for out in cell.outputs:
        data = out.get("data", {})
        texts.append(str(data.get("text/plain", "")))
        pages.append(str(data.get("text/html", "")))
    return "\n".join(texts), "\n".join(pages)


@pytest.mark.timeout(600)
def test_the_saved_launch_cell_shows_the_end(project: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext rgt_jupyter"),
        nbformat.v4.new_code_cell(LAUNCH),
        nbformat.v4.new_code_cell(WAIT),
    ]
    client = NotebookClient(
        nb,
        km=kernel_manager(),
        timeout=400,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(project)}},
    )
    client.execute(env={**os.environ, "RGT_PROJECT": str(project)}, cleanup_kc=True)
    assert error_outputs(nb) == []
    assert "shown: finished" in "".join(o.get("text", "") for o in nb.cells[2].outputs)
    # Saved as JupyterLab saves by default: without the widgets' state (nbclient keeps it), so
    # every reader but a live kernel shows the fallbacks.
    nb.metadata.pop("widgets", None)
    saved = project / "paper.ipynb"
    nbformat.write(nb, str(saved))

    # From the file alone: the launch cell's fallbacks show the end and the last progress.
    launch = nbformat.read(str(saved), as_version=4).cells[1]
    text, page = _fallbacks(launch)
    assert "finished" in text and "queued" not in text, text
    assert "3/3" in text or "step 3" in text, text
    assert "finished" in page and "queued" not in page
    assert any(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in launch.outputs
    ), "the live view is still there for a frontend with widgets"
    assert any(o.get("output_type") == "display_data" for o in launch.outputs)

    # nbconvert's HTML (what nbviewer and GitHub render) says the same.
    body, _ = HTMLExporter().from_filename(str(saved))
    cell = body.split("%%remote_run", 1)[1].split("shown:", 1)[0]
    assert "finished" in cell and "queued" not in cell


FAILING = """%%remote_run --name broken
print("epoch 1 done")
def load():
    raise ValueError("the data loader found no files in /data/train")
load()
"""


@pytest.mark.timeout(600)
def test_a_failure_is_shown_once_in_the_cells_lines_without_the_agents_frames(
    project: Path,
) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext rgt_jupyter"),
        nbformat.v4.new_code_cell(FAILING),
        nbformat.v4.new_code_cell("%watch broken --wait --timeout 300"),
    ]
    client = NotebookClient(
        nb,
        km=kernel_manager(),
        timeout=400,
        kernel_name=KERNEL_NAME,
        allow_errors=True,
        resources={"metadata": {"path": str(project)}},
    )
    client.execute(env={**os.environ, "RGT_PROJECT": str(project)}, cleanup_kc=True)
    outputs = nb.cells[2].outputs
    shown = []
    for out in outputs:
        shown.append(str(out.get("text", "")))
        shown.append(str(out.get("data", {}).get("text/plain", "")))
        shown.append("\n".join(out.get("traceback", [])))
    text = "\n".join(shown)
    assert "epoch 1 done" in text, "the job's own output is streamed"
    assert text.count('raise ValueError("the data loader') == 1, text
    (error,) = [o for o in outputs if o.get("output_type") == "error"]
    assert "Cell [remote_run], line 5" in "\n".join(error["traceback"]), error
    everything = "\n".join(str(o) for cell in nb.cells for o in cell.get("outputs", []))
    assert "agent.py" not in everything and "noqa" not in everything
