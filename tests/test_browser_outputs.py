"""In a real browser: every rich output kind, as a saved notebook holds it, renders in
JupyterLab as its HTML (a table, a report), never as a JSON tree, in the light and the dark
theme: trusted (the researcher's own notebook) with the theme's colours, and untrusted (one
opened from elsewhere, its HTML sanitised) still as tables, the curve still a picture. A small
screenshot of each is written under ``bench/results/screens/``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat
import pytest

from rgt_jupyter.deliver.report import deliver
from rgt_jupyter.jobs.snapshot import Snapshot
from rgt_jupyter.machines.profiles import load_profile
from rgt_jupyter.run.teardown import Check, Gate, Machine
from rgt_jupyter.verify.report import verify
from rgt_jupyter.views.render import curve_svg, snapshot_html, snapshot_text
from rgt_jupyter.views.restore import results_bundle
from rgt_jupyter.views.teardown_view import gate_html

from .browser import (  # noqa: F401 - the *_fixture names are the browser, lab and page fixtures
    REPO,
    LabServer,
    browser_fixture,
    lab_fixture,
    page_fixture,
)
from .test_verify import _arm
from .verify_fixtures import make_run

if TYPE_CHECKING:
    from playwright.sync_api import Page

SCREENS = REPO / "bench" / "results" / "screens"
NOTEBOOK = "outputs.ipynb"
OPEN_MS = 90_000
#: The CSS class each kind's HTML carries, to find it on the page.
KINDS = {
    "job": ".rgt-job",
    "results": ".rgt-results",
    "verify": ".rgt-verify",
    "deliver": ".rgt-deliver",
    "teardown": ".rgt-gate",
}


def _job_bundle() -> dict[str, Any]:
    now = time.time()
    snap = Snapshot(
        job_id="exp-20261201-ab12", name="exp", state="finished", host="gpu1", observed_at=now
    )
    snap.started_at, snap.ended_at, snap.exit_code = now - 95, now, 0
    snap.progress = {"step": 1000, "total": 1000, "loss": 0.0123}
    snap.log_tail = [f"epoch {i}: loss {1 / (i + 1):.4f}" for i in range(12)]
    snap.watcher = "kernel watcher: last look 1 s ago, every 1 s"
    records = [{"t": i, "step": i * 10, "loss": 2.0 / (i + 1)} for i in range(100)]
    curve = curve_svg(records)
    return {
        "text/plain": snapshot_text(snap),
        "text/html": snapshot_html(snap, curve=curve, rate="took 1:35"),
    }


def _bundles(project: Path) -> dict[str, dict[str, Any]]:
    runs = project / "runs"
    variant = _arm(runs, "wide", 64, [0.90, 0.91, 0.92])
    base = _arm(runs, "base", 8, [0.80, 0.81, 0.82])
    report = verify(variant, baselines=base, direction="max", project=project)
    make_run(runs, "r1", results={"test": {"accuracy": 0.8731}})
    paper = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_markdown_cell("We reach 87.3% accuracy.", id="typed")]
    )
    nbformat.write(paper, str(project / "paper.ipynb"))
    profile = load_profile("runpod", project)
    machine = Machine("runpod:pod-7", profile, "pod-7", "gpu.example", "gpu1", "runpod")
    gate = Gate(
        machine,
        ["exp-20261201-ab12"],
        {},
        [Check("no job running", True, "exp is finished"), Check("pulled", False, "never pulled")],
        time.time(),
    )
    return {
        "job": _job_bundle(),
        "results": results_bundle({"test": {"accuracy": 0.93}, "loss_curve": [1.0] * 200}),
        "verify": report._repr_mimebundle_(),
        "deliver": deliver("paper.ipynb", project)._repr_mimebundle_(),
        "teardown": {"text/plain": gate.text(), "text/html": gate_html(gate)},
    }


def _notebook(project: Path, bundles: dict[str, dict[str, Any]]) -> None:
    cells = []
    for kind, data in bundles.items():
        cell = nbformat.v4.new_code_cell(f"# {kind}", id=f"out-{kind}")
        cell.outputs = [nbformat.v4.new_output("display_data", data=data)]
        cells.append(cell)
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, str(project / NOTEBOOK))


def _trust(lab: LabServer, project: Path) -> None:
    """Sign the notebook with the server's own secret, as JupyterLab does for outputs it made."""
    env = {**os.environ, "JUPYTER_DATA_DIR": str(lab.log_path.parent / "data")}
    subprocess.run(
        [sys.executable, "-m", "jupyter", "trust", str(project / NOTEBOOK)],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )


