"""A job killed while writing a checkpoint never leaves a checkpoint that load_latest trusts."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from rgt_jupyter import submit
from rgt_jupyter.jobs.request import LaunchRequest

from .evidence import Evidence

BIG_FLOATS = 150 * 1024 * 1024 // 4  # a ~150 MB float32 tensor: each write takes a while

# Saves the big tensor as checkpoints 1, 2, 3, ...; element 0 records the step it was saved at.
PROGRAM = f"""\
import time

import torch
import rgt_jupyter.job as job

big = torch.zeros({BIG_FLOATS})
for step in range(1, 7):
    big[0] = step
    job.save_checkpoint({{"big": big, "step": step}}, step)
    job.progress(step, 6)
    time.sleep(0.3)
job.save_results({{"steps": 6}})
"""

TMP_RE = re.compile(r"^\.ckpt-(\d{10})\.pt\.tmp-(\d+)$")  # the data file, written for ~1 s

# Runs load_latest in a fresh interpreter (RGT_CKPT_DIR from the environment) and reports.
LOAD_LATEST = textwrap.dedent(
    """
    import json
    import rgt_jupyter.job as job
    state = job.load_latest()
    if state is None:
        print(json.dumps(None))
    else:
        tensor = state["big"] if "big" in state else state["w"]
        print(json.dumps({"step": int(state["step"]), "marker": float(tensor[0])}))
    """
)


def _run_in_ckpt_dir(code: str, ckpt_dir: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter whose only RGT_* variable is RGT_CKPT_DIR."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RGT_")}
    env["RGT_CKPT_DIR"] = ckpt_dir
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _run_with_ckpt_dir(code: str, ckpt_dir: str) -> subprocess.CompletedProcess[str]:
    """:func:`_run_in_ckpt_dir`, which must succeed."""
    proc = _run_in_ckpt_dir(code, ckpt_dir)
    assert proc.returncode == 0, proc.stderr
    return proc


def _load_latest_in_subprocess(ckpt_dir: str) -> tuple[dict[str, Any] | None, str]:
    proc = _run_with_ckpt_dir(LOAD_LATEST, ckpt_dir)
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _complete_steps(ckpt_dir: str) -> list[int]:
    found: list[int] = []
    for name in os.listdir(ckpt_dir):
        m = re.fullmatch(r"ckpt-(\d{10})\.pt", name)
        if m:
            found.append(int(m.group(1)))
    return sorted(found)


@pytest.mark.fault(
    "F5-ckpt-kill",
    asserts="the job SIGKILLed while a 150 MB checkpoint is being written: the torn one never "
    "gets its name, the previous one stays complete, loads and is what load_latest returns",
    mutation=(
        "rgt_jupyter/remote/job.py",
        "        sha, _ = _atomic_write(path, write, before_commit=record)\n",
        "        with open(path, 'wb') as fh:\n            write(fh)\n"
        "        sha = _sha256_file(path)\n        record(sha, 0)\n",
    ),
)
def test_sigkill_during_checkpoint_write_keeps_previous_checkpoint(
    project: Path, evidence: Evidence
) -> None:
    """A real job killed by SIGKILL the moment a checkpoint write is seen in flight.

    Protection: rgt_jupyter/remote/job.py ``save_checkpoint``: the checkpoint is written under a
    temporary name, fsynced and renamed (``_atomic_write``); written in place instead, the kill
    leaves a torn file under the checkpoint's own name and the case fails.
    """
    job = submit(LaunchRequest(program=PROGRAM, name="ck", smoke=False), project)
    control = Path(job.spec.control_dir)
    ckpt_dir = job.spec.ckpt_dir
    first = os.path.join(ckpt_dir, "ckpt-0000000001.pt")

    deadline = time.monotonic() + 90
    while not (control / "status.json").exists() or not os.path.exists(first):
        assert not (control / "exit.json").exists(), f"job ended early:\n{job.log()}"
        assert time.monotonic() < deadline, "checkpoint 1 never appeared"
        time.sleep(0.01)
    job_pid = int(json.loads((control / "status.json").read_text())["job_pid"])

    # Kill the job process the moment a later checkpoint is being written.
    torn = None
    deadline = time.monotonic() + 60
    while torn is None:
        for name in os.listdir(ckpt_dir):
            m = TMP_RE.match(name)
            if m and int(m.group(1)) > 1:
                os.kill(job_pid, signal.SIGKILL)
                torn = (name, int(m.group(1)))
                evidence.keep(ckpt_dir)  # every complete checkpoint at the moment of the kill
                break
        else:
            if (control / "exit.json").exists():
                pytest.fail(
                    "the job ended before a checkpoint write was caught in flight; "
                    "make the checkpoint bigger so a write takes longer"
                )
            assert time.monotonic() < deadline, "no checkpoint write was ever seen in flight"
            time.sleep(0.001)
    tmp_name, torn_step = torn
    assert int(TMP_RE.match(tmp_name).group(2)) == job_pid

    assert job.wait(timeout=60) == "failed", job.log()
    exit_rec = json.loads((control / "exit.json").read_text())
    assert exit_rec["state"] == "failed"
    assert exit_rec["signal"] == "SIGKILL"
    assert exit_rec["exit_code"] == -signal.SIGKILL
    snap = job.snapshot()
    assert snap.state == "failed"
    assert "SIGKILL" in (snap.diagnosis or "")
    # The in-flight temporary is never part of the end-of-job manifest.
    manifest = json.loads((control / "manifest.json").read_text())
    assert not any(".tmp-" in rel for rel in manifest["files"]), manifest["files"]

    previous = torn_step - 1
    complete = _complete_steps(ckpt_dir)
    assert torn_step not in complete, "the torn checkpoint was renamed into place"
    assert complete and complete[-1] == previous, complete

    state = torch.load(
        os.path.join(ckpt_dir, f"ckpt-{previous:010d}.pt"), map_location="cpu", weights_only=True
    )
    assert state["step"] == previous
    assert state["big"].numel() == BIG_FLOATS
    assert float(state["big"][0]) == previous

    loaded, stderr = _load_latest_in_subprocess(ckpt_dir)
    assert loaded == {"step": previous, "marker": float(previous)}, stderr
    assert f"loaded ckpt-{previous:010d}.pt" in stderr
    assert evidence.account(ckpt_dir) == 0


SAVE_TWO = textwrap.dedent(
    """
    import torch
    import rgt_jupyter.job as job
    for step in (1, 2):
        job.save_checkpoint({"w": torch.full((50000,), float(step)), "step": step}, step)
    """
)


@pytest.mark.fault(
    "F5-ckpt-kill",
    asserts="a newest checkpoint truncated on disk (a write that never completed) is skipped "
    "by load_latest, which says so and returns the previous one",
    mutation=(
        "rgt_jupyter/remote/job.py",
        "        if not _record_matches(path):\n",
        "        if False:\n",
    ),
)
def test_load_latest_skips_a_truncated_newest_checkpoint(
    tmp_path: Path, evidence: Evidence
) -> None:
    """The newest checkpoint is cut to half its length.

    Protection: rgt_jupyter/remote/job.py ``load_latest``: a checkpoint counts only when its bytes
    match the sha256 record written with it (``_record_matches``); removed, the truncated file
    is tried first and, should it load, trusted: the case fails.
    """
    ckpt_dir = tmp_path / "ckpt"
    _run_with_ckpt_dir(SAVE_TWO, str(ckpt_dir))
    evidence.keep(ckpt_dir / "ckpt-0000000001.pt", ckpt_dir / "ckpt-0000000001.pt.sha256")
    assert _complete_steps(str(ckpt_dir)) == [1, 2]

    newest = ckpt_dir / "ckpt-0000000002.pt"
    size = newest.stat().st_size
    with open(newest, "r+b") as fh:
        fh.truncate(size // 2)
    assert newest.stat().st_size == size // 2

    loaded, stderr = _load_latest_in_subprocess(str(ckpt_dir))
    assert loaded == {"step": 1, "marker": 1.0}, stderr
    assert "skipping ckpt-0000000002.pt: bytes do not match its .sha256 record" in stderr
    assert "loaded ckpt-0000000001.pt" in stderr
    assert evidence.account(ckpt_dir) == 0


RESAVE_KILLED = textwrap.dedent(
    """
    import os, signal, torch
    import rgt_jupyter.job as job
    real = os.replace
    def replace(src, dst, *args, **kwargs):
        if str(dst).endswith("ckpt-0000000005.pt"):  # the new bytes are durable, not yet named
            os.kill(os.getpid(), signal.SIGKILL)
        return real(src, dst, *args, **kwargs)
    os.replace = replace
    job.save_checkpoint({"w": torch.full((50000,), 2.0), "step": 5}, 5)
    """
)


@pytest.mark.fault(
    "F5-ckpt-kill",
    asserts="a job re-saving a step it saved before (a stop at a checkpoint boundary), killed "
    "after its record is written and before the rename: the earlier checkpoint of that step "
    "still matches its record and is what load_latest returns",
    mutation=(
        "rgt_jupyter/remote/job.py",
        "for h in _recorded(path) if h != sha]",
        "for h in [] if h != sha]",
    ),
)
def test_a_kill_while_replacing_a_step_keeps_the_earlier_checkpoint(
    tmp_path: Path, evidence: Evidence
) -> None:
    """The same step saved twice; SIGKILL lands between the new record and the rename.

    Protection: rgt_jupyter/remote/job.py ``save_checkpoint``: while a step is replaced its record
    lists both sha256 values until the rename is durable; with only the new one, the earlier
    checkpoint no longer matches its record, is skipped, and the case fails.
    """
    ckpt_dir = tmp_path / "ckpt"
    _run_with_ckpt_dir(SAVE_TWO.replace("(1, 2)", "(5,)"), str(ckpt_dir))
    first = ckpt_dir / "ckpt-0000000005.pt"
    evidence.keep(first)
    proc = _run_in_ckpt_dir(RESAVE_KILLED, str(ckpt_dir))
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert len((ckpt_dir / "ckpt-0000000005.pt.sha256").read_text().splitlines()) == 2
    loaded, stderr = _load_latest_in_subprocess(str(ckpt_dir))
    assert loaded == {"step": 5, "marker": 5.0}, stderr
    assert evidence.account(ckpt_dir) == 0
    # The next save of the step completes and leaves a record of the new bytes only.
    _run_with_ckpt_dir(
        SAVE_TWO.replace("(1, 2)", "(5,)").replace("float(step)", "7.0"), str(ckpt_dir)
    )
    assert len((ckpt_dir / "ckpt-0000000005.pt.sha256").read_text().splitlines()) == 1
    loaded, stderr = _load_latest_in_subprocess(str(ckpt_dir))
    assert loaded == {"step": 5, "marker": 7.0}, stderr
