"""A Lightning job, as written for a laptop plus one callback: preempted by a real SIGTERM in
the middle of an epoch, relaunched, it ends with the same weights as a run never stopped, from a
kernel's ``%%remote_run`` and from ``rgt run``; its pulled run verifies and the gate passes."""

from __future__ import annotations

from pathlib import Path

# The jobs import it; imported here so a missing one fails at once (never a skip).
import lightning  # noqa: F401
import pytest

from rgt_jupyter.api import Job

from .byo import (
    kernel,
    preempt_and_resume,
    pull_and_gate,
    rented,
    rgt_run,
    same_as_uninterrupted,
    uninterrupted_run,
    went_on_from_the_preemption,
)

#: A small MLP with dropout on shuffled data made here: 12 batches an epoch, 3 epochs, a
#: checkpoint every 10 steps (so the preemption lands between two, mid-epoch).
TRAIN = """\
import hashlib, os, time
import torch
import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset
import rgt_jupyter.job as job
from rgt_jupyter.integrations.lightning import RgtCallback, resume_path

torch.set_num_threads(1)
pl.seed_everything(0)
X = torch.randn(96, 8, generator=torch.Generator().manual_seed(1))
Y = X.sum(1, keepdim=True)


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 1)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss)
        time.sleep(float(os.environ.get("PACE", "0")))
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


model = Net()
loader = DataLoader(TensorDataset(X, Y), batch_size=8, shuffle=True)
trainer = pl.Trainer(
    max_epochs=3, accelerator="cpu", deterministic=True, logger=False,
    enable_progress_bar=False, enable_model_summary=False,
    callbacks=[
        RgtCallback(),
        ModelCheckpoint(dirpath=job.ckpt_dir(), every_n_train_steps=10, save_top_k=-1),
    ],
)
trainer.fit(model, loader, ckpt_path=resume_path())
sha = hashlib.sha256()
for key, value in sorted(model.state_dict().items()):
    sha.update(key.encode() + value.detach().contiguous().numpy().tobytes())
job.save_results({"weights_sha256": sha.hexdigest(), "steps": trainer.global_step})
"""
STEPS = 36
PREEMPT_AT = 14


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The results of the same job never stopped (one run shared by the tests here)."""
    return uninterrupted_run(tmp_path_factory.mktemp("lightning-baseline"), TRAIN)


def _check(resumed: Job, uninterrupted: dict[str, object]) -> None:
    same_as_uninterrupted(resumed, uninterrupted, STEPS)


def test_lightning_preempted_from_a_kernel_resumes_bit_identical(
    project: Path, tmp_path: Path, uninterrupted: dict[str, object]
) -> None:
    profile = rented(project)
    cell = f"%%remote_run --name plk --profile {profile} --env PACE=0.15\n" + TRAIN
    with kernel(project, tmp_path) as run:
        resumed = preempt_and_resume(project, "plk", lambda: run(cell), PREEMPT_AT)
    _check(resumed, uninterrupted)
    went_on_from_the_preemption(resumed, PREEMPT_AT, STEPS)
    preempted = list(Path(resumed.spec.ckpt_dir).glob("preempted-step=*.ckpt"))
    assert len(preempted) == 1 and Path(f"{preempted[0]}.sha256").exists()
    pull_and_gate(project, resumed)


def test_lightning_preempted_under_rgt_run_resumes_bit_identical(
    project: Path, uninterrupted: dict[str, object]
) -> None:
    (project / "train.py").write_text(TRAIN)
    launch = rgt_run(project, "train.py", "plc", "--profile", rented(project), "--env", "PACE=0.15")
    resumed = preempt_and_resume(project, "plc", launch, PREEMPT_AT)
    _check(resumed, uninterrupted)
    pull_and_gate(project, resumed)