def _theme(lab: LabServer, dark: bool) -> None:
    settings = (
        lab.log_path.parent
        / "config"
        / "lab"
        / "user-settings"
        / "@jupyterlab"
        / "apputils-extension"
        / "themes.jupyterlab-settings"
    )
    settings.parent.mkdir(parents=True, exist_ok=True)
    theme = "JupyterLab Dark" if dark else "JupyterLab Light"
    settings.write_text(f'{{"theme": "{theme}"}}')


def _look(page: Page, lab: LabServer, dark: bool, trusted: bool) -> dict[str, str]:
    """Open the notebook in one theme; check and shoot every output; return the colours of the
    job's state word and of the theme's success colour."""
    from playwright.sync_api import expect

    _theme(lab, dark)
    page.goto(lab.url(f"/lab/tree/{NOTEBOOK}"), timeout=OPEN_MS)
    expect(page.locator(".jp-NotebookPanel .jp-Notebook")).to_be_visible(timeout=OPEN_MS)
    expect(page.locator("body")).to_have_attribute(
        "data-jp-theme-light", "false" if dark else "true", timeout=OPEN_MS
    )
    assert page.locator(".jp-RenderedJSON").count() == 0, "a JSON tree rendered"
    colours = {}
    for kind, selector in KINDS.items():
        cell = page.locator(f".jp-Cell:has-text('# {kind}')")
        output = cell.locator(".jp-OutputArea-output").first
        expect(output).to_be_visible(timeout=OPEN_MS)
        assert output.get_attribute("data-mime-type") == "text/html", (kind, output.inner_html())
        shown = output.locator(selector).first
        expect(shown).to_be_visible()
        if kind in ("results", "verify"):
            expect(shown.locator("table")).to_be_visible()
        if kind == "job":
            curve = shown.locator(".rgt-curve img")
            expect(curve).to_be_visible()
            assert curve.evaluate("el => el.naturalWidth") > 0, "the curve's picture loads"
        if trusted:
            shown.scroll_into_view_if_needed()
            SCREENS.mkdir(parents=True, exist_ok=True)
            shown.screenshot(path=str(SCREENS / f"{kind}-{'dark' if dark else 'light'}.png"))
    state = page.locator(".jp-Cell:has-text('# job') .rgt-job b + span").first
    colours["state"] = str(state.evaluate("el => getComputedStyle(el).color"))
    colours["success"] = str(
        page.evaluate(
            """() => {
                const probe = document.createElement('span');
                probe.style.color = 'var(--jp-success-color1)';
                document.body.appendChild(probe);
                const seen = getComputedStyle(probe).color;
                probe.remove();
                return seen;
            }"""
        )
    )
    return colours


@pytest.mark.timeout(600)
def test_every_output_kind_renders_as_html_in_light_and_dark(
    project: Path, lab: LabServer, page: Page
) -> None:
    _notebook(project, _bundles(project))
    # Opened from elsewhere (untrusted): sanitised, still tables and a picture, no JSON tree.
    _look(page, lab, dark=False, trusted=False)
    _trust(lab, project)
    light = _look(page, lab, dark=False, trusted=True)
    dark = _look(page, lab, dark=True, trusted=True)
    # Trusted: the state word is painted with the theme's own success colour, in both themes.
    assert light["state"] == light["success"] and dark["state"] == dark["success"], (light, dark)
    assert light["success"] != dark["success"], "the themes differ in that colour"
    for kind in KINDS:
        for theme in ("light", "dark"):
            shot = SCREENS / f"{kind}-{theme}.png"
            assert shot.is_file() and 0 < shot.stat().st_size < 400_000, shot
