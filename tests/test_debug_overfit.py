"""``%%remote_run --smoke=overfit``: before anything is launched, the CPU smoke hands the loop
its first batch again and again (through ``timed_data``) and blocks the launch unless the loss
the loop reports (``watch_model(...).loss``) falls as far as a model that can learn makes it
fall; real torch, through the cell magic."""

from __future__ import annotations

from typing import Any

from rgt_jupyter.api import Job, find
from rgt_jupyter.errors import SmokeFailed
from rgt_jupyter.store.registry import Registry

#: A small regression; the loop takes its batches through timed_data and reports its loss.
LOOP = """\
import torch
import rgt_jupyter.job as job
from torch.utils.data import DataLoader, TensorDataset
from rgt_jupyter.integrations.debug import watch_model
from rgt_jupyter.integrations.debug_data import timed_data

torch.manual_seed(0)
x = torch.randn(256, 8)
loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=32, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr={lr})
watch = watch_model(model, opt)
for xb, yb in {batches}:
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    loss.backward()
    opt.step()
    watch.loss(loss)
job.save_results({{"done": True}})
"""


def _cell(ip: Any, name: str, lr: float, batches: str = "timed_data(loader)") -> Any:
    source = f"%%remote_run --smoke=overfit --name {name}\n" + LOOP.format(lr=lr, batches=batches)
    return ip.run_cell(source)


def test_a_model_that_learns_passes_and_one_that_cannot_is_blocked(ip: Any, project: Any) -> None:
    ok = _cell(ip, "learns", 0.01)
    assert ok.error_in_exec is None, ok.error_in_exec
    job = find("learns", project)
    assert isinstance(job, Job)
    assert job.wait(120) == "finished", job.log()
    assert job.spec.smoke is True

    stuck = _cell(ip, "stuck", 0.0)  # a learning rate of 0: the loss cannot fall
    assert isinstance(stuck.error_in_exec, SmokeFailed), stuck.error_in_exec
    text = str(stuck.error_in_exec) + "\n".join(getattr(stuck.error_in_exec, "lines", []))
    assert "cannot overfit one batch" in text and "learning rate" in text
    assert [j["name"] for j in Registry(project).jobs()] == ["learns"]  # nothing launched

    blind = _cell(ip, "blind", 0.01, batches="loader")  # batches not through timed_data
    assert isinstance(blind.error_in_exec, SmokeFailed), blind.error_in_exec
    assert "reached no verdict" in str(blind.error_in_exec)
    assert [j["name"] for j in Registry(project).jobs()] == ["learns"]
