"""Sources that change under a pull: files altered after the job ended (truncated, one bit
flipped, a checkpoint's record rewritten to match), a file still growing while it is pulled,
and a checkpoint or an output appearing or changing after the pull was verified. None of them
may be verified or trusted, and the teardown gate must not open on them."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.cli import main as rgt_main
from rgt_jupyter.errors import UsageError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.teardown import Gate, compute_gate, decide, stop_meter

from ..conftest import pid_alive, wait_for
from ..fakeclouds import RunPodFake
from ..test_teardown import pod  # noqa: F401 - a fake RunPod API and one pod brought up on it
from .evidence import Evidence

TRAIN = """\
import os, torch
import rgt_jupyter.job as job
torch.manual_seed(0)
w = torch.randn(32, 32)
for step in (1, 2, 3):
    job.save_checkpoint({"w": w * step, "step": step}, step=step)
out = os.environ["RGT_OUT"]
with open(os.path.join(out, "preds.csv"), "w") as fh:
    fh.write("id,pred\\n" + "".join(f"{i},{i % 3}\\n" for i in range(400)))
with open(os.path.join(out, "curve.csv"), "w") as fh:
    fh.write("step,loss\\n" + "".join(f"{i},{1 / (i + 1):.6f}\\n" for i in range(400)))
job.save_results({"val": {"acc": 0.75}})
"""

# The same without torch (its checkpoints are JSON): the gate loads every pulled checkpoint each
# time it is computed, and the gate is computed many times below.
LIGHT_TRAIN = """\
import os, sys
sys.modules["torch"] = None
import rgt_jupyter.job as job
for step in (1, 2):
    job.save_checkpoint({"w": [0.5 * step] * 64, "step": step}, step=step)
out = os.environ["RGT_OUT"]
with open(os.path.join(out, "preds.csv"), "w") as fh:
    fh.write("id,pred\\n" + "".join(f"{i},{i % 3}\\n" for i in range(400)))
