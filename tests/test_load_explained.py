"""A checkpoint that does not load safely is explained in one line, with what to do; one of plain
data types frameworks save loads."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from rgt_jupyter.run.safe_load import check


def test_each_kind_of_refused_checkpoint_is_explained(tmp_path: Path) -> None:
    numpy_ckpt = tmp_path / "rng.pth"
    torch.save({"rng": np.random.get_state()[1]}, numpy_ckpt)
    args_ckpt = tmp_path / "args.pt"
    torch.save({"args": argparse.Namespace(lr=0.1), "w": torch.zeros(2)}, args_ckpt)
    whole = tmp_path / "model.pt"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch\nclass Net(torch.nn.Module):\n    pass\n"
            f"torch.save(Net(), {str(whole)!r})\n",
        ],
        check=True,
    )
    cut = tmp_path / "cut.pt"
    torch.save({"w": torch.zeros(1000)}, cut)
    cut.write_bytes(cut.read_bytes()[:300])
    good = tmp_path / "good.pt"
    torch.save({"w": torch.zeros(2)}, good)

    said = {p.name: check(p) for p in (numpy_ckpt, args_ckpt, whole, cut, good)}
    assert said["good.pt"]["ok"] and "why" not in said["good.pt"]
    # numpy arrays and an argparse.Namespace are plain data: allowlisted, they load.
    assert said["rng.pth"]["verdict"] == "loaded" and said["args.pt"]["verdict"] == "loaded"
    assert said["model.pt"]["verdict"] == "pickled", said["model.pt"]
    assert "pickled: not loaded, it would run code" in said["model.pt"]["why"]
    assert "whole Net object" in said["model.pt"]["why"], said["model.pt"]
    assert "state_dict()" in said["model.pt"]["why"]
    assert "cut short" in said["cut.pt"]["why"], said["cut.pt"]
    for name, result in said.items():
        if not result["ok"]:
            assert "\n" not in result["why"] and len(result["why"]) < 200, (name, result)
            assert result["detail"], "the loader's own words are kept"
