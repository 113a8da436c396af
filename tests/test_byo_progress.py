"""Scripts written for a laptop, unchanged: their tqdm bars and TensorBoard scalars are the
job's progress in the view; a class defined in the cell pickles as under ``python file.py``;
a save that raised leaves nothing that a pull would take for a checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.views.render import progress_text

from .byo import kernel, rgt_run

TQDM = """\
import time
from tqdm import tqdm

bar = tqdm(range(50), desc="train")
for step in bar:
    time.sleep(0.02)
    bar.set_postfix(loss=1.0 / (step + 1))
"""

TENSORBOARD = """\
import os, time
from torch.utils.tensorboard import SummaryWriter

writer = SummaryWriter(os.path.join(os.environ["RGT_OUT"], "tb"))
for step in range(1, 31):
    writer.add_scalar("train/loss", 1.0 / step, step)
    writer.flush()
    time.sleep(0.05)
writer.close()
"""

REPORTS_ITSELF = """\
import time
from tqdm import tqdm
import rgt_jupyter.job as job

for step in tqdm(range(20)):
    time.sleep(0.1)
job.progress(7, 9, acc=0.5)
time.sleep(2.5)
for step in tqdm(range(40)):
    pass
"""


def _finished(project: Path, program: str, name: str) -> Job:
    job = submit(LaunchRequest(program=program, name=name), project)
    assert job.wait(120) == "finished", job.log()
    return job


def test_a_tqdm_bar_is_the_progress_of_a_script_that_reports_none(project: Path) -> None:
    (project / "train.py").write_text(TQDM)
    rgt_run(project, "train.py", "bar")()
    job = Job.from_registry("bar", project)
    assert job.wait(120) == "finished", job.log()
    snap = job.snapshot(log_lines=0)
    assert snap.progress is not None, job.log()
    assert (snap.progress["step"], snap.progress["total"]) == (50, 50)
    assert snap.progress["loss"] == pytest.approx(0.02)
    assert snap.progress["source"] == "tqdm"
    assert progress_text(snap.progress) == "step 50/50 (100%)  loss=0.02  (from tqdm)"
    steps = [r["step"] for r in job.progress_records()]
    assert steps == sorted(steps) and len(steps) >= 2  # live, not only at the end


def test_tensorboard_scalars_are_the_progress_of_a_script_that_reports_none(
    project: Path,
) -> None:
    job = _finished(project, TENSORBOARD, "tb")
    snap = job.snapshot(log_lines=0)
    assert snap.progress is not None, job.log()
    assert snap.progress["step"] == 30
    assert snap.progress["train/loss"] == pytest.approx(1.0 / 30)
    assert snap.progress["source"] == "tensorboard"


def test_job_progress_wins_over_what_is_inferred(project: Path) -> None:
    job = _finished(project, REPORTS_ITSELF, "own")
    records = job.progress_records()
    assert records[-1]["step"] == 7 and records[-1]["total"] == 9, records
    assert "source" not in records[-1]
    own = next(i for i, r in enumerate(records) if "source" not in r)
    assert records[own]["step"] == 7
    assert any(r.get("source") == "tqdm" for r in records[:own])  # before the job's own record
    assert not any(r.get("source") for r in records[own:])  # the second bar is not read


CELL = """%%remote_run --name net
import os
import torch
import rgt_jupyter.job as job


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


torch.manual_seed(0)
model = Net()
torch.save(model, os.path.join(os.environ["RGT_OUT"], "model.pt"))
try:
    torch.save({"step": 1, "hook": lambda: 0}, os.path.join(job.ckpt_dir(), "broken.pt"))
except Exception as exc:
    print("save failed:", type(exc).__name__)
job.save_results({"out": model(torch.ones(1, 4)).tolist()})
"""

NOTEBOOK = """\
import torch, json


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


run = %pull net
print("VERIFIED=" + str(run.verified))
# The user's own file, from a run they trust: a whole pickled model.
loaded = torch.load(run.outputs / "model.pt", weights_only=False)
print("TYPE=" + type(loaded).__module__ + "." + type(loaded).__name__)
print("SAME=" + str(loaded(torch.ones(1, 4)).tolist() == run.results["out"]))
held = sorted(p.name for p in run.checkpoints.iterdir()) if run.checkpoints.exists() else []
print("FILES=" + json.dumps(held))
"""


def test_a_class_defined_in_the_cell_pickles_and_loads_in_the_notebook(
    project: Path, tmp_path: Path
) -> None:
    with kernel(project, tmp_path) as run:
        run(CELL)
        job = Job.from_registry("net", project)
        assert job.wait(120) == "finished", job.log()
        assert "save failed:" in job.log(), job.log()
        out = run(NOTEBOOK, timeout=120)
    assert "TYPE=__main__.Net" in out, out
    assert "SAME=True" in out, out
    assert "VERIFIED=True" in out, out
    # The save that raised left no file under its name: nothing to take for a checkpoint.
    assert "broken.pt" not in out, out
    assert not list(Path(job.spec.ckpt_dir).glob("*broken.pt*"))
