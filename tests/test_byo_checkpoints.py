"""What counts as a framework's complete checkpoint, and what the agent reads as a tqdm bar."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import rgt_jupyter.job as job
from rgt_jupyter.remote import agent


@pytest.mark.parametrize(
    ("segment", "step", "total", "metrics"),
    [
        (" 45%|████▌     | 45/100 [00:03<00:04, 12.3it/s, loss=0.5]", 45, 100, {"loss": 0.5}),
        ("train:  45%|####5     | 45/100 [00:03<00:04, 12.3it/s]", 45, 100, {}),
        ("Epoch 1: 100%|██████████| 1.20k/1.20k [01:03<00:00, 19it/s, v_num=0]", 1200, 1200, {}),
        ("45it [00:03, 12.3it/s, loss=0.5, lr=1e-3]", 45, None, {"loss": 0.5, "lr": 1e-3}),
        ("  0%|          | 0/36 [00:00<?, ?it/s]", 0, 36, {}),
    ],
)
def test_tqdm_bars_are_read(
    segment: str, step: int, total: int | None, metrics: dict[str, float]
) -> None:
    bar = agent.parse_tqdm(segment)
    assert bar is not None
    assert (bar["step"], bar["total"]) == (step, total)
    for key, value in metrics.items():
        assert bar["metrics"][key] == pytest.approx(value)


@pytest.mark.parametrize("line", ["hello [x]", "{'loss': 0.5}", "step 3/10 done", ""])
def test_other_lines_are_not_bars(line: str) -> None:
    assert agent.parse_tqdm(line) is None


def test_a_checkpoint_cut_short_or_changed_is_not_complete(tmp_path: Path) -> None:
    whole = tmp_path / "whole.ckpt"
    torch.save({"w": torch.arange(1000.0)}, whole)
    assert job.checkpoint_complete(str(whole))
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert not job.checkpoint_complete(str(cut))

    folder = tmp_path / "checkpoint-10"
    folder.mkdir()
    torch.save({"opt": torch.ones(3)}, folder / "optimizer.pt")
    (folder / "trainer_state.json").write_text("{}")
    job.seal_checkpoint(str(folder))
    assert job.checkpoint_complete(str(folder))
    (folder / "trainer_state.json").write_text('{"global_step": 1}')
    assert not job.checkpoint_complete(str(folder))


def test_resume_takes_the_newest_complete_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rgt_jupyter.integrations import lightning

    monkeypatch.setenv("RGT_CKPT_DIR", str(tmp_path))
    older, newer = tmp_path / "step=10.ckpt", tmp_path / "step=20.ckpt"
    torch.save({"step": 10}, older)
    torch.save({"step": 20}, newer)
    job.seal_checkpoint(str(newer))
    assert lightning.resume_path() == str(newer)
    newer.write_bytes(newer.read_bytes()[:-10])  # the newest, damaged after its seal
    os.utime(older, ns=(1, 1))
    assert lightning.resume_path() == str(older)
