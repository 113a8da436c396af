"""The JupyterLab extension shipped prebuilt in the package: the "rgt jobs" sidebar and the
markdown placeholders rendered while the author writes, in a real JupyterLab and Chromium.

* the committed build is the build of ``labextension/``'s sources, and the environment has it;
* the sidebar lists a job launched from the terminal (``rgt run``), with its state, progress and
  host, and follows it to its end through the server's watcher, with no kernel;
* a click on a job launched from a notebook cell opens that notebook at that cell;
* a markdown placeholder shows its number with the source in its tooltip, one that does not
  resolve is marked, and a placeholder typed while writing renders once the cell is rendered;
  the notebook's source keeps the placeholders.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat
import pytest
from nbclient import NotebookClient

from rgt_jupyter.api import find
from rgt_jupyter.deliver.execute import KERNEL_NAME, kernel_manager

from .browser import (  # noqa: F401 - the *_fixture names are the browser, lab and page fixtures
    REPO,
    LabServer,
    browser_fixture,
    lab_fixture,
    page_fixture,
)
from .conftest import rgt, wait_for
from .verify_fixtures import make_run

if TYPE_CHECKING:
    from playwright.sync_api import Page

SCREENS = REPO / "bench" / "results" / "screens"
BUILT = REPO / "rgt_jupyter" / "labextension"
OPEN_MS = 90_000
#: How long the sidebar may take to show a state change: the server's scan and watcher, then
#: the sidebar's poll, with slack for a loaded machine.
FOLLOW_MS = 180_000

SLOW = """import os, time
from rgt_jupyter import job
step = 0
while not os.path.exists({flag!r}):
    step += 1
    job.progress(min(step, 99), 100, loss=1.0 / step)
    time.sleep(0.2)
job.progress(100, 100, loss=0.01)
"""

CELL = """%%remote_run --name from-cell
print("hello from the cell")
"""


def test_the_committed_build_is_the_build_of_the_sources() -> None:
    stamp = (BUILT / "sources.sha256").read_text().splitlines()
    recorded = dict(reversed(line.split("  ", 1)) for line in stamp if line.strip())
    sources = sorted(
        str(p.relative_to(REPO))
        for pattern in ("package.json", "package-lock.json", "src/*.js", "style/*.css")
        for p in (REPO / "labextension").glob(pattern)
    )
    assert sorted(recorded) == sources, "the build's stamp lists other files than the sources"
    for rel in sources:
        digest = hashlib.sha256((REPO / rel).read_bytes()).hexdigest()
        assert recorded[rel] == digest, (
            f"{rel} changed since rgt_jupyter/labextension was built: "
            "run bash scripts/build-labextension.sh"
        )
    meta = json.loads((BUILT / "package.json").read_text())
    assert (
        meta["name"] == "rgt-jupyter" and (BUILT / meta["jupyterlab"]["_build"]["load"]).is_file()
    )
    # Installed where JupyterLab finds prebuilt extensions (the package's shared data).
    installed = Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "rgt-jupyter"
    assert json.loads((installed / "package.json").read_text()) == meta, (
        "the environment's copy differs from the build: pip install -e . again"
    )


def _launch_from_a_cell(project: Path) -> str:
    """Run a notebook whose cell launches a job (nbclient sends the cell id, the server's
    session name is the notebook): return the job's id once it finished."""
    (project / "work").mkdir()
    path = project / "work" / "launch.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            "Accuracy {{rgt:r1:test.accuracy|.1%}}, and {{rgt:r1:test.missing}} is not there.",
            id="md-numbers",
        ),
        nbformat.v4.new_code_cell("%load_ext rgt_jupyter", id="load"),
        nbformat.v4.new_code_cell("x = 1", id="other"),
        nbformat.v4.new_code_cell(CELL, id="launching-cell"),
    ]
    client = NotebookClient(
        nb,
        km=kernel_manager(),
        timeout=300,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(path.parent)}},
    )
    env = {**os.environ, "RGT_PROJECT": str(project), "JPY_SESSION_NAME": str(path)}
    client.execute(env=env, cleanup_kc=True)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, str(path))
    job = find("from-cell", project)
    # nbclient sends no cell id: the server finds the cell by its launch digest.
    assert job.spec.cell_id is None and job.spec.notebook == str(path)
    return job.id


def _row(page: Page, job_id: str):  # noqa: ANN202 - a Playwright locator
    return page.locator(f"#rgt-jobs .rgt-jobs-row[data-job-id='{job_id}']")


