"""In a real browser: JupyterLab runs the watch-and-teardown example notebook on the ``local``
profile; the live status view reaches ``finished`` with a full progress bar, and approving the
teardown from the view records the decision in the project registry.

Screenshots go to the artifacts dir (``$RGT_TEST_ARTIFACTS``, else ``test-artifacts/``): one when
the job has finished, one after the approval, and one when the test fails.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rgt_jupyter.store.registry import Registry

from .browser import (  # noqa: F401 - the *_fixture names are the browser, lab and page fixtures
    LabServer,
    artifacts_dir,
    browser_fixture,
    copy_notebook,
    lab_fixture,
    page_fixture,
    screenshot,
)
from .conftest import wait_for

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

NOTEBOOK = "watch_and_teardown.ipynb"
JOB_NAME = "browser-demo"
SHOTS = "browser-watch"
TERMINAL = re.compile(r"^\s*(finished|failed|preempted|lost)\s*$")
ERROR_OUTPUT = "[data-mime-type='application/vnd.jupyter.error']"
# Milliseconds, as Playwright counts.
OPEN_MS = 90_000
RUN_MS = 120_000
JOB_MS = 180_000
UI_MS = 60_000


def _open_notebook(server: LabServer, tab: Page) -> None:
    """Open the notebook and wait until its kernel is connected and idle."""
    from playwright.sync_api import expect

    tab.goto(server.url(f"/lab/tree/{NOTEBOOK}"), timeout=OPEN_MS)
    expect(tab.locator(".jp-NotebookPanel .jp-Notebook")).to_be_visible(timeout=OPEN_MS)

    def kernel_ready() -> bool:
        for session in server.api("/api/sessions"):
            kernel = session.get("kernel") or {}
            if (
                session.get("path") == NOTEBOOK
                and kernel.get("execution_state") == "idle"
                and kernel.get("connections", 0) >= 1
            ):
                return True
        return False

    wait_for(kernel_ready, OPEN_MS / 1000, "the notebook's kernel to be connected and idle")
    indicator = tab.locator(".jp-NotebookPanel .jp-Notebook-ExecutionIndicator")
    expect(indicator).to_have_attribute("data-status", "idle", timeout=OPEN_MS)


def _run_all_cells(tab: Page) -> None:
    """Run → Run All Cells, through the menu bar."""
    tab.get_by_role("menuitem", name="Run", exact=True).click()
    tab.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()


def _status_view(tab: Page) -> Locator:
    """The ``%%remote_run`` cell's status view; fails at once when a cell raised instead."""
    from playwright.sync_api import expect

    tab.locator(f".rgt-status, {ERROR_OUTPUT}").first.wait_for(timeout=RUN_MS)
    errors = tab.locator(ERROR_OUTPUT)
    assert errors.count() == 0, "a cell raised:\n" + "\n".join(errors.all_inner_texts())
    view = tab.locator(".rgt-status")
    expect(view).to_have_count(1)
    return view


def _progress_width(bar: Locator) -> str:
    width: Any = bar.evaluate("el => el.style.width")
    return str(width)


class _Clock:
    """Prints how long each phase took (pytest shows it with a failure, or with ``-s``)."""

    def __init__(self) -> None:
        self.start = self.last = time.monotonic()

    def mark(self, what: str) -> None:
        now = time.monotonic()
        print(f"[{now - self.start:6.1f} s] {what} (+{now - self.last:.1f} s)")
        self.last = now


def _failure_evidence(tab: Page) -> None:
    """Best effort after a failure: a screenshot and the notebook's outputs as text."""
    try:
        path = screenshot(tab, f"{SHOTS}-failure")
        print(f"failure screenshot: {path}")
        outputs = tab.locator(".jp-OutputArea-output").all_inner_texts()
        print("---- notebook outputs ----\n" + "\n----\n".join(outputs))
    except Exception as exc:
        print(f"(no failure screenshot: {exc})")


@pytest.mark.timeout(600)
def test_status_view_finishes_and_teardown_approval_is_recorded(
    project: Path, lab: LabServer, page: Page
) -> None:
    from playwright.sync_api import expect

    for stale in artifacts_dir().glob(f"{SHOTS}-*.png"):
        stale.unlink()
    copy_notebook(NOTEBOOK, project)
    clock = _Clock()
    try:
        _open_notebook(lab, page)
        clock.mark("notebook open, kernel idle")
        _run_all_cells(page)

        view = _status_view(page)
        clock.mark("status view shown")
        state = view.locator(".rgt-state")
        expect(state).to_have_text(TERMINAL, timeout=JOB_MS)
        word = state.inner_text().strip()
        assert word == "finished", f"the job ended {word!r}:\n{view.inner_text()}"
        clock.mark("job finished")

        bar = view.locator(".rgt-progress .progress-bar")
        expect(bar).to_have_count(1)
        wait_for(lambda: _progress_width(bar) == "100%", UI_MS / 1000, "a full progress bar")
        view.scroll_into_view_if_needed()
        screenshot(page, f"{SHOTS}-finished")
        clock.mark("progress bar full")

        view.locator(".rgt-teardown").click()
        panel = view.locator(".rgt-teardown-panel")
        expect(panel).to_be_visible(timeout=UI_MS)
        approve = panel.locator(".rgt-approve")
        expect(approve).to_be_enabled(timeout=UI_MS)
        clock.mark("teardown panel open, Approve enabled")
        approve.click()
        expect(panel).to_contain_text("recorded: approve", timeout=UI_MS)
        panel.scroll_into_view_if_needed()
        screenshot(page, f"{SHOTS}-approved")
        clock.mark("approval recorded in the view")
    except BaseException:
        _failure_evidence(page)
        raise

    registry = Registry(project)
    approvals = wait_for(
        lambda: [d for d in registry.decisions() if d["decision"] == "approve"],
        30,
        "the approve decision in the registry",
    )
    assert len(approvals) == 1, registry.decisions()
    job = registry.get(JOB_NAME)
    assert job["profile"] == "local", job
    # The approval is about the machine this job ran on: its record names the job.
    assert job["id"] in json.dumps(approvals[0], default=str), approvals[0]