job.save_results({"val": {"acc": 0.75}})
"""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _finished(project: Path, program: str, name: str, profile: str = "pod") -> Job:
    job = submit(LaunchRequest(program=program, name=name, profile=profile), project)
    assert job.wait(120) == "finished", job.log()
    return job


def _flip_bit(path: Path, at: int | None = None) -> None:
    """Flip one bit in the middle of the file, in place (same size)."""
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if at is None else at
    data[i] ^= 0x10
    path.write_bytes(bytes(data))


def _failing(gate: Gate) -> dict[str, str]:
    return {c.name: c.detail for c in gate.checks if not c.ok}


def _deletes(fake: RunPodFake) -> int:
    return len(fake.calls("DELETE", r"/pods/.*"))


def _approve_reached(gate: Gate, project: Path) -> tuple[bool, str]:
    """Try to approve ``gate``: whether a meter-stop became reachable, and what was said."""
    try:
        decide(gate, "approve", project, by="test")
    except UsageError as exc:
        return False, str(exc)
    return True, ""


def _save_late_checkpoint(job: Job, step: int) -> Path:
    """A checkpoint saved into the job's checkpoint dir by a process that is not the job (a
    leftover of it), after the job ended: through ``save_checkpoint``, so it has its record."""
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "import rgt_jupyter.job as job\n"
        f"print(job.save_checkpoint({{'w': [1.0] * 8, 'step': {step}}}, step={step}, keep=9))\n"
    )
    env = {**os.environ, "RGT_CKPT_DIR": job.spec.ckpt_dir, "RGT_OUT": job.spec.out_dir}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip())


@pytest.mark.fault(
    "F12-late-checkpoint",
    asserts=(
        "after a verified pull opened the gate, a checkpoint appearing (or an output changing) "
        "on the machine closes it again, naming the file; an approval on the gate computed "
        "before is refused (API, widget, CLI), nothing reaches the platform, and only a new "
        "verified pull covering the machine opens it again"
    ),
    mutation=(
        "rgt_jupyter/run/teardown.py",
        "        changed = drift(gate, project)\n",
        "        changed: dict[str, list[str]] = {}\n",
    ),
)
def test_late_checkpoint_closes_the_gate(
    project: Path,
    pod: RunPodFake,  # noqa: F811
    evidence: Evidence,
) -> None:
    """A gate that passed is acted on only if what it covered still holds.

    Protection: rgt_jupyter/run/teardown.py: ``decide`` re-lists the machine's files (one agent
    listing per job, end-of-job hashes reused) against the runs the gate covered before it
    records an approval (``drift``), and refuses when a file appeared or changed; removed, the
    approval of a gate computed before the new checkpoint goes through and the meter stops.
    """
    from rgt_jupyter.views.teardown_view import TeardownView

    job = _finished(project, LIGHT_TRAIN, "late")
    first = job.pull()
    assert first.verified, first.text()
    view = TeardownView(job._row, project, background=False)
    gate = view.gate
    assert gate.passed and not view.approve.disabled, gate.text()

    # 1. a checkpoint appears after the verified pull
    late = _save_late_checkpoint(job, 7)
    evidence.keep(job.spec.out_dir, job.spec.ckpt_dir)
    fresh = compute_gate(job._row, project)
    assert not fresh.passed
    failing = _failing(fresh)
    assert late.name in failing["no newer checkpoint"], fresh.text()
    assert "pull again" in failing["no newer checkpoint"]

    reached, said = _approve_reached(gate, project)  # the gate computed before it appeared
    assert not evidence.teardown(reached, gate_should_pass=False), "approved a stale gate"
    assert late.name in said and "pull" in said, said
    view.approve.click()  # the widget shown before it appeared
    assert not evidence.teardown(view.decision is not None, gate_should_pass=False)
    assert late.name in view.log.value
    assert view.approve.disabled and late.name in view.checklist.value  # shown anew, closed
    assert rgt_main(["down", "late", "--yes"]) == 2
    assert _deletes(pod) == 0

    # A new pull brings it home but cannot verify it: the job never wrote it (it is not in the
    # end-of-job manifest). The gate stays closed and says so.
    second = job.pull()
    assert not second.verified
    reasons = {m["path"]: m["reason"] for m in second.verification["mismatches"]}
    assert "appeared after the job ended" in reasons[f"checkpoints/{late.name}"]
    assert (second.path / "checkpoints" / f"{late.name}.part").is_file()
    still = compute_gate(job._row, project)
    assert not still.passed and late.name in still.text()
    reached, _ = _approve_reached(still, project)
    assert not evidence.teardown(reached, gate_should_pass=False)
    assert _deletes(pod) == 0
    assert evidence.account(second.path) == 0  # every byte on the machine is home

    # The stray checkpoint is dealt with on the machine; a new pull verifies what is left.
    late.unlink()
    Path(f"{late}.sha256").unlink()
    third = job.pull()
    assert third.verified, third.text()
    reopened = compute_gate(job._row, project)
    assert reopened.passed, reopened.text()

    # 2. an output changes after the verified pull
    preds = Path(job.spec.out_dir) / "preds.csv"
    original = preds.read_bytes()
    preds.write_bytes(original.replace(b"1,1", b"1,2", 1))
    closed = compute_gate(job._row, project)
    assert "preds.csv" in _failing(closed)["every hash matches"], closed.text()
    reached, said = _approve_reached(reopened, project)
    assert not evidence.teardown(reached, gate_should_pass=False)
    assert "outputs/preds.csv" in said and "changed" in said, said
    assert _deletes(pod) == 0

    preds.write_bytes(original)  # put back as the job wrote it: the verified pull covers it
    final = compute_gate(job._row, project)
    assert final.passed, final.text()
    record = decide(final, "approve", project, by="test")
    outcome = stop_meter(final, record, project, timeout=30, interval=0.05)
    assert evidence.teardown(True, gate_should_pass=True) is False
    assert outcome.confirmed_down and _deletes(pod) == 1
    assert evidence.account(third.path, second.path) == 0


@pytest.mark.fault(
    "F8-altered",
    asserts=(
        "after the end-of-job manifest, a truncated output, an output and a torch checkpoint "
        "each with one bit flipped, and a flipped checkpoint whose .sha256 record was rewritten "
        "to match are each a mismatch with its reason, kept as .part under no final name, not "
        "loaded, the run not verified, and the teardown gate stays closed"
    ),
    mutation=(
        "rgt_jupyter/run/pull/transfer.py",
        '    if end_manifest is not None and end_manifest[rel]["sha256"] != got:\n',
        "    if False:\n",
    ),
)
def test_altered_after_the_job_ended(
    project: Path,
    pod: RunPodFake,  # noqa: F811
    evidence: Evidence,
) -> None:
    """Files altered where the job left them, after the agent wrote the end-of-job manifest.
    One bit flipped leaves the size as it was, and a checkpoint's own ``.sha256`` record can be
    rewritten along with it: only the end-of-job manifest still knows the job's bytes.

    Protection: rgt_jupyter/run/pull/transfer.py: ``_judge`` compares the bytes that arrived with the sha256
    of the end-of-job manifest (``end_manifest[rel]["sha256"] != got``); removed, the flipped
    output and the flipped checkpoint with its rewritten record land verified.
    """
    job = _finished(project, TRAIN, "alt")
    out, ckpt = Path(job.spec.out_dir), Path(job.spec.ckpt_dir)
    c1, c2, c3 = (ckpt / f"ckpt-{s:010d}.pt" for s in (1, 2, 3))
    as_written = {p: p.read_bytes() for p in (out / "preds.csv", out / "curve.csv", c1, c2)}

    preds = out / "preds.csv"
    preds.write_bytes(as_written[preds][: len(as_written[preds]) // 2])  # truncated
    _flip_bit(out / "curve.csv")  # one bit, same size
    _flip_bit(c1)  # one bit in a torch checkpoint; its record left as it was
    _flip_bit(c2)  # one bit, and its record rewritten to match the flipped bytes
    Path(f"{c2}.sha256").write_text(f"{_sha(c2)}  {c2.name}\n")
    for path in (out / "curve.csv", c1, c2):
        assert path.stat().st_size == len(as_written[path])
    import torch  # the flipped checkpoints still load: loading alone would not catch them

    for path in (c1, c2):
        assert torch.load(path, weights_only=True)["step"] in (1, 2)
    evidence.keep(out, ckpt)  # what the machine holds now, altered files included

    run = job.pull()
    assert not run.verified, run.text()
    reasons = {m["path"]: m for m in run.verification["mismatches"]}
    bad = {
        "outputs/preds.csv",
        "outputs/curve.csv",
        f"checkpoints/{c1.name}",
        f"checkpoints/{c2.name}",
        f"checkpoints/{c2.name}.sha256",
    }
    assert set(reasons) == bad, reasons
    for rel in bad:
        m = reasons[rel]
        assert "altered or truncated at the source after the job wrote it" in m["reason"], m
        assert m["kept_as"] == f"{rel}.part"
        assert (run.path / f"{rel}.part").is_file(), rel
        assert not (run.path / rel).exists(), f"{rel} landed under its name"
    half = len(as_written[preds]) // 2
    assert (
        f"({len(as_written[preds])} bytes written, {half} now)"
        in reasons["outputs/preds.csv"]["reason"]
    )
    size = len(as_written[c1])
    assert f"({size} bytes written, {size} now)" in reasons[f"checkpoints/{c1.name}"]["reason"]
    assert (
        reasons[f"checkpoints/{c2.name}"]["expected"] == hashlib.sha256(as_written[c2]).hexdigest()
    )
    text = run.text()
    for rel in bad:
        assert f"MISMATCH {rel}" in text
    # The untouched checkpoint landed and loaded; the flipped ones were neither landed nor loaded.
    loads = {r["path"]: r["ok"] for r in run.verification["checkpoint_loads"]}
    assert loads == {f"checkpoints/{c3.name}": True}
    assert evidence.trusted(run.path, bad) == 0

    gate = compute_gate(job._row, project)
    failing = _failing(gate)
    assert not gate.passed
    for rel in bad:
        assert rel in failing["every file pulled"] or rel in failing["every hash matches"], rel
    assert "altered or truncated" in failing["every hash matches"]
    reached, said = _approve_reached(gate, project)
    assert not evidence.teardown(reached, gate_should_pass=False)
    assert "the gate refuses teardown" in said
    assert rgt_main(["down", "alt", "--yes"]) == 2 and _deletes(pod) == 0
    # Everything the machine holds is home: the untouched files under their names, the
    # altered ones as .part (evidence of what happened to them), none of it trusted.
    assert evidence.account(run.path) == 0


# The job leaves a process behind (detached, in a session of its own) that keeps appending to a
# file of $RGT_OUT after the job ended, until a stop file appears.
GROWING = """\
import os, subprocess, sys
sys.modules["torch"] = None
import rgt_jupyter.job as job
out = os.environ["RGT_OUT"]
path = os.path.join(out, "events.log")
with open(path, "w") as fh:  # 16 MiB: reading it takes a while, and it grows meanwhile
    fh.write("".join(f"event {i:08d} {'.' * 48}\\n" for i in range(1 << 18)))
