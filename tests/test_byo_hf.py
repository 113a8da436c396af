"""A Hugging Face Trainer job, as written for a laptop plus one callback: preempted by a real
SIGTERM mid-run, relaunched, it ends with the same weights as a run never stopped, from a
kernel's ``%%remote_run`` and from ``rgt run``; its pulled run verifies and the gate passes."""

from __future__ import annotations

from pathlib import Path

# The jobs import them; here they are imported so a missing one fails at once (never a skip):
# the setup installs both (transformers' Trainer needs accelerate; extra ``hf``).
import accelerate  # noqa: F401
import pytest
import transformers  # noqa: F401

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

#: A 2-layer GPT-2 on token ids made here; 36 optimizer steps, a checkpoint every 10.
TRAIN = """\
import hashlib, os, time
import torch
import rgt_jupyter.job as job
from rgt_jupyter.integrations.hf import RgtCallback, resume_from_checkpoint
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
from transformers import set_seed

torch.set_num_threads(1)
set_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32))
ids = torch.randint(0, 64, (96, 16), generator=torch.Generator().manual_seed(1))


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return len(ids)

    def __getitem__(self, i):
        return {"input_ids": ids[i], "labels": ids[i]}


class Pace(TrainerCallback):
    def on_step_end(self, args, state, control, **kw):
        time.sleep(float(os.environ.get("PACE", "0")))


args = TrainingArguments(
    output_dir=os.path.join(job.ckpt_dir(), "gpt2"), per_device_train_batch_size=8,
    num_train_epochs=3, learning_rate=1e-3, save_strategy="steps", save_steps=10,
    logging_steps=1, use_cpu=True, dataloader_num_workers=0, seed=0, report_to=[],
    full_determinism=True,
)
trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[RgtCallback(), Pace()])
trainer.train(resume_from_checkpoint=resume_from_checkpoint(args.output_dir))
sha = hashlib.sha256()
for key, value in sorted(model.state_dict().items()):
    sha.update(key.encode() + value.detach().contiguous().numpy().tobytes())
job.save_results({"weights_sha256": sha.hexdigest(), "steps": trainer.state.global_step})
"""
STEPS = 36
PREEMPT_AT = 14


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The results of the same job never stopped (one run shared by the tests here)."""
    return uninterrupted_run(tmp_path_factory.mktemp("hf-baseline"), TRAIN)


def _check(resumed: Job, uninterrupted: dict[str, object]) -> None:
    same_as_uninterrupted(resumed, uninterrupted, STEPS)


def test_trainer_preempted_from_a_kernel_resumes_bit_identical(
    project: Path, tmp_path: Path, uninterrupted: dict[str, object]
) -> None:
    profile = rented(project)
    cell = f"%%remote_run --name hfk --profile {profile} --env PACE=0.15\n" + TRAIN
    with kernel(project, tmp_path) as run:
        resumed = preempt_and_resume(project, "hfk", lambda: run(cell), PREEMPT_AT)
    _check(resumed, uninterrupted)
    went_on_from_the_preemption(resumed, PREEMPT_AT, STEPS)
    ckpts = sorted(Path(resumed.spec.ckpt_dir, "gpt2").glob("checkpoint-*"))
    assert all((c / "rgt-complete.sha256").exists() for c in ckpts), ckpts
    pull_and_gate(project, resumed)


def test_trainer_preempted_under_rgt_run_resumes_bit_identical(
    project: Path, uninterrupted: dict[str, object]
) -> None:
    (project / "train.py").write_text(TRAIN)
    launch = rgt_run(project, "train.py", "hfc", "--profile", rented(project), "--env", "PACE=0.15")
    resumed = preempt_and_resume(project, "hfc", launch, PREEMPT_AT)
    _check(resumed, uninterrupted)
    pull_and_gate(project, resumed)
