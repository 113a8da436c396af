"""The training-debug probes in process, on real torch (CPU): one planted bug per class is
named with its cause, and the same loop without the bug raises no finding."""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import (
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    TensorDataset,
    get_worker_info,
)

import rgt_jupyter.job as job
from rgt_jupyter.integrations.debug import (
    OverfitFailed,
    audit_resume,
    check_dist_env,
    overfit_one_batch,
    watch_model,
)
from rgt_jupyter.integrations.debug_data import check_loader, data_seconds, timed_data
from rgt_jupyter.jobs.curves import curve_findings, data_findings
from rgt_jupyter.jobs.snapshot import Snapshot
from rgt_jupyter.remote.probe import probe
from rgt_jupyter.views.render import snapshot_html, snapshot_text


@pytest.fixture(autouse=True)
def fresh_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty findings record and a control dir of its own, per test."""
    monkeypatch.setattr(job, "_findings", [])
    monkeypatch.setattr(job, "_finding_keys", set())
    monkeypatch.setattr(job, "_findings_loaded", [False])
    monkeypatch.setenv("RGT_CONTROL_DIR", str(tmp_path))
    monkeypatch.delenv("RANK", raising=False)
    return tmp_path


def kinds() -> list[str]:
    return sorted({f["kind"] for f in job.findings()})


def train(bug: str = "", steps: int = 30) -> float:
    """A small regression, with one bug planted."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    if bug == "frozen":
        model[0].requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=1e3 if bug == "lr" else 0.05, momentum=0.9)
    scaler = None
    if bug == "overflow":
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**120)
    elif bug == "scaler":
        scaler = torch.amp.GradScaler("cpu")
    if bug == "eval":
        model.append(torch.nn.Dropout(0.1))
        model.eval()
    watch = watch_model(model, opt, scaler=scaler, every=10)
    x = torch.randn(64, 8)
    y = x.sum(1, keepdim=True)
    loss = torch.zeros(())
    for _ in range(steps):
        if bug != "zero_grad":
            opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        if bug == "overflow":
            loss = loss * 1e20  # an overflow on every step
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            if bug == "zero_grad":
                opt.zero_grad()  # between backward and step: the gradients are gone
            opt.step()
        watch.loss(loss)
    watch.remove()
    return float(loss.detach())


@pytest.mark.parametrize(
    ("bug", "kind", "cause"),
    [
        ("frozen", "frozen_params", "frozen"),
        ("zero_grad", "grads_cleared", "zero_grad"),
        ("lr", "lr_too_high", "learning rate is far too high"),
        ("overflow", "scaler_collapse", "fp16 overflow"),
        ("eval", "eval_mode", "model.eval()"),
    ],
)
def test_a_planted_training_bug_is_named_with_its_cause(bug: str, kind: str, cause: str) -> None:
    train(bug)
    found = {f["kind"]: f for f in job.findings()}
    assert kind in found, found
    assert cause in found[kind]["cause"]
    assert found[kind]["fix"] and found[kind]["seen"]


@pytest.mark.parametrize("variant", ["", "scaler"])
def test_the_same_training_without_a_bug_raises_no_finding(variant: str) -> None:
    assert train(variant) < 1.0
    assert kinds() == []


def test_a_finding_names_the_step_it_first_appears_and_is_written_once(
    fresh_findings: Path,
) -> None:
    train("lr")
    found = {f["kind"]: f for f in job.findings()}
    assert found["lr_too_high"]["step"] == 1
    assert "nonfinite_loss" in found and found["nonfinite_loss"]["step"] >= 1
    on_disk = json.loads((fresh_findings / "findings.json").read_text())["findings"]
    assert [f["kind"] for f in on_disk] == [f["kind"] for f in job.findings()]
    assert {"kind", "seen", "cause", "fix", "step"} <= set(on_disk[0])


def test_a_learning_rate_of_zero_is_a_parameter_that_never_changes() -> None:
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    watch_model(model, opt, every=10)
    for _ in range(5):
        opt.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()
    assert kinds() == ["no_update"]
    assert "learning rate of 0" in job.findings()[0]["cause"]


class Augmented(Dataset):
    """Each sample plus random noise: from a generator made in ``__init__`` (``shared``, copied
    into every worker alike) or from the worker's own numpy state."""

    def __init__(self, shared: bool) -> None:
        self.rng = np.random.default_rng(0) if shared else None

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        noise = self.rng.normal(size=4) if self.rng is not None else np.random.normal(size=4)
        return torch.full((4,), i / 64) + torch.tensor(noise, dtype=torch.float32)


class Stream(IterableDataset):
    def __init__(self, sharded: bool) -> None:
        self.sharded = sharded

    def __iter__(self) -> Any:
        info = get_worker_info()
        start, step = (info.id, info.num_workers) if self.sharded and info else (0, 1)
        for i in range(start, 64, step):
            yield torch.full((4,), i / 64)


