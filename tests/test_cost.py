"""Cost on screen: a job on a profile with a price shows what it has cost so far in its view, in
``job.snapshot().cost`` and in ``rgt jobs`` (its run time at the profile's price), also once it
has ended and is listed from the record alone."""

from __future__ import annotations

import json
from pathlib import Path

from rgt_jupyter import submit
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.views.render import snapshot_text

from .conftest import rgt, wait_for
from .machines import RENTED

WORKS = """\
import os, time
open(os.path.join(os.environ["RGT_OUT"], "started"), "w").close()
time.sleep(3)
print("done")
"""


def test_a_priced_profile_shows_the_cost_so_far_live_and_after_the_end(project: Path) -> None:
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "rented.toml").write_text("cost_per_hour = 2.5\n" + RENTED)
    job = submit(LaunchRequest(program=WORKS, name="priced", profile="rented"), project)
    out = Path(job.spec.out_dir)
    wait_for(lambda: (out / "started").exists(), 60, "the job to start")
    live = job.snapshot()
    assert live.cost is not None and "for this job" in live.cost and "$2.50/h" in live.cost
    assert "cost: $" in snapshot_text(live)
    assert job.wait(60) == "finished"
    ended = job.snapshot()
    assert ended.elapsed is not None and ended.elapsed >= 3
    listed = json.loads(rgt("jobs", "--json", cwd=project).stdout)["jobs"]
    row = next(r for r in listed if r["name"] == "priced")
    assert row["settled"]  # read from the record: the host was not asked
    assert row["cost_usd"] is not None
    assert abs(row["cost_usd"] - ended.elapsed / 3600 * 2.5) < 1e-3
    table = rgt("jobs", cwd=project).stdout.splitlines()
    assert "COST" in table[0].split()
    assert any("priced" in line and "$0.00" in line for line in table[1:])

    free = submit(LaunchRequest(program="print(1)\n", name="free"), project)  # local: no price
    assert free.wait(60) == "finished" and free.snapshot().cost is None
    listed = json.loads(rgt("jobs", "--json", cwd=project).stdout)["jobs"]
    assert next(r for r in listed if r["name"] == "free")["cost_usd"] is None
