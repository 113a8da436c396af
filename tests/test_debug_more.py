"""The training-debug probes' second part, on real torch (CPU): images in the wrong channel
order, samples that several ranks of a real two-process gloo group draw alike, a resume whose
first losses are not the saved model's, and what bounds a step (GPU, communication, the host),
each planted bug named with its cause and its control quiet."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import rgt_jupyter.job as job
from rgt_jupyter.integrations.debug_data import check_loader
from rgt_jupyter.jobs.curves import curve_findings, processes, throughput_findings
from rgt_jupyter.jobs.spec import JobSpec

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Empty findings, losses and resume record, and a control and checkpoint dir per test."""
    monkeypatch.setattr(job, "_findings", [])
    monkeypatch.setattr(job, "_finding_keys", set())
    monkeypatch.setattr(job, "_findings_loaded", [False])
    monkeypatch.setattr(job, "_losses", [])
    monkeypatch.setattr(job, "_resumed", {})
    monkeypatch.setenv("RGT_CONTROL_DIR", str(tmp_path))
    monkeypatch.setenv("RGT_CKPT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    return tmp_path


def kinds() -> list[str]:
    return sorted({f["kind"] for f in job.findings()})


# -- channel order -------------------------------------------------------------------------------


def photos(n: int = 32, size: int = 8) -> torch.Tensor:
    """Photo-like RGB images in 0-1: red brighter than green brighter than blue on average."""
    gen = torch.Generator().manual_seed(0)
    light = torch.rand(n, 1, size, size, generator=gen)
    tint = torch.tensor([0.92, 0.85, 0.72]).view(1, 3, 1, 1)
    lift = torch.tensor([0.06, 0.05, 0.04]).view(1, 3, 1, 1)
    return (light * tint + lift).clamp(0, 1)


MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)


@pytest.mark.parametrize(
    ("form", "bgr"),
    [("raw", False), ("raw", True), ("normalised", False), ("normalised", True), ("hwc255", True)],
)
def test_images_in_bgr_order_where_rgb_is_expected(form: str, bgr: bool) -> None:
    x = photos()
    if bgr:
        x = x.flip(1)
    if form == "normalised":
        x = (x - MEAN) / STD
    if form == "hwc255":
        x = (x * 255).permute(0, 2, 3, 1).contiguous()
    out = check_loader(DataLoader(TensorDataset(x), batch_size=8), expect=(-300.0, 300.0))
    assert out["images"] == 32
    assert kinds() == (["channel_order"] if bgr else [])
    if bgr:
        finding = job.findings()[0]
        assert "look like BGR where RGB is expected" in finding["seen"]
        assert "COLOR_BGR2RGB" in finding["fix"]


def test_the_channel_order_is_not_judged_on_grey_images_few_images_or_when_told() -> None:
    grey = photos().mean(1, keepdim=True).expand(-1, 3, -1, -1).contiguous()
    check_loader(DataLoader(TensorDataset(grey), batch_size=8))
    check_loader(DataLoader(TensorDataset(photos(8).flip(1)), batch_size=4))
    check_loader(DataLoader(TensorDataset(photos().flip(1)), batch_size=8), channels=None)
    assert kinds() == []
    check_loader(DataLoader(TensorDataset(photos()), batch_size=8), channels="bgr")
    assert kinds() == ["channel_order"]  # a BGR model fed RGB is the same mistake reversed


# -- the same samples on several ranks ---------------------------------------------------------