@pytest.mark.parametrize("bug", [False, True])
def test_workers_that_draw_the_same_augmentation(bug: bool) -> None:
    out = check_loader(DataLoader(Augmented(shared=bug), batch_size=4, num_workers=2))
    assert kinds() == (["worker_rng"] if bug else [])
    if bug:
        assert "dataset.rng" in out["workers_same_rng"]
        assert "dataset's __init__" in job.findings()[0]["cause"]


@pytest.mark.parametrize("bug", [False, True])
def test_an_iterable_dataset_not_sharded_across_workers(bug: bool) -> None:
    out = check_loader(DataLoader(Stream(sharded=not bug), batch_size=4, num_workers=2))
    assert kinds() == (["unsharded_iterable"] if bug else [])
    assert (out["duplicates"] > 0) is bug


@pytest.mark.parametrize("scale", [1.0, 255.0])
def test_inputs_in_the_pixel_range(scale: float) -> None:
    data = TensorDataset(torch.rand(64, 3, 4, 4) * scale, torch.zeros(64))
    check_loader(DataLoader(data, batch_size=8))
    assert kinds() == (["input_range"] if scale > 1 else [])
    if scale > 1:
        assert "0-255 pixel values" in job.findings()[0]["cause"]


@pytest.mark.parametrize("set_epoch", [True, False])
def test_a_distributed_sampler_whose_epoch_never_advances(set_epoch: bool) -> None:
    data = TensorDataset(torch.arange(32.0).reshape(32, 1) / 32)
    sampler: DistributedSampler[Any] = DistributedSampler(
        data, num_replicas=2, rank=0, shuffle=True, seed=1
    )
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    torch.manual_seed(0)
    expected = torch.get_rng_state()
    check_loader(loader)
    assert torch.equal(torch.get_rng_state(), expected)  # the sampling draws nothing
    orders = []
    for epoch in range(3):
        if set_epoch:
            sampler.set_epoch(epoch)
        orders.append([float(b[0][0]) for b in loader])
    assert (orders[0] == orders[1]) is not set_epoch
    assert kinds() == ([] if set_epoch else ["sampler_epoch"])


class Slow(Dataset):
    def __init__(self, sleep: float) -> None:
        self.sleep = sleep

    def __len__(self) -> int:
        return 16 * 16

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.sleep:
            time.sleep(self.sleep)
        return torch.randn(32), torch.randn(1)


@pytest.mark.parametrize("sleep", [0.0, 0.01])
def test_a_data_bound_loader(sleep: float) -> None:
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 512),
        torch.nn.Linear(512, 1),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Slow(sleep), batch_size=16)
    waits = []
    for x, y in timed_data(loader):
        waits.append(data_seconds(loader))
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    assert kinds() == (["data_bound"] if sleep else [])
    assert len(waits) == 16 and (min(waits) >= 16 * sleep)


def test_a_data_bound_loop_in_the_progress_stream() -> None:
    bound = [{"t": 0.1 * i, "step": i, "data_s": 0.08} for i in range(20)]
    (found,) = data_findings(bound)
    assert found["kind"] == "data_bound" and "waits 80.0 ms" in found["seen"]
    assert data_findings([dict(r, data_s=0.01) for r in bound]) == []
    assert data_findings(bound[:5]) == []


def _saved(with_optimizer: bool) -> tuple[torch.nn.Module, dict[str, Any]]:
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()
    state: dict[str, Any] = {"model": model.state_dict(), "step": 3}
    if with_optimizer:
        state["optimizer"] = opt.state_dict()
    return model, state


@pytest.mark.parametrize("bug", ["", "dropped", "not_loaded", "step"])
def test_a_resume_that_drops_the_optimizer_state(bug: str) -> None:
    _, state = _saved(with_optimizer=bug != "dropped")
    model = torch.nn.Linear(4, 1)
    model.load_state_dict(state["model"])
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    if bug not in ("dropped", "not_loaded"):
        opt.load_state_dict(state["optimizer"])
    made = audit_resume(state, model=model, optimizer=opt, step=0 if bug == "step" else 3)
    want = {"": [], "dropped": ["resume_optimizer"], "not_loaded": ["resume_optimizer"]}
    assert [f["kind"] for f in made] == want.get(bug, ["resume_step"])
    if bug == "dropped":
        assert "leaves out optimizer.state_dict()" in made[0]["cause"]
    if bug == "not_loaded":
        assert "load_state_dict" in made[0]["cause"]


def test_a_resume_without_the_scheduler_or_the_scaler() -> None:
    model, state = _saved(with_optimizer=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 10)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    made = audit_resume(state, scheduler=sched, scaler=scaler, ema=object())
    assert [f["kind"] for f in made] == ["resume_scheduler", "resume_scaler", "resume_ema"]
    state.update(scheduler=sched.state_dict(), scaler=scaler.state_dict(), ema={"w": 1})
    assert audit_resume(state, scheduler=sched, scaler=scaler, ema=object()) == []


def _records(values: list[float]) -> list[dict[str, Any]]:
    return [{"t": float(i), "step": i, "loss": v} for i, v in enumerate(values)]


