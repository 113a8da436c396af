"""The training-debug layer in real jobs (torch on CPU, launched like ``%%remote_run``): one job
plants one bug of each class and each is named with its cause in the job's findings and its
view; the same job without the bugs raises no finding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.errors import SmokeFailed
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.store.registry import Registry
from rgt_jupyter.views.render import snapshot_html, snapshot_text
from rgt_jupyter.widgets import StatusView

from .conftest import control_json, wait_for


def _launch(project: Path, program: str, name: str, smoke: bool | None = None) -> Job:
    job = submit(LaunchRequest(program=program, name=name, smoke=smoke), project)
    assert isinstance(job, Job)
    return job


#: Ten small training loops, each with its bug planted when ``BUG`` is set.
PROGRAM = """\
import time
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset
from torch.utils.data import TensorDataset, get_worker_info
import rgt_jupyter.job as job
from rgt_jupyter.integrations.debug import audit_resume, watch_model
from rgt_jupyter.integrations.debug_data import check_loader, data_seconds, timed_data

BUG = {bug}
mse = torch.nn.functional.mse_loss


def train(frozen=False, lr=0.05, zero_grad_late=False, overflow=False, amp=False):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    if frozen:
        model[0].requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**120 if overflow else 2.0**16)
    scaler = scaler if amp else None
    watch = watch_model(model, opt, scaler=scaler, every=10)
    x = torch.randn(64, 8)
    y = x.sum(1, keepdim=True)
    for step in range(1, 31):
        if not zero_grad_late:
            opt.zero_grad()
        loss = mse(model(x), y) * (1e20 if overflow else 1.0)
        if scaler is None:
            loss.backward()
            if zero_grad_late:
                opt.zero_grad()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        watch.loss(loss)
    watch.remove()


train(frozen=BUG)
train(zero_grad_late=BUG)
train(lr=1e3 if BUG else 0.05)
train(overflow=BUG, amp=True)


class Augmented(Dataset):
    def __init__(self):
        self.rng = np.random.default_rng(0) if BUG else None

    def __len__(self):
        return 32

    def __getitem__(self, i):
        pixels = np.clip(0.5 + 0.1 * (self.rng or np.random).normal(size=(3, 4, 4)), 0, 1)
        return torch.tensor(pixels, dtype=torch.float32) * (255.0 if BUG else 1.0)


class Stream(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if BUG or info is None else (info.id, info.num_workers)
        for i in range(start, 32, step):
            yield torch.full((4,), i / 32)


check_loader(DataLoader(Augmented(), batch_size=4, num_workers=2))
check_loader(DataLoader(Stream(), batch_size=4, num_workers=2))

data = TensorDataset(torch.rand(32, 1))
sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True)
loader = DataLoader(data, batch_size=4, sampler=sampler)
check_loader(loader)
for epoch in range(2):
    if not BUG:
        sampler.set_epoch(epoch)
    for _ in loader:
        pass

model = torch.nn.Linear(4, 1)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for step in range(1, 4):
    opt.zero_grad()
    model(torch.randn(8, 4)).pow(2).mean().backward()
    opt.step()
    saved = {{"model": model.state_dict(), "step": step}}
    if not BUG:
        saved["optimizer"] = opt.state_dict()
    job.save_checkpoint(saved, step)
state = job.load_latest()
model = torch.nn.Linear(4, 1)
model.load_state_dict(state["model"])
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
if "optimizer" in state:
    opt.load_state_dict(state["optimizer"])
audit_resume(state, model=model, optimizer=opt, step=int(state["step"]))


class Slow(Dataset):
    def __len__(self):
        return 16 * 16

    def __getitem__(self, i):
        if BUG:
            time.sleep(0.01)
        return torch.randn(32), torch.randn(1)