@pytest.mark.timeout(900)
def test_the_sidebar_follows_a_terminal_job_and_opens_a_cells_job_at_its_cell(
    project: Path, lab: LabServer, page: Page
) -> None:
    from playwright.sync_api import expect

    make_run(project / "runs", "r1", results={"test": {"accuracy": 0.8731, "loss": 0.0421}})
    cell_job = _launch_from_a_cell(project)
    flag = project / "release"
    (project / "slow.py").write_text(SLOW.format(flag=str(flag)))
    rgt("run", "slow.py", "--name", "from-terminal", cwd=project)
    terminal_job = find("from-terminal", project).id

    page.goto(lab.url("/lab"), timeout=OPEN_MS)
    tab = page.locator(".jp-SideBar .lm-TabBar-tab[data-id='rgt-jobs']")
    expect(tab).to_be_visible(timeout=OPEN_MS)
    tab.click()
    panel = page.locator("#rgt-jobs")
    expect(panel).to_be_visible(timeout=OPEN_MS)

    # The terminal's job: listed while it runs, with progress and where it runs.
    row = _row(page, terminal_job)
    expect(row).to_have_attribute("data-state", "running", timeout=FOLLOW_MS)
    expect(row.locator(".rgt-jobs-row-name")).to_have_text("from-terminal")
    expect(row.locator(".rgt-jobs-row-facts")).to_contain_text("/100", timeout=FOLLOW_MS)
    host = lab.api("/rgt/api/jobs/from-terminal")["job"]["host"]
    expect(row.locator(".rgt-jobs-row-facts")).to_contain_text(f"this machine ({host})")
    expect(_row(page, cell_job)).to_have_attribute("data-state", "finished", timeout=FOLLOW_MS)
    expect(panel.locator(".rgt-jobs-watcher")).to_contain_text("server watcher")
    # Newest first.
    ids = panel.locator(".rgt-jobs-row").evaluate_all("rows => rows.map(r => r.dataset.jobId)")
    assert ids.index(terminal_job) < ids.index(cell_job), ids

    # It ends with no kernel watching: the server's watcher saw it, the sidebar follows.
    flag.touch()
    expect(row).to_have_attribute("data-state", "finished", timeout=FOLLOW_MS)
    expect(row.locator(".rgt-jobs-row-facts")).to_contain_text("100/100 (100%)")
    SCREENS.mkdir(parents=True, exist_ok=True)
    panel.screenshot(path=str(SCREENS / "jobs-sidebar-light.png"))
    assert 0 < (SCREENS / "jobs-sidebar-light.png").stat().st_size < 400_000

    # A click on the cell's job opens its notebook at the launching cell.
    _row(page, cell_job).click()
    active = page.locator(".jp-NotebookPanel:visible .jp-Cell.jp-mod-active")
    expect(active).to_contain_text("%%remote_run --name from-cell", timeout=OPEN_MS)
    expect(page.locator(".lm-TabBar-tab.lm-mod-current", has_text="launch.ipynb")).to_be_visible()

    # The markdown cell's placeholders, rendered while the notebook is open.
    rendered = page.locator(".jp-NotebookPanel:visible .jp-MarkdownCell .jp-RenderedMarkdown")
    number = rendered.locator(".rgt-placeholder-number").first
    expect(number).to_have_text("87.3%", timeout=OPEN_MS)
    assert "run r1" in (number.get_attribute("title") or "")
    missing = rendered.locator(".rgt-placeholder-error")
    expect(missing).to_have_text("{{rgt:r1:test.missing}}", timeout=OPEN_MS)
    assert "does not resolve" in (missing.get_attribute("title") or "")

    # The author adds a placeholder: rendering the cell shows its number.
    rendered.first.dblclick()
    editor = page.locator(".jp-NotebookPanel:visible .jp-MarkdownCell .cm-content").first
    expect(editor).to_be_visible(timeout=OPEN_MS)
    editor.click()
    page.keyboard.press("Control+End")
    page.keyboard.type(" Loss {{rgt:r1:test.loss|.3f}}.")
    page.keyboard.press("Shift+Enter")
    expect(rendered.locator(".rgt-placeholder-number", has_text="0.042")).to_be_visible(
        timeout=OPEN_MS
    )
    assert "{{rgt:r1:test.loss" not in rendered.first.inner_text()
    # What is saved keeps the placeholders (the frontend renders them, the source is the
    # template that %deliver and the export render).
    page.keyboard.press("Control+s")
    saved = wait_for(
        lambda: (
            (
                "test.loss"
                in (src := nbformat.read(str(project / "work" / "launch.ipynb"), 4).cells[0].source)
            )
            and src
        ),
        120,
        "the notebook to be saved",
    )
    assert "{{rgt:r1:test.accuracy|.1%}}" in saved and "{{rgt:r1:test.loss|.3f}}" in saved
