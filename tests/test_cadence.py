"""Checkpoint cadence advice: Daly's optimum from the save time the job measured and the
profile's reclaim rate, said at launch and in the view when the job saves far from it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rgt_jupyter import submit
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.cadence import advice, daly_interval, launch_note
from rgt_jupyter.views.render import snapshot_html, snapshot_text

from .conftest import control_json, wait_for
from .machines import RENTED


def test_the_optimum_is_dalys_higher_order_estimate() -> None:
    c, m = 60.0, 86400.0
    young = math.sqrt(2 * c * m)
    assert daly_interval(c, m) == pytest.approx(
        young * (1 + math.sqrt(c / (2 * m)) / 3 + c / (2 * m) / 9) - c
    )
    assert young - c < daly_interval(c, m) < young  # near Young's for a short save
    assert daly_interval(3 * m, m) == m  # a save longer than twice the MTBF: once per MTBF
    with pytest.raises(ValueError):
        daly_interval(0.0, m)


def _saves(save_s: float, every_s: float, n: int = 6) -> dict[str, object]:
    return {"saves": [{"at": 1000 + i * every_s, "save_s": save_s, "step": i} for i in range(n)]}


def test_advice_speaks_only_when_the_cadence_is_far_from_it() -> None:
    spot = {"grace_s": 0.0, "reclaims_per_day": 1.0}  # a reclaim a day, none announced
    best = daly_interval(60.0, 86400.0)
    assert advice(_saves(60.0, best), spot) is None  # at the optimum: nothing to say
    rare = advice(_saves(60.0, 6 * 3600.0), spot)
    assert rare and "loses 3.0 h of work on average" in rare and "save about every 53 min" in rare
    often = advice(_saves(60.0, 300.0), spot)
    assert often and "20 % of the run spent saving" in often
    assert advice(_saves(60.0, 300.0, n=2), spot) is None  # too few saves timed yet
    assert advice(_saves(60.0, 300.0), {"grace_s": 0.0}) is None  # no reclaim rate known
    # an announced reclaim with time to save: frequent saves only cost time
    graced = advice(_saves(20.0, 60.0), {"grace_s": 120.0, "reclaims_per_day": 1.0})
    assert graced and "announced 120 s ahead, enough to save then" in graced
    assert advice(_saves(20.0, 6 * 3600.0), {"grace_s": 120.0, "reclaims_per_day": 1.0}) is None
    note = launch_note(spot)
    assert note and "about every 24.0 h" in note and "a 60 s save: every 53 min" in note
    assert launch_note({"grace_s": 30.0}) is None


#: Saves rarely for its (scaled-down) reclaim rate: one checkpoint a second.
RARE = """\
import os, time
import rgt_jupyter.job as job
for step in range(1, 400):
    job.save_checkpoint({"step": step}, step, keep=1)
    if os.path.exists(os.path.join(os.environ["RGT_OUT"], "..", "go")) or job.preempted():
        break
    time.sleep(1.0)
"""


def test_the_view_advises_a_job_that_saves_far_too_rarely(project: Path) -> None:
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True)
    # A reclaim every 4 s (a day scaled down to seconds), announced with no time to save.
    spot = "\n[spot]\navailable = true\ngrace_s = 0.0\nreclaims_per_day = 21600.0\n"
    (profiles / "rented.toml").write_text(RENTED + spot)
    job = submit(LaunchRequest(program=RARE, name="rare", profile="rented"), project)
    assert job.spec.spot == {"grace_s": 0.0, "reclaims_per_day": 21600.0}
    assert any("spot reclaims come about every 4 s" in n for n in job.notices)
    wait_for(lambda: len((control_json(job, "cadence.json") or {}).get("saves", [])) >= 4, 120)
    snap = job.snapshot()
    assert snap.cadence and "checkpoint cadence: a save takes" in snap.cadence
    assert "loses 0 s of work on average" not in snap.cadence and "Young/Daly" in snap.cadence
    assert snap.cadence in snapshot_text(snap) and "rgt-cadence" in snapshot_html(snap)
    (Path(job.spec.out_dir).parent / "go").write_text("")
    assert job.wait(120) == "finished", job.log()