LEFTOVER = '''
import os, sys, time
path, stop, pidfile = sys.argv[1:]
with open(pidfile + ".tmp", "w") as fh:
    fh.write(str(os.getpid()))
os.replace(pidfile + ".tmp", pidfile)
i = 0
while not os.path.exists(stop):
    with open(path, "a") as fh:
        fh.write(f"late {i}\\\\n")
    i += 1
    time.sleep(0.001)
'''
base = os.path.dirname(out)
subprocess.Popen(
    [sys.executable, "-c", LEFTOVER, path, os.path.join(base, "stop"), os.path.join(base, "pid")],
    start_new_session=True,
    stdin=subprocess.DEVNULL,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
)
job.save_checkpoint({"w": [1.0] * 32, "step": 1}, step=1)
job.save_results({"val": {"acc": 0.5}})
"""


def _grows(path: Path) -> bool:
    before = path.stat().st_size
    time.sleep(0.05)
    return path.stat().st_size > before


@pytest.mark.fault(
    "F8-growing",
    asserts=(
        "a file still appended to during the pull (by a process the job left behind) is a "
        "mismatch 'changed during the pull' and the run is not verified, with or without the "
        "end-of-job manifest; once the writer stopped, the bytes appended after the job ended "
        "are not the job's: still a mismatch, the job's bytes kept as the prefix of the .part; "
        "the gate stays closed throughout"
    ),
    mutation=(
        "rgt_jupyter/run/pull/transfer.py",
        '    if got != entry["sha256"] or size != int(entry["size"]):\n',
        "    if False:\n",
    ),
)
def test_file_growing_during_the_pull(
    project: Path,
    pod: RunPodFake,  # noqa: F811
    evidence: Evidence,
) -> None:
    """A finished job whose leftover process keeps appending to ``$RGT_OUT/events.log``.

    Protection: rgt_jupyter/run/pull/transfer.py: ``_judge`` compares the bytes that arrived with the listing
    taken at the start of the pull (``got != entry["sha256"] or size != ...``: "changed at the
    source during the pull"); removed, a job without an end-of-job manifest gets the growing
    file verified with whatever bytes the read happened to see.
    """
    job = _finished(project, GROWING, "grow")
    out, control = Path(job.spec.out_dir), Path(job.spec.control_dir)
    log, stop, pidfile = out / "events.log", out.parent / "stop", out.parent / "pid"
    end_manifest = json.loads((control / "manifest.json").read_text())["files"]
    assert "outputs/events.log" in end_manifest  # written by the job before it ended
    wait_for(pidfile.exists, 30, "the leftover writer to start")
    writer = int(pidfile.read_text())
    try:
        evidence.keep(out / "results.json", job.spec.ckpt_dir)
        assert _grows(log)

        # 1. pulled while it grows
        growing = job.pull()
        assert _grows(log)  # still growing after the pull: it grew throughout
        reasons = {m["path"]: m["reason"] for m in growing.verification["mismatches"]}
        assert set(reasons) == {"outputs/events.log"}, reasons
        assert "changed" in reasons["outputs/events.log"]
        assert "during the pull" in reasons["outputs/events.log"]
        assert not growing.verified
        assert not (growing.path / "outputs" / "events.log").exists()
        assert (growing.path / "outputs" / "events.log.part").is_file()
        assert growing.results == {"val": {"acc": 0.5}}  # the rest landed
        gate = compute_gate(job._row, project)
        assert not gate.passed and "events.log" in gate.text()
        reached, _ = _approve_reached(gate, project)
        assert not evidence.teardown(reached, gate_should_pass=False)

        # 2. the same with no end-of-job manifest (the agent died before writing it): the
        #    listing taken at the start of the pull is all there is to compare with
        aside = control / "manifest.json.aside"
        (control / "manifest.json").rename(aside)
        try:
            blind = job.pull()
        finally:
            aside.rename(control / "manifest.json")
        reasons = {m["path"]: m["reason"] for m in blind.verification["mismatches"]}
        assert "pull-time listing only" in blind.verification["reference"]
        assert "during the pull" in reasons.get("outputs/events.log", ""), blind.text()
        assert not blind.verified
        assert evidence.trusted(blind.path, {"outputs/events.log"}) == 0
    finally:
        stop.write_text("")
        wait_for(lambda: not pid_alive(writer), 30, "the leftover writer to stop")

    # 3. the writer stopped: the file is still, but it is not what the job wrote. The end-of-job
    #    manifest is the job's evidence; bytes appended after it are not: still a mismatch,
    #    and the .part starts with exactly the job's bytes.
    assert not _grows(log)
    evidence.keep(log)
    still = job.pull()
    assert not still.verified
    m = {m["path"]: m for m in still.verification["mismatches"]}["outputs/events.log"]
    written = end_manifest["outputs/events.log"]
    assert "altered or truncated at the source after the job wrote it" in m["reason"], m
    assert f"({written['size']} bytes written, {log.stat().st_size} now)" in m["reason"]
    part = (still.path / "outputs" / "events.log.part").read_bytes()
    assert hashlib.sha256(part[: written["size"]]).hexdigest() == written["sha256"]
    assert evidence.trusted(still.path, {"outputs/events.log"}) == 0
    gate = compute_gate(job._row, project)
    assert not gate.passed and "events.log" in gate.text()
    reached, _ = _approve_reached(gate, project)
    assert not evidence.teardown(reached, gate_should_pass=False)
    assert evidence.account(still.path) == 0