model = torch.nn.Sequential(torch.nn.Linear(32, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Slow(), batch_size=16)
for step, (x, y) in enumerate(timed_data(loader), 1):
    opt.zero_grad()
    loss = mse(model(x), y)
    loss.backward()
    opt.step()
    job.progress(step, 16, loss=loss.item(), data_s=data_seconds(loader))
"""

#: The planted bugs, by the finding that names each, with a word of its cause.
CAUGHT = {
    "frozen_params": "frozen",
    "grads_cleared": "zero_grad",
    "lr_too_high": "learning rate is far too high",
    "scaler_collapse": "fp16 overflow",
    "worker_rng": "dataset's __init__",
    "input_range": "0-255 pixel values",
    "unsharded_iterable": "not sharded",
    "sampler_epoch": "set_epoch",
    "resume_optimizer": "leaves out optimizer.state_dict()",
    "data_bound": "DataLoader is slower than the step",
}


def test_planted_training_bugs_are_named_in_real_jobs_and_their_controls_are_quiet(
    project: Path,
) -> None:
    buggy = _launch(project, PROGRAM.format(bug=True), "bugs")
    clean = _launch(project, PROGRAM.format(bug=False), "clean")
    assert buggy.wait(240) == "finished", buggy.log()
    assert clean.wait(240) == "finished", clean.log()

    found = {f["kind"]: f for f in (control_json(buggy, "findings.json") or {})["findings"]}
    for kind, cause in CAUGHT.items():
        assert kind in found, (kind, sorted(found), buggy.log())
        assert cause in found[kind]["cause"], found[kind]
    assert control_json(clean, "findings.json") is None, control_json(clean, "findings.json")

    snap = buggy.snapshot()
    assert {f["kind"] for f in snap.findings} >= set(CAUGHT)
    assert [f["kind"] for f in snap.findings if f.get("source") == "curve"] == ["data_bound"]
    text = snapshot_text(snap)
    assert "training findings:" in text and "frozen_params" in text, text
    assert "rgt-findings" in snapshot_html(snap)
    assert clean.snapshot().findings == []
    assert "training findings" not in snapshot_text(clean.snapshot())
    # the pulled run keeps them, beside its provenance
    pulled = json.loads((Path(buggy.pull().path) / "run.json").read_text())
    assert {f["kind"] for f in pulled["findings"]} >= set(CAUGHT)
    assert json.loads((Path(clean.pull().path) / "run.json").read_text())["findings"] == []


#: A loss that falls, spikes once at step 30 (a bad batch), then falls on; and a resume from a
#: checkpoint that holds only the weights.
SPIKE = """\
import math, random
import rgt_jupyter.job as job
from rgt_jupyter.integrations.debug import audit_resume
audit_resume({"model": {}, "step": 0}, optimizer=object(), step=0)
noise = random.Random(0)
for step in range(1, 61):
    loss = 2 * math.exp(-step / 15) + 0.05 + 0.01 * noise.random()
    job.progress(step, 60, loss=40.0 if step == 30 else loss)
"""


def test_the_live_view_shows_the_probes_and_the_loss_curves_findings(project: Path) -> None:
    job = _launch(project, SPIKE, "spike")
    assert job.wait(120) == "finished", job.log()
    view = StatusView(job)
    wait_for(lambda: "finished" in view.state.value, 60, "the view to show the end")
    wait_for(lambda: "rgt-findings" in view.body.value, 60, "the findings in the view")
    assert "loss_spike (step 30)" in view.body.value
    assert "a bad batch" in view.body.value
    assert "resume_optimizer" in view.body.value  # findings.json, read with the watcher's look
    probed, curve = job.snapshot().findings
    assert probed["kind"] == "resume_optimizer"
    assert (curve["kind"], curve["step"], curve["source"]) == ("loss_spike", 30, "curve")


#: A regression that overfits one batch in the CPU smoke run before it trains, with its LR as
#: planted.
OVERFIT = """\
import torch
import rgt_jupyter.job as job
from rgt_jupyter.integrations.debug import overfit_one_batch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr={lr})
x = torch.randn(16, 8)
batch = (x, x.sum(1, keepdim=True))
mse = lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1])
if job.is_smoke():
    overfit_one_batch(model, opt, batch, mse, steps=60)
else:
    job.save_results({{"trained": True}})
"""


def test_the_overfit_smoke_blocks_a_model_that_cannot_learn_before_launch(project: Path) -> None:
    with pytest.raises(SmokeFailed) as failed:
        _launch(project, OVERFIT.format(lr=0.0), "broken", smoke=True)
    assert "cannot overfit one batch" in str(failed.value)
    assert "Usual causes: (1) a learning rate far too low, 0" in str(failed.value)
    assert Registry(project).jobs() == []  # nothing was launched
    job = _launch(project, OVERFIT.format(lr=1e-2), "ok", smoke=True)
    assert job.wait(120) == "finished", job.log()