def test_loss_curve_findings_use_robust_statistics() -> None:
    noise = random.Random(0)
    falling = [2 * math.exp(-i / 20) + 0.05 + 0.01 * noise.random() for i in range(100)]
    assert curve_findings(_records(falling)) == []
    noisy = [(1 + 0.3 * noise.random()) / (1 + i / 10) for i in range(200)]
    assert curve_findings(_records(noisy)) == []
    scaled = [1e3 * v for v in falling]  # the same curve in other units: the same answer
    assert curve_findings(_records(scaled)) == []
    spiked = list(falling)
    spiked[60] = 5.0
    (spike,) = curve_findings(_records(spiked))
    assert (spike["kind"], spike["step"]) == ("loss_spike", 60)
    rising = falling[:50] + [0.1 * 1.15**i for i in range(50)]
    assert [f["kind"] for f in curve_findings(_records(rising))] == ["loss_divergence"]
    flat = [2.3 + 0.02 * noise.random() for _ in range(60)]
    assert [f["kind"] for f in curve_findings(_records(flat))] == ["loss_plateau"]
    assert curve_findings(_records(flat[:8])) == []  # too few points to say


def test_the_view_shows_each_finding_with_its_cause_and_fix() -> None:
    train("frozen")
    snap = Snapshot(job_id="j1", name="j", state="finished", host="h", observed_at=0.0)
    snap.findings = job.findings() + [{"kind": "x<y>", "seen": "<b>", "cause": "c", "fix": "f"}]
    text = snapshot_text(snap)
    assert "training findings:" in text and "frozen_params (step 3)" in text
    assert "likely: a layer is frozen" in text and "try: unfreeze it" in text
    page = snapshot_html(snap)
    assert "rgt-findings" in page and "&lt;b&gt;" in page and "<b>x&lt;y&gt;</b>" in page
    snap.findings = []
    assert "training findings" not in snapshot_text(snap) + snapshot_html(snap)


def _regression() -> tuple[torch.nn.Sequential, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    x = torch.randn(16, 8)
    return model, (x, x.sum(1, keepdim=True))


def _mse(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(batch[0]), batch[1])


@pytest.mark.parametrize("bug", ["", "lr0", "frozen"])
def test_overfit_one_batch(bug: str) -> None:
    model, batch = _regression()
    if bug == "frozen":
        model.requires_grad_(False)
        model[2].bias.requires_grad_(True)
    opt = torch.optim.Adam(model.parameters(), lr=0.0 if bug == "lr0" else 1e-2)
    before = [p.detach().clone() for p in model.parameters()]
    result = overfit_one_batch(model, opt, batch, _mse, steps=60)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert not opt.state  # put back as it was
    assert result["passed"] is (bug == "")
    assert kinds() == ([] if not bug else ["cannot_overfit"])


def test_overfit_fails_the_smoke_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RGT_SMOKE", "1")
    model, batch = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with pytest.raises(OverfitFailed, match="cannot overfit one batch"):
        overfit_one_batch(model, opt, batch, _mse, steps=10)


def test_a_resume_whose_learning_rate_differs_from_the_save() -> None:
    model, state = _saved(with_optimizer=True)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    opt.load_state_dict(state["optimizer"])
    for group in opt.param_groups:
        group["lr"] = 1e-1
    assert [f["kind"] for f in audit_resume(state, optimizer=opt)] == ["resume_lr"]


def test_the_watchers_probe_reads_the_findings(fresh_findings: Path) -> None:
    job.finding("k", "seen", "cause", "fix", 3)
    (answer,) = probe([{"control": str(fresh_findings)}], encode=False)["jobs"]
    assert json.loads(answer["findings"])["findings"][0]["kind"] == "k"


TORCHRUN = {
    "RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
    "CUDA_VISIBLE_DEVICES": "0,1",
}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({}, ""),
        ({"MASTER_PORT": ""}, "MASTER_PORT not set while"),
        ({"RANK": "2"}, "RANK 2 is outside WORLD_SIZE 2"),
        ({"CUDA_VISIBLE_DEVICES": "0"}, "2 processes on this node but CUDA_VISIBLE_DEVICES"),
        ({"MASTER_PORT": "http"}, "MASTER_PORT='http' is not a port"),
    ],
)
def test_a_distributed_launch_contract(change: dict[str, str], problem: str) -> None:
    problems = check_dist_env({**TORCHRUN, **change})
    assert bool(problems) is bool(problem)
    if problem:
        assert any(problem in p for p in problems), problems
        assert kinds() == ["dist_env"] and "torchrun" in job.findings()[0]["fix"]
    assert check_dist_env({"CUDA_VISIBLE_DEVICES": "0"}) == []  # a single process


@pytest.mark.parametrize("distributed", [False, True])
def test_a_distributed_job_whose_loader_is_not_sharded_by_rank(
    distributed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    data = TensorDataset(torch.rand(32, 2))
    sampler: DistributedSampler[Any] | None = None
    if distributed:
        sampler = DistributedSampler(data, num_replicas=2, rank=0)
    check_loader(DataLoader(data, batch_size=4, sampler=sampler, shuffle=not distributed))
    assert kinds() == ([] if distributed else ["sampler_not_distributed"])
    monkeypatch.delenv("WORLD_SIZE")
