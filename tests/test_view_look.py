"""The job view researchers look at: rate and ETA, a curve with axes, the newest log line in
view, colours from the theme, clocks that stop at the end, details folded, a bar that turns
green or red."""

from __future__ import annotations

import base64
import re
import time
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter import submit
from rgt_jupyter.jobs.snapshot import Snapshot
from rgt_jupyter.views.render import curve_svg, rate_text, snapshot_html, snapshot_text
from rgt_jupyter.widgets import StatusView

from .conftest import wait_for


def _snap(state: str, **fields: object) -> Snapshot:
    now = time.time()
    snap = Snapshot(job_id="exp-1", name="exp", state=state, host="gpu1", observed_at=now)
    snap.started_at = now - 125
    snap.heartbeat_age = 699.0
    snap.progress = {"step": 90, "total": 1000, "loss": 0.5}
    snap.log_tail = [f"line {i}" for i in range(30)]
    snap.watcher = "kernel watcher: last look 1 s ago, every 1 s"
    snap.audit = ["no NVIDIA GPU visible"]
    for key, value in fields.items():
        setattr(snap, key, value)
    return snap


def _records(n: int, step_per_s: float) -> list[dict[str, float]]:
    return [{"t": 1000.0 + i, "step": i * step_per_s, "loss": 1.0 / (i + 1)} for i in range(n)]


def test_rate_and_eta_come_from_the_newest_records() -> None:
    running = _snap("running")
    assert rate_text(_records(10, 10.0), running) == "10 steps/s · ETA 1:31"
    slow = _snap("running", progress={"step": 9, "total": 20})
    assert rate_text(_records(10, 0.5), slow).startswith("2 s/step · ETA 0:22")
    assert rate_text(_records(1, 10.0), running) == ""  # one record says nothing of a rate
    ended = _snap("finished", started_at=1000.0, ended_at=1083.0)
    assert rate_text(_records(10, 10.0), ended) == "took 1:23"


def test_the_view_is_compact_theme_aware_and_stops_its_clocks_at_the_end() -> None:
    running = snapshot_html(_snap("running"), rate="10 steps/s · ETA 1:31")
    assert "heartbeat 699.0s ago" in running and "ETA 1:31" in running
    ended = _snap("finished", ended_at=time.time() - 60, exit_code=0)
    for page in (snapshot_html(ended), snapshot_text(ended)):
        assert "heartbeat" not in page, "no clock counts after the end"
    page = snapshot_html(ended)
    assert not re.search(r"#[0-9a-fA-F]{3,6}(?![0-9a-fA-F])(?!\))", page.replace("var(", "")), page
    assert "var(--jp-success-color1" in page
    log = page.split("class='rgt-log'", 1)[1]
    assert "flex-direction:column-reverse" in log, "the box starts scrolled to the newest line"
    assert "line 29" in log
    details = page.split("<details", 1)[1]
    assert "kernel watcher" in details and "no NVIDIA GPU" in details
    assert "kernel watcher" not in page.split("<details", 1)[0]


def test_the_curve_has_axes_and_the_last_value() -> None:
    page = curve_svg(_records(50, 2.0))
    assert "loss: 0.02" in page
    # A picture (an untrusted notebook's sanitised view keeps it), its SVG inside.
    found = re.search(r"<img [^>]*src='data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)'", page)
    assert found, page
    svg = base64.b64decode(found.group(1)).decode()
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert labels == ["1", "0.02", "step 0", "98"], labels
    assert svg.count("<polyline") == 2, "the axes and the curve"


def test_the_bar_turns_green_or_red_at_the_end(project: Path) -> None:
    good = submit("from rgt_jupyter import job\njob.progress(1, 1)\n", project, name="good")
    bad = submit("raise SystemExit(3)\n", project, name="bad")
    wait_for(lambda: good.state == "finished" and bad.state == "failed", 120, "both ends")
    assert StatusView(good).bar.bar_style == "success"
    assert StatusView(bad).bar.bar_style == "danger"


def test_a_new_kernels_first_view_shows_the_last_known_progress_with_its_age(
    project: Path,
) -> None:
    from rgt_jupyter import find
    from rgt_jupyter.run.watch.watcher import Watcher

    program = (
        "import time\nfrom rgt_jupyter import job\n"
        "for i in range(1, 170):\n    job.progress(i, 1000, loss=1.0 / i)\n"
        "time.sleep(600)\n"
    )
    job = submit(program, project, name="long", grace_s=2.0)
    first = Watcher(min_interval=0.1, max_interval=0.2)
    try:
        first.subscribe(job, lambda snap: None)
        wait_for(lambda: _seen_step(project, job.id) >= 169, 120, "the watcher to keep it")
    finally:
        first.stop()
    # A new kernel: a fresh handle, a watcher that has not looked yet.
    again = find("long")
    later = Watcher(min_interval=30.0, max_interval=30.0)
    try:
        view = StatusView(again, watch=later)
        text = view.bundle()["text/plain"]
        assert "step 169/1000" in text, text
        assert "no progress reported yet" not in text
        assert re.search(r"as last seen \d+ s ago", text), text
    finally:
        later.stop()
        job.stop()
        wait_for(lambda: job.state != "running", 120, "the stop")


def _seen_step(project: Path, job_id: str) -> float:
    from rgt_jupyter.store.registry import Registry

    seen = Registry(project).last_seen(job_id)
    return float(((seen or {}).get("progress") or {}).get("step") or 0)


def test_each_look_shows_what_it_promises() -> None:
    curve = curve_svg(_records(50, 2.0))
    pages = {
        look: snapshot_html(_snap("running"), curve=curve, rate="1.0 step/s", look=look)
        for look in ("minimal", "compact", "full")
    }
    assert "rgt-log" not in pages["minimal"] and "<img" not in pages["minimal"]
    assert "<details" not in pages["minimal"] and "90/1000" in pages["minimal"]
    assert "rgt-log" in pages["compact"] and "<img" in pages["compact"]
    assert "<details style" in pages["compact"] and "<details open" not in pages["compact"]
    assert "<details open" in pages["full"] and "max-height:24em" in pages["full"]
    assert len(pages["minimal"]) < len(pages["compact"]) < len(pages["full"])
    # A failure is never folded away, whatever the look.
    failed = _snap("failed", diagnosis="CUDA out of memory: lower the batch size")
    assert "CUDA out of memory" in snapshot_html(failed, ["Traceback", "  boom"], look="minimal")
    assert "boom" in snapshot_html(failed, ["Traceback", "  boom"], look="minimal")


def test_the_job_view_trait_sets_the_look_of_new_views(ip: Any, project: Path) -> None:
    job = submit("print('a line')\n", project, name="looked")
    wait_for(lambda: job.state == "finished", 120, "the job to end")
    try:
        ip.run_line_magic("config", "RgtMagics.job_view = 'minimal'")
        small = StatusView(job)
        assert small.look == "minimal" and "rgt-log" not in small.bundle()["text/html"]
        ip.run_line_magic("config", "RgtMagics.job_view = 'full'")
        assert "<details open" in StatusView(job).bundle()["text/html"]
        ip.run_line_magic("config", "RgtMagics.job_view = 'tiny'")  # %config logs the error
        assert StatusView(job).look == "full", "a wrong value changes nothing"
        with pytest.raises(ValueError, match="one of minimal, compact, full"):
            StatusView(job, look="tiny")
    finally:
        ip.run_line_magic("config", "RgtMagics.job_view = 'compact'")
    assert StatusView(job).look == "compact"
