"""The watcher and the live view: coalesced updates, stop at the end, no blocking."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from rgt_jupyter import submit
from rgt_jupyter.jobs.records import clean_log
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.jobs.snapshot import Snapshot
from rgt_jupyter.jobs.spec import JobSpec
from rgt_jupyter.run.watch.watcher import Watcher
from rgt_jupyter.widgets import StatusView

from .conftest import wait_for


class ChattyJob:
    """A stand-in whose progress changes on every observation (to test coalescing only)."""

    id = name = "chatty"
    spec = JobSpec(job_id="chatty", name="chatty", host="here")

    def __init__(self, end_after: int, project: Path) -> None:
        self.project = project
        self.calls = 0
        self.end_after = end_after

    def snapshot(self) -> Snapshot:
        self.calls += 1
        state = "finished" if self.calls >= self.end_after else "running"
        return Snapshot(
            "chatty", "chatty", state, "here", time.time(), progress={"step": self.calls}
        )


def test_updates_are_coalesced_to_four_per_second(tmp_path: Path) -> None:
    watcher = Watcher(min_interval=0.01, max_interval=0.05, max_rate=4.0)
    job = ChattyJob(end_after=10**9, project=tmp_path)
    seen: list[float] = []
    key = watcher.subscribe(job, lambda snap: seen.append(time.monotonic()))  # type: ignore[arg-type]
    # Every observation changes the progress; however often (or rarely, on a busy machine) the
    # watcher looks, the view hears of it at most 4 times a second.
    wait_for(lambda: job.calls > 40 and len(seen) >= 3, 120, "40 looks and 3 updates")
    watcher.unsubscribe(key)
    assert len(seen) < job.calls  # the looks were coalesced ...
    gaps = [b - a for a, b in zip(seen, seen[1:], strict=False)]
    assert min(gaps) >= 0.24  # ... to at most one update a quarter second


def test_subscription_ends_with_the_job(tmp_path: Path) -> None:
    watcher = Watcher(min_interval=0.01, max_interval=0.02)
    job = ChattyJob(end_after=5, project=tmp_path)
    states: list[str] = []
    watcher.subscribe(job, lambda snap: states.append(snap.state))  # type: ignore[arg-type]
    wait_for(lambda: states and states[-1] == "finished", 10, "the final update")
    calls = job.calls
    time.sleep(0.3)
    assert job.calls == calls  # no polling after the end
    wait_for(lambda: watcher._thread is None, 5, "the watcher thread to stop")


def test_status_view_follows_a_real_job(project: Path) -> None:
    go = project / "go"
    program = (
        "import os, time, rgt_jupyter.job as job\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    time.sleep(0.1)\n"
        "for i in range(1, 9):\n"
        "    job.progress(i, 8)\n"
        "    print('line', i, flush=True)\n"
        "    time.sleep(0.25)\n"
    )
    threads = threading.active_count()
    job = submit(LaunchRequest(program=program, name="view"), project)
    view = StatusView(job)  # built while the job cannot end: the view does not wait for it
    assert "finished" not in view.state.value
    go.touch()
    bundle = view.bundle()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == view.widget.model_id
    wait_for(lambda: "finished" in view.state.value, 60, "the view to show the end")
    assert "step 8/8" in view.body.value and "line 8" in view.body.value
    assert (view.bar.value, view.bar.max) == (8, 8)
    assert threading.active_count() - threads < 10  # the watcher's, not one per job or update


def test_log_cleaning() -> None:
    raw = (
        b"plain\n\x1b[31mred\x1b[0m\nprogress 10%\rprogress 50%\rprogress 100%\n"
        + b"x" * 1000
        + b"\n\xff\xfe bad bytes\n"
    )
    lines = clean_log(raw, 10)
    assert lines[0] == "plain" and lines[1] == "red" and lines[2] == "progress 100%"
    assert lines[3].startswith("x" * 400) and "more characters" in lines[3]
    assert lines[4].endswith("bad bytes") and "\ufffd" in lines[4]
    assert clean_log(raw, 2) == lines[-2:]
