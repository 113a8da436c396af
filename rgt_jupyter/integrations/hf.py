"""Hugging Face ``Trainer`` under rgt: live progress, preemption, resume.

::

    from rgt_jupyter.integrations.hf import RgtCallback, resume_from_checkpoint

    args = TrainingArguments(output_dir=job.ckpt_dir(), save_steps=10, ...)
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[RgtCallback()])
    trainer.train(resume_from_checkpoint=resume_from_checkpoint(args.output_dir))

:class:`RgtCallback` reports step, epoch, loss and learning rate to ``job.progress``; on a
preemption signal (SIGTERM, SIGUSR2) it has the Trainer save a checkpoint at the end of the
current step, seals it (a sha256 record of its files) and ends the program, so the code after
``train()`` does not run on a half-trained model. :func:`resume_from_checkpoint` is the newest
complete ``checkpoint-N`` (None when there is none: a fresh start); the Trainer restores the
model, optimizer, scheduler, RNG states and data position from it.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from .. import job

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "rgt_jupyter.integrations.hf needs transformers: pip install 'rgt-jupyter[hf]'"
    ) from exc

__all__ = ["RgtCallback", "resume_from_checkpoint"]

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
#: Trainer log keys under the names the view shows.
_RENAMED = {"learning_rate": "lr"}


def _numbers(logs: dict[str, Any] | None) -> dict[str, float]:
    out = {}
    for key, value in (logs or {}).items():
        if key == "epoch" or isinstance(value, bool):
            continue
        try:
            out[_RENAMED.get(key, key)] = float(value)
        except (TypeError, ValueError):
            continue
    return out


class RgtCallback(TrainerCallback):
    """Progress to ``job.progress``; a preemption becomes "save a checkpoint now, then stop".

    ``exit_on_preempt=False`` stops training after the save and lets ``train()`` return
    instead of ending the program (check ``job.preempted()`` after it yourself).
    """

    def __init__(self, exit_on_preempt: bool = True) -> None:
        self.exit_on_preempt = exit_on_preempt
        self.metrics: dict[str, float] = {}
        self.saving_for_preemption = False

    def _report(self, state: Any) -> None:
        if not state.is_world_process_zero:
            return
        metrics = dict(self.metrics)
        if state.epoch is not None:
            metrics["epoch"] = float(state.epoch)
        job.progress(state.global_step, state.max_steps or None, **metrics)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
        """The Trainer's logged numbers (loss, learning rate, grad norm, eval metrics)."""
        self.metrics.update(_numbers(logs))
        self._report(state)

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
        """Each optimizer step: progress; after a preemption signal, save now and stop."""
        if job.preempted() and not self.saving_for_preemption:
            self.saving_for_preemption = True
            control.should_save = True
            control.should_training_stop = True
            sys.stderr.write(
                f"[rgt] preempted: saving checkpoint-{state.global_step}, then stopping\n"
            )
        self._report(state)
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        """A checkpoint is written: seal it; after a preemption, end the program here."""
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        if state.is_world_process_zero and os.path.isdir(folder):
            job.seal_checkpoint(folder)
        if self.saving_for_preemption and self.exit_on_preempt:
            sys.stderr.write(f"[rgt] checkpoint-{state.global_step} saved; stopping\n")
            sys.stderr.flush()
            raise SystemExit(0)


def resume_from_checkpoint(output_dir: str | None = None) -> str | None:
    """The newest complete ``checkpoint-N`` dir in ``output_dir`` (default: ``$RGT_CKPT_DIR``
    and the dirs right under it), or None. Complete: its files match the seal
    :class:`RgtCallback` wrote, or, unsealed, it has ``trainer_state.json`` and every weights
    file in it is whole. Others are skipped, and said so on stderr."""
    if output_dir is not None:
        roots = [os.path.abspath(output_dir)]
    else:
        base = job.ckpt_dir()
        roots = [base] + [
            os.path.join(base, d)
            for d in sorted(os.listdir(base))
            if os.path.isdir(os.path.join(base, d)) and not _CHECKPOINT.match(d)
        ]
    found = []
    for root in roots:
        if not os.path.isdir(root):
            continue
        for name in os.listdir(root):
            m = _CHECKPOINT.match(name)
            path = os.path.join(root, name)
            if m and os.path.isdir(path) and not os.path.islink(path):
                found.append((int(m.group(1)), path))
    for _step, path in sorted(found, reverse=True):
        sealed = os.path.exists(os.path.join(path, "rgt-complete.sha256"))
        has_state = os.path.exists(os.path.join(path, "trainer_state.json"))
        if (sealed or has_state) and job.checkpoint_complete(path):
            sys.stderr.write(f"[rgt] resuming from {path}\n")
            return path
        sys.stderr.write(f"[rgt] skipping {path}: incomplete\n")
    return None
