"""Finished local jobs to pull: a small training program that writes two torch checkpoints, a
predictions file and results; programs that write many small files (:data:`MANY`) or one large
one (:data:`LARGE`), the shapes the transfer engine carries differently."""

from __future__ import annotations

import hashlib
from pathlib import Path

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.jobs.request import LaunchRequest

TRAIN = """\
import os, torch
import rgt_jupyter.job as job
torch.manual_seed(0)
w = torch.randn(64, 64)
for step in (1, 2):
    job.save_checkpoint({"w": w * step, "step": step}, step=step)
with open(os.path.join(os.environ["RGT_OUT"], "preds.csv"), "w") as fh:
    fh.write("id,pred\\n" + "".join(f"{i},{i % 3}\\n" for i in range(100)))
job.save_results({"val": {"acc": 0.75}})
"""

#: ``count`` files of about ``size`` bytes in 17 folders (names with spaces), seeded: the same
#: bytes on every run.
MANY = """\
import os, random
out = os.environ["RGT_OUT"]
rng = random.Random(7)
for i in range({count}):
    sub = os.path.join(out, "shard %d" % (i % 17), "deeper")
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, "item-%05d.bin" % i), "wb") as fh:
        fh.write(rng.randbytes({size} + i % 97))
"""
#: One file of ``mib`` MiB of random bytes.
LARGE = """\
import os
with open(os.path.join(os.environ["RGT_OUT"], "weights.bin"), "wb") as fh:
    for _ in range({mib}):
        fh.write(os.urandom(1 << 20))
"""


def finished(project: Path, program: str = TRAIN, name: str = "p") -> Job:
    """Launch ``program`` on the local profile and wait for it to finish."""
    job = submit(LaunchRequest(program=program, name=name), project)
    assert job.wait(120) == "finished", job.log()
    return job


def sha(path: Path) -> str:
    """The sha256 of a file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
