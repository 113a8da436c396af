"""Budgets: at a job's budget (its run time at the machine's price, every attempt counted) or
its machine's (``rgt up --budget``), the job's agent tells it to save and stop as a preemption
does: it ends ``preempted`` with reason ``budget``, its checkpoint kept, and a resume needs a
larger budget. Nothing here stops a meter: that stays behind the teardown gate."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rgt_jupyter import submit
from rgt_jupyter.cli import main as rgt_main
from rgt_jupyter.errors import UsageError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.store.registry import Registry

from .conftest import control_json
from .fakeclouds import RunPodFake
from .machines import POD, RENTED

#: A step every 0.2 s, each checkpointed; saves and ends at a preemption signal.
STEPS = """\
import time
import rgt_jupyter.job as job
state = job.load_latest()
start = state["step"] if state else 0
for step in range(start + 1, 400):
    time.sleep(0.2)
    job.save_checkpoint({"step": step}, step, keep=1)
    if job.preempted() or step == start + 20 and job.is_resume():
        break
job.save_results({"start": start, "last": step})
"""


def test_a_job_saves_and_stops_at_its_budget_and_resumes_only_with_more(project: Path) -> None:
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "rented.toml").write_text("cost_per_hour = 3600.0\n" + RENTED)  # $1 a second
    job = submit(LaunchRequest(program=STEPS, name="capped", profile="rented", budget=3), project)
    assert job.spec.budgets == [{"of": "job", "usd": 3.0, "rate": 3600.0, "spent_usd": 0.0}]
    assert job.wait(120) == "preempted", job.log()
    ended = control_json(job, "exit.json")
    assert ended and ended["reason"] == "budget" and ended["budget"]["spent_usd"] >= 3.0
    snap = job.snapshot()
    assert snap.failure == "budget" and "reached its budget" in (snap.diagnosis or "")
    results = json.loads((Path(job.spec.out_dir) / "results.json").read_text())
    assert results["start"] == 0 and results["last"] >= 1  # it saved where it stopped
    assert "budget of $3.00 is reached" in job.log() or "budget" in (snap.diagnosis or "")
    with pytest.raises(UsageError, match=r"already cost \$\d+\.\d\d of its \$3\.00 budget"):
        job.resume()
    assert Registry(project).get("capped")["id"] == job.id
    more = job.resume(budget=1000)
    assert more.wait(120) == "finished", more.log()
    again = json.loads((Path(more.spec.out_dir) / "results.json").read_text())
    assert again["start"] == results["last"]  # on from the checkpoint saved at the budget


@pytest.fixture
def dear_pod(project: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunPodFake]:
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "pod.toml").write_text(POD)
    with RunPodFake(gpu_rate=360.0) as fake:  # 10 cents a second
        monkeypatch.setenv("RUNPOD_API_KEY", fake.api_key)
        monkeypatch.setenv("RGT_RUNPOD_API_URL", fake.url)
        yield fake


def test_a_machine_budget_stops_its_jobs_and_launches_no_more(
    project: Path, dear_pod: RunPodFake, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rgt_main(["up", "pod", "--ack-clocks", "--budget", "1.5"]) == 0
    assert "$1.50: counted at the price the platform reports" in capsys.readouterr().out
    assert not dear_pod.calls("POST", "/pods")  # a plan only
    assert rgt_main(["up", "pod", "--yes", "--budget", "1.5"]) == 0
    job = submit(LaunchRequest(program=STEPS, name="onpod", profile="pod"), project)
    assert [b["of"] for b in job.spec.budgets] == ["machine"]
    assert job.wait(120) == "preempted", job.log()
    ended = control_json(job, "exit.json")
    assert ended and ended["reason"] == "budget" and ended["budget"]["of"] == "machine"
    assert not dear_pod.calls("DELETE")  # the meter is the gate's to stop
    with pytest.raises(UsageError, match="nothing more is launched on it"):
        submit(LaunchRequest(program=STEPS, name="more", profile="pod"), project)