RANK_JOB = """
import json, os, sys
import torch, torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from rgt_jupyter.integrations.debug_data import check_loader
import rgt_jupyter.job as job
dist.init_process_group("gloo")
data = TensorDataset(torch.arange(64, dtype=torch.float32).view(64, 1))
if sys.argv[1] == "fixed-rank":   # the bug: every rank told it is rank 0
    sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=False)
else:
    sampler = DistributedSampler(data, shuffle=False)
out = check_loader(DataLoader(data, batch_size=4, sampler=sampler), batches=4)
print(json.dumps({"rank": dist.get_rank(), "shared": out["rank_duplicates"],
                  "kinds": sorted({f["kind"] for f in job.findings()})}))
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("sampler", ["distributed", "fixed-rank"])
def test_samples_drawn_alike_by_two_real_ranks(sampler: str, tmp_path: Path) -> None:
    script = tmp_path / "ranks.py"
    script.write_text(textwrap.dedent(RANK_JOB))
    port = str(_free_port())
    procs = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "RGT_CONTROL_DIR": str(tmp_path / f"control{rank}"),
            "PYTHONPATH": str(ROOT),
        }
        (tmp_path / f"control{rank}").mkdir()
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), sampler],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        answers.append(json.loads(out.strip().splitlines()[-1]))
    bug = sampler == "fixed-rank"
    assert all((a["shared"] > 0) is bug for a in answers), answers
    assert all(("rank_duplicates" in a["kinds"]) is bug for a in answers), answers
    findings = tmp_path / "control0" / "findings.json"
    written = json.loads(findings.read_text())["findings"] if findings.exists() else []
    assert ("rank_duplicates" in {f["kind"] for f in written}) is bug
    assert not (tmp_path / "control1" / "findings.json").exists()  # rank 0 writes the record


# -- the first losses after a resume -----------------------------------------------------------


def _fit(model: torch.nn.Module, opt: Any, steps: range, save_at: int | None = None) -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=gen)
    y = x.sum(1, keepdim=True)
    for step in steps:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        job.progress(step, loss=loss.item())
        if step == save_at:
            job.save_checkpoint({"model": model.state_dict(), "opt": opt.state_dict()}, step)


@pytest.mark.parametrize("bug", [False, True])
def test_a_resume_whose_first_losses_are_not_the_saved_models(bug: bool) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    _fit(model, opt, range(1, 41), save_at=40)
    job._losses.clear()  # a new process: only the checkpoint knows what came before
    fresh_model = torch.nn.Linear(8, 1)
    state = job.load_latest()
    assert state is not None and state["step"] == 40
    if not bug:
        fresh_model.load_state_dict(state["model"])
    opt = torch.optim.SGD(fresh_model.parameters(), lr=0.05)
    opt.load_state_dict(state["opt"])
    _fit(fresh_model, opt, range(41, 46))
    assert kinds() == (["resume_loss"] if bug else [])
    if bug:
        finding = job.findings()[0]
        assert finding["step"] == 41 and "before the save at step 40" in finding["seen"]
        assert "load_state_dict" in finding["fix"]


# -- what bounds a step ------------------------------------------------------------------------


def _records(data_share: float | None, n: int = 20) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        rec: dict[str, Any] = {"t": 0.1 * i, "step": i, "loss": 1.0 / (i + 1)}
        if data_share is not None:
            rec["data_s"] = 0.1 * data_share
        rows.append(rec)
    return rows


def _gpus(util: float, busy_gpus: int, samples: int = 10) -> dict[str, Any]:
    gpus = [
        {"index": i, "util": util, "mem_used_mib": 9000.0 if i < busy_gpus else 0.0}
        for i in range(2)
    ]
    return {"gpus": gpus, "gpu_util_recent": [util] * samples}


@pytest.mark.parametrize(
    ("util", "share", "busy", "want"),
    [
        (96.0, 0.02, 1, "gpu_bound"),
        (30.0, 0.02, 2, "comm_bound"),
        (30.0, 0.02, 1, "host_bound"),
        (30.0, None, 1, "gpu_idle"),
        (30.0, 0.8, 1, "data_bound"),
        (70.0, 0.02, 1, ""),
    ],
)
def test_what_bounds_a_step(util: float, share: float | None, busy: int, want: str) -> None:
    resources = _gpus(util, busy)
    spec = JobSpec(job_id="j", name="j")
    found = curve_findings(_records(share), resources, processes(spec, resources))
    assert [f["kind"] for f in found] == ([want] if want else [])
    if want == "comm_bound":
        assert "with 2 processes" in found[0]["seen"] and "no_sync" in found[0]["fix"]
    if want == "gpu_bound":
        assert "96% busy" in found[0]["seen"] and "torch.compile" in found[0]["fix"]


def test_the_step_is_not_judged_on_few_gpu_samples_or_none() -> None:
    assert throughput_findings(_records(0.02), _gpus(30.0, 1, samples=3)) == []
    assert throughput_findings(_records(0.02), None) == []
    assert throughput_findings(_records(0.02), {"gpu_util_recent": ["x", None]}) == []
    multi = JobSpec(job_id="j", name="j", distributed={"nodes": 2, "nproc_per_node": 4})
    assert processes(multi, None) == 8
