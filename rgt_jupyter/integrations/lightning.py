"""Lightning under rgt: live progress, preemption, resume.

::

    from rgt_jupyter.integrations.lightning import RgtCallback, resume_path

    ckpt = ModelCheckpoint(dirpath=job.ckpt_dir(), every_n_train_steps=10, save_top_k=-1)
    trainer = L.Trainer(max_epochs=4, callbacks=[RgtCallback(), ckpt])
    trainer.fit(model, loader, ckpt_path=resume_path())

:class:`RgtCallback` reports the global step, epoch and logged metrics to ``job.progress``; on a
preemption signal (SIGTERM, SIGUSR2) it saves a checkpoint at the end of the current batch,
seals it (a sha256 record) and ends the program, so the code after ``fit()`` does not run on a
half-trained model. It also saves the python / numpy / torch RNG states in every checkpoint and
makes a plain ``DataLoader`` resumable mid-epoch (the epoch's shuffle and the batches already
done), so a resumed run takes the same batches with the same random draws as one never
stopped. :func:`resume_path` is the newest complete ``.ckpt``, or None (a fresh start).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .. import job

try:
    import torch
    from lightning.pytorch import Callback
    from torch.utils.data import DataLoader
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "rgt_jupyter.integrations.lightning needs lightning: pip install 'rgt-jupyter[lightning]'"
    ) from exc

__all__ = ["RgtCallback", "resumable", "resume_path"]

_RNG_KEY = "rgt_rng"


def _resumable_class(base: type) -> type:
    """A subclass of a DataLoader class (the same layout: an object's class can be swapped in
    place) whose ``state_dict``/``load_state_dict``, which Lightning saves and restores for a
    loader that has them, hold the global torch RNG state the epoch's iteration started from and
    the batches done. The next iteration after a restore draws the same shuffle, skips those
    batches and puts the RNG back where the checkpoint left it."""

    def __iter__(self: Any) -> Any:
        pending, self._rgt_pending = self._rgt_pending, None
        if pending is None:
            self._rgt_epoch_rng = torch.get_rng_state()
            self._rgt_done = 0
            return base.__iter__(self)  # type: ignore[attr-defined]
        now = torch.get_rng_state()
        torch.set_rng_state(pending["epoch_rng"])
        self._rgt_epoch_rng = pending["epoch_rng"]
        iterator = base.__iter__(self)  # type: ignore[attr-defined]
        for _ in range(int(pending["done"])):
            next(iterator)
        torch.set_rng_state(now)
        self._rgt_done = int(pending["done"])
        return iterator

    def state_dict(self: Any) -> dict[str, Any]:
        return {"epoch_rng": self._rgt_epoch_rng, "done": self._rgt_done}

    def load_state_dict(self: Any, state: dict[str, Any]) -> None:
        done = int((state or {}).get("done") or 0)
        if state and state.get("epoch_rng") is not None and 0 < done < len(self):
            self._rgt_pending = dict(state)

    methods = {"__iter__": __iter__, "state_dict": state_dict, "load_state_dict": load_state_dict}
    return type("Resumable" + base.__name__, (base,), methods)


_CLASSES: dict[type, type] = {}


def resumable(loader: Any) -> Any:
    """Make a ``DataLoader`` resumable mid-epoch (in place; returned for convenience). A loader
    that already has ``state_dict``/``load_state_dict`` (torchdata's) is left as it is."""
    if not isinstance(loader, DataLoader) or hasattr(loader, "load_state_dict"):
        return loader
    cls = type(loader)
    if cls not in _CLASSES:
        _CLASSES[cls] = _resumable_class(cls)
    loader._rgt_pending = None
    loader._rgt_epoch_rng = None
    loader._rgt_done = 0
    loader.__class__ = _CLASSES[cls]
    return loader


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in metrics.items():
        try:
            out[key] = float(value)
        except (TypeError, ValueError, RuntimeError):
            continue
    return out


class RgtCallback(Callback):
    """Progress to ``job.progress``; a preemption becomes "save a checkpoint now, then stop";
    RNG states and the data position in every checkpoint.

    ``exit_on_preempt=False`` stops training after the save and lets ``fit()`` return instead
    of ending the program (check ``job.preempted()`` after it yourself).
    """

    def __init__(self, exit_on_preempt: bool = True) -> None:
        self.exit_on_preempt = exit_on_preempt
        self.loaders: list[Any] = []
        self.rng: dict[str, Any] | None = None

    def _track(self, loader: Any) -> Any:
        loaders = loader if isinstance(loader, (list, tuple)) else [loader]
        for item in loaders:
            if isinstance(item, DataLoader):
                self.loaders.append(resumable(item))
        return loader

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """Before the data is set up: make the training loaders resumable."""
        source = getattr(getattr(trainer, "fit_loop", None), "_data_source", None)
        instance = getattr(source, "instance", None)
        if isinstance(instance, (DataLoader, list, tuple)):
            self._track(instance)
            return
        owner = instance if instance is not None else pl_module
        make = getattr(owner, "train_dataloader", None)
        if callable(make):

            def train_dataloader() -> Any:
                return self._track(make())

            owner.train_dataloader = train_dataloader

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Resumed: the RNG states of the checkpoint, right before the first batch."""
        if self.rng is not None:
            job.restore_rng(self.rng)
            self.rng = None

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Each batch: the data position, progress; after a preemption, save and stop."""
        for loader in self.loaders:
            loader._rgt_done = batch_idx + 1
        if trainer.is_global_zero:
            total = trainer.estimated_stepping_batches
            metrics = _numbers(trainer.callback_metrics)
            metrics["epoch"] = float(trainer.current_epoch)
            finite = isinstance(total, int) or (isinstance(total, float) and total != float("inf"))
            job.progress(trainer.global_step, int(total) if finite else None, **metrics)
        if job.preempted():
            path = os.path.join(job.ckpt_dir(), f"preempted-step={trainer.global_step}.ckpt")
            sys.stderr.write(f"[rgt] preempted: saving {path}, then stopping\n")
            trainer.save_checkpoint(path)
            if trainer.is_global_zero:
                job.seal_checkpoint(path)
            if self.exit_on_preempt:
                sys.stderr.flush()
                raise SystemExit(0)
            trainer.should_stop = True

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        checkpoint[_RNG_KEY] = job.rng_state()

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self.rng = checkpoint.get(_RNG_KEY)


def resume_path(dirpath: str | None = None) -> str | None:
    """The newest complete ``.ckpt`` in ``dirpath`` (default: ``$RGT_CKPT_DIR`` and the dirs
    under it), or None. Complete: its bytes match its seal, or, unsealed, it is an intact zip
    (``torch.save``'s format, every member CRC-checked). Others are skipped, and said so."""
    root = os.path.abspath(dirpath) if dirpath is not None else job.ckpt_dir()
    found = []
    for here, dirnames, filenames in os.walk(root):
        dirnames.sort()
        if here != root and os.path.relpath(here, root).count(os.sep) >= 1:
            dirnames[:] = []
        for name in filenames:
            path = os.path.join(here, name)
            if name.endswith(".ckpt") and not name.startswith(".") and not os.path.islink(path):
                found.append((os.stat(path).st_mtime_ns, path))
    for _mtime, path in sorted(found, reverse=True):
        if job.checkpoint_complete(path):
            sys.stderr.write(f"[rgt] resuming from {path}\n")
            return path
        sys.stderr.write(f"[rgt] skipping {path}: incomplete\n")
    return None
