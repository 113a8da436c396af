"""Kills at the worst moment: a pull killed at each of its renames, registry writers killed
mid-write, a kernel killed mid-``%pull``. Every kill is a real SIGKILL of a real process."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.store.registry import Registry

from ..conftest import pid_alive, wait_for
from ..kernels import _execute, _kernel_spec_manager, _shutdown, _start_kernel, send
from ..sshbox import cutbox
from .evidence import Evidence

# A job whose checkpoint is JSON (torch hidden from it): loading it takes no torch import, so
# the dozens of pulls below stay quick. Outputs in a sub folder too.
SMALL_JOB = """\
import os, sys
sys.modules["torch"] = None
import rgt_jupyter.job as job
out = os.environ["RGT_OUT"]
os.makedirs(os.path.join(out, "sub"), exist_ok=True)
with open(os.path.join(out, "preds.csv"), "w") as fh:
    fh.write("id,pred\\n" + "".join(f"{i},{i % 3}\\n" for i in range(500)))
with open(os.path.join(out, "sub", "blob.bin"), "wb") as fh:
    fh.write(bytes(range(256)) * 2000)
job.save_checkpoint({"w": [0.5, 1.5], "step": 1}, step=1)
job.save_results({"val": {"acc": 0.75}})
"""

# Pulls a job in this process, SIGKILLing itself at the K-th rename (os.replace / os.rename),
# just before or just after the real call. Every rename is logged first.
PULLER = """\
import json, os, signal, sys
from pathlib import Path

project, job_id, k, when, log = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
calls = [0]


def wrap(real):
    def renamer(src, dst, *args, **kwargs):
        calls[0] += 1
        with open(log, "a") as fh:
            fh.write(json.dumps([calls[0], os.fspath(src), os.fspath(dst)]) + "\\n")
        if calls[0] == k and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        out = real(src, dst, *args, **kwargs)
        if calls[0] == k and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    return renamer


os.replace = wrap(os.replace)
os.rename = wrap(os.rename)

from rgt_jupyter.api import Job

run = Job.from_registry(job_id, project).pull()
print("PULLED", run.path, run.verified)
"""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _job_files(job: Job) -> dict[str, str]:
    """The job's files as a pull names them, with their sha256 (read where they were written)."""
    out: dict[str, str] = {}
    for prefix, root in (("outputs", job.spec.out_dir), ("checkpoints", job.spec.ckpt_dir)):
        for path in Path(root).rglob("*"):
            if path.is_file():
                out[f"{prefix}/{path.relative_to(root).as_posix()}"] = _sha(path)
    return out


def _finished(project: Path, program: str, name: str) -> Job:
    job = submit(LaunchRequest(program=program, name=name), project)
    assert job.wait(120) == "finished", job.log()
    return job


def _complete_run(path: Path, job_files: dict[str, str]) -> str | None:
    """Why the folder is not a complete, verified run of the job's files (None when it is)."""
    for name in ("run.json", "manifest.json", "verification.json"):
        if not (path / name).is_file():
            return f"no {name}"
    manifest = json.loads((path / "manifest.json").read_text())
    if not json.loads((path / "verification.json").read_text())["verified"]:
        return "not verified"
    listed = {e["path"]: e["sha256"] for e in manifest["files"] if e["path"] != "results.json"}
    if listed != job_files:
        return f"manifest lists {sorted(listed)}, the job wrote {sorted(job_files)}"
    for rel, sha in listed.items():
        if not (path / rel).is_file() or _sha(path / rel) != sha:
            return f"{rel} differs from the job's"
    stray = [
        p.relative_to(path).as_posix()
        for p in path.rglob("*")
        if p.is_file() and (p.name.endswith(".part") or ".tmp-" in p.name)
    ]
    if stray:
        return f"half-written files inside: {stray}"
    return None


def _rename_kind(src: str, dst: str, partial: str) -> str:
    if src == partial:
        return "run folder"
    if src.endswith(".part"):
        return "file " + Path(dst).relative_to(partial).as_posix()
    return "record " + Path(dst).name


@pytest.mark.fault(
    "F5-pull-rename-kill",
    asserts=(
        "a pull SIGKILLed just before or just after each of its renames leaves no run registered "
        "and no half-written folder taken as a run; the next pull resumes (landed bytes not "
        "sent again), registers exactly one verified run whose every file's sha256 is the "
        "job's, and leaves no claimed empty folder, partial or temporary behind"
    ),
    mutation=[
        (
            "rgt_jupyter/run/pull/resume.py",
            "                entry.unlink()\n",
            "                pass\n",
        ),
        (
            "rgt_jupyter/run/pull/resume.py",
            "                    folder.rmdir()\n",
            "                    pass\n",
        ),
        (
            "rgt_jupyter/run/pull/resume.py",
            "                registry.add_run(folder.name, job_id, folder, verified)\n",
            "                continue\n",
        ),
    ],
)
def test_pull_killed_at_each_rename(project: Path, tmp_path: Path, evidence: Evidence) -> None:
    """SIGKILL at every rename of a pull (the k-th ``os.replace``/``os.rename``, before and after
    the call), then a plain pull.

    Protection: rgt_jupyter/run/pull/resume.py: ``settle_interrupted_pull`` (called by ``pull.pull``
    before it pulls) removes temporaries of interrupted record writes from the partial folder
    (``entry.unlink()``), removes an empty folder claimed for a run that never landed
    (``folder.rmdir()``) and registers a run folder that landed whole but was never registered,
    returning it instead of pulling a second time (``registry.add_run(...)``); each removed, the
    case fails: a temporary is carried into the next run, the empty claim stays beside the runs,
    the landed run is left unregistered beside a second one.
    """
    job = _finished(project, SMALL_JOB, "rk")
    evidence.keep(job.spec.out_dir, job.spec.ckpt_dir)
    job_files = _job_files(job)
    sizes = {
        rel: (Path(job.spec.out_dir if top == "outputs" else job.spec.ckpt_dir) / sub)
        .stat()
        .st_size
        for rel in job_files
        for top, sub in [rel.split("/", 1)]
    }
    total = sum(sizes.values())
    root = project / "runs"
    partial = str(root.resolve() / f".partial-{job.id}")
    script = tmp_path / "puller.py"
    script.write_text(PULLER)
    registry = Registry(project)
    seen: dict[str, list[str]] = {}
    last_run: Path | None = None
    for when in ("before", "after"):
        k = 0
        while True:
            k += 1
            log = tmp_path / f"renames-{when}-{k}.jsonl"
            registered = [r["run_id"] for r in registry.runs(job.id)]
            proc = subprocess.run(
                [sys.executable, str(script), str(project), job.id, str(k), when, str(log)],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            renames = [json.loads(line) for line in log.read_text().splitlines()]
            if proc.returncode == 0:  # past the pull's last rename: nothing was killed
                assert len(renames) == k - 1, proc.stdout
                seen[when] = [_rename_kind(s, d, partial) for _, s, d in renames]
                # that pull ran whole: the next iteration starts from a clean slate
                last_run = Path(proc.stdout.split()[1])
                break
            assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
            assert len(renames) == k
            where = f"killed {when} rename {k} ({_rename_kind(renames[-1][1], renames[-1][2], partial)})"

            # Right after the kill: nothing new is registered; a folder under a run's name is
            # either the empty claim or a complete, verified run; files under their final names
            # in the partial are the job's bytes.
            assert [r["run_id"] for r in registry.runs(job.id)] == registered, where
            assert [r.run_id for r in Job.from_registry(job.id, project).runs()] == registered
            for folder in root.iterdir():
                if folder.name.startswith(".") or folder.name in registered:
                    continue
                if any(folder.iterdir()):
                    why = _complete_run(folder, job_files)
                    assert why is None, f"{where}: {folder.name} is half a run ({why})"
            part_dir, landed = Path(partial), 0
            for rel, sha in job_files.items():
                if (part_dir / rel).is_file():
                    assert _sha(part_dir / rel) == sha, f"{where}: {rel} landed wrong"
                    landed += sizes[rel]
                elif (part_dir / f"{rel}.part").is_file():
                    landed += (part_dir / f"{rel}.part").stat().st_size

            # The next pull, as %pull makes it: resumes, one verified run, nothing left behind.
            run = Job.from_registry(job.id, project).pull()
            now = [r["run_id"] for r in registry.runs(job.id)]
            assert now == [*registered, run.run_id], f"{where}: runs {now} after {registered}"
            assert run.verified, f"{where}: {run.text()}"
            assert _complete_run(run.path, job_files) is None, where
            if renames[-1][1] == partial and when == "after":  # it had landed: registered now
                assert run.path.name == Path(renames[-1][2]).name, where
                kinds = [e["kind"] for e in registry.history(job.id)]
                assert kinds[-2:] == ["pulled", "pull_recovered"], where
            else:  # resumed: only the bytes that had not landed were sent
                sent = run.verification["bytes_sent"]
                assert sent == total - landed, f"{where}: {sent} bytes sent, {landed} had landed"
            left = sorted(
                p.name for p in root.iterdir() if p.name not in now and not p.name.startswith(".")
            )
            assert not left, f"{where}: left beside the runs: {left}"
            assert not Path(partial).exists(), f"{where}: the partial folder is left"
            last_run = run.path
    for when, kinds in seen.items():
        files = [k for k in kinds if k.startswith("file ")]
        assert sorted(f.removeprefix("file ") for f in files) == sorted(job_files), (when, kinds)
        assert kinds[-1] == "run folder", (when, kinds)
    assert last_run is not None
    assert evidence.account(last_run) == 0


# Registry writes as launches, watchers, pulls and the gate make them, in a seeded random mix,
# each logged (one line, O_APPEND) only after it returned. Runs until it is killed.
WRITER = """\
import json, os, random, sys
from pathlib import Path

from rgt_jupyter.store.registry import Registry

project, tag, seed, log = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
rnd = random.Random(seed)
fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def done(**record):
    os.write(fd, (json.dumps(record) + "\\n").encode())


jobs = []
n = 0
while True:
    n += 1
    reg = Registry(project)  # a new opener each time, as each kernel, CLI or watcher is
    op = rnd.choices(
        ["add_job", "event", "set_state", "update_spec", "add_run", "decide"], [2, 2, 2, 2, 4, 1]
    )[0]
    mark = f"{tag}-{n}"
    if op == "add_job" or not jobs:
        reg.add_job(mark, "killed", mark, 1, "local", "localhost", {"job_id": mark, "n": n})
        jobs.append(mark)
        done(op="add_job", job=mark)
        continue
    job = rnd.choice(jobs)
    if op == "event":
        reg.event(job, "tick", mark=mark)
    elif op == "set_state":
        changed = reg.set_state(job, rnd.choice(["running", "finished", "lost"]), mark=mark)
        done(op="set_state", job=job, mark=mark, changed=changed)
        continue
    elif op == "update_spec":
        reg.update_spec(job, **{mark: n})
    elif op == "add_run":
        reg.add_run(f"{job}-r{n}", job, project / "runs" / f"{job}-r{n}", True)
        mark = f"{job}-r{n}"
    else:
        reg.decide(job, "refuse", mark=mark)
    done(op=op, job=job, mark=mark)
"""

# One add_run killed at the worst moment: right after its first row is written, before the
# second (the connection factory is the only thing changed; the registry code is as shipped).
TORN_ADD_RUN = """\
import os, signal, sqlite3, sys
from pathlib import Path

real_connect = sqlite3.connect


class Conn(sqlite3.Connection):
    def execute(self, sql, *args):
        cursor = super().execute(sql, *args)
        if sql.startswith("INSERT INTO runs"):
            os.kill(os.getpid(), signal.SIGKILL)
        return cursor


sqlite3.connect = lambda *a, **k: real_connect(*a, factory=Conn, **k)
from rgt_jupyter.store.registry import Registry

project = Path(sys.argv[1])
Registry(project).add_run("torn-r1", sys.argv[2], project / "runs" / "torn-r1", True)
"""

# Reads as a new kernel or the CLI does, over and over, until told to stop; any error ends it.
READER = """\
import os, sys
from pathlib import Path

from rgt_jupyter.store.registry import Registry

project, stop = Path(sys.argv[1]), sys.argv[2]
reads = 0
while not os.path.exists(stop):
    reg = Registry(project)
    rows = reg.jobs()
    for row in rows[-3:]:
        reg.history(row["id"])
        reg.runs(row["id"])
    reg.latest()
    reg.decisions()
    reads += 1
print("READS", reads)
"""


def _registry_rows(project: Path) -> dict[str, Any]:
    """The registry's contents, read with plain SQLite (read only)."""
    import sqlite3

    db = sqlite3.connect(f"file:{project / '.rgt' / 'registry.sqlite3'}?mode=ro", uri=True)
    try:
        return {
            "integrity": db.execute("PRAGMA integrity_check").fetchall(),
            "journal": db.execute("PRAGMA journal_mode").fetchone()[0],
            "jobs": {r[0]: json.loads(r[1]) for r in db.execute("SELECT id, spec FROM jobs")},
            "events": [
                (r[0], r[1], json.loads(r[2]))
                for r in db.execute("SELECT job_id, kind, data FROM events ORDER BY seq")
            ],
            "runs": {r[0]: r[1] for r in db.execute("SELECT run_id, job_id FROM runs")},
            "decisions": [json.loads(r[0]) for r in db.execute("SELECT data FROM decisions")],
        }
    finally:
        db.close()


@pytest.mark.fault(
    "F5-registry-kill",
    asserts=(
        "registry writers SIGKILLed at 30 seeded random moments, one while another process "
        "reads throughout: the registry opens, integrity_check is ok, it is in WAL mode, every "
        "write that returned before a kill is there, no write is there in part (a run without "
        "its event, a job without its creation), the reader never saw an error, and a launch "
        "and a pull work afterwards"
    ),
    mutation=(
        "rgt_jupyter/store/registry.py",
        '        with self._connect() as db, _atomic(db):\n            db.execute(\n                "INSERT INTO runs',
        '        with self._connect() as db:\n            db.execute(\n                "INSERT INTO runs',
    ),
)
def test_registry_writers_killed(project: Path, tmp_path: Path, evidence: Evidence) -> None:
    """SQLite under kills: WAL, one transaction per write that changes more than one row.

    Protection: rgt_jupyter/store/registry.py: ``add_run`` records the run and its ``pulled`` event
    in one transaction (``with self._connect() as db, _atomic(db):``, BEGIN IMMEDIATE ...
    COMMIT); removed, a writer killed between the two (once at random, once exactly there)
    leaves a run without its event.
    """
    job = _finished(project, SMALL_JOB, "before")  # a job of the project, pulled afterwards
    evidence.keep(job.spec.out_dir, job.spec.ckpt_dir)
    writer_py, reader_py = tmp_path / "writer.py", tmp_path / "reader.py"
    writer_py.write_text(WRITER)
    reader_py.write_text(READER)
    stop = tmp_path / "stop-reading"
    reader = subprocess.Popen(
        [sys.executable, str(reader_py), str(project), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    rnd = random.Random(20240605)
    logs = []
    try:
        for i in range(30):
            log = tmp_path / f"writes-{i}.jsonl"
            log.touch()
            logs.append(log)
            writer = subprocess.Popen(
                [sys.executable, str(writer_py), str(project), f"w{i}", str(i), str(log)],
                stderr=subprocess.PIPE,
                text=True,
            )
            wait_for(lambda log=log, w=writer: log.stat().st_size > 0 or w.poll() is not None, 30)
            time.sleep(rnd.uniform(0.0, 0.25))
            assert writer.poll() is None, f"writer {i} ended by itself: {writer.stderr.read()}"
            os.kill(writer.pid, signal.SIGKILL)
            assert writer.wait(10) == -signal.SIGKILL
            writer.stderr.close()
            assert reader.poll() is None, f"the reader failed: {reader.communicate()}"

            # After each kill: the registry opens, is whole, is WAL, holds every returned write.
            Registry(project)
            rows = _registry_rows(project)
            assert rows["integrity"] == [("ok",)], f"after kill {i}: {rows['integrity']}"
            assert rows["journal"] == "wal"
            for line in log.read_text().splitlines():
                w = json.loads(line)
                where = f"after kill {i}: {w}"
                if w["op"] == "add_job":
                    assert w["job"] in rows["jobs"], where
                elif w["op"] == "update_spec":
                    assert w["mark"] in rows["jobs"][w["job"]], where
                elif w["op"] == "add_run":
                    assert rows["runs"].get(w["mark"]) == w["job"], where
                elif w["op"] == "decide":
                    assert any(d.get("mark") == w["mark"] for d in rows["decisions"]), where
                elif w["op"] == "event" or (w["op"] == "set_state" and w["changed"]):
                    assert any(e[2].get("mark") == w["mark"] for e in rows["events"]), where
            # Nothing in part: each job has its one creation, each run its one pulled event.
            created = [e[0] for e in rows["events"] if e[1] == "created"]
            assert sorted(created) == sorted(rows["jobs"]), f"after kill {i}"
            pulled = [e[2]["run_id"] for e in rows["events"] if e[1] == "pulled"]
            assert sorted(pulled) == sorted(rows["runs"]), (
                f"after kill {i}: runs without their event: {set(rows['runs']) - set(pulled)}"
            )
    finally:
        stop.write_text("")
        said = reader.communicate(timeout=60)
    assert reader.returncode == 0, said
    assert int(said[0].split()[-1]) > 0, said
    assert sum(len(log.read_text().splitlines()) for log in logs) >= 30

    # The one moment a random kill rarely hits: between the two rows of add_run.
    torn = subprocess.run(
        [sys.executable, "-c", TORN_ADD_RUN, str(project), job.id],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert torn.returncode == -signal.SIGKILL, torn.stderr
    rows = _registry_rows(project)
    assert rows["integrity"] == [("ok",)]
    assert "torn-r1" not in rows["runs"], "a run was recorded without its pulled event"

    # A fresh launch and a pull work on the registry the kills left.
    run = Job.from_registry("before", project).pull()
    assert run.verified, run.text()
    after = _finished(project, SMALL_JOB, "after")
    assert after.pull().verified
    assert evidence.account(run.path) == 0


BIG_MIB = 48
#: The proxy's rate in front of sshd: the pull of the big file takes about two seconds.
RATE = 24 << 20
BIG_JOB = f"""\
import os
import rgt_jupyter.job as job
with open(os.path.join(os.environ["RGT_OUT"], "big.bin"), "wb") as fh:
    for _ in range({BIG_MIB}):
        fh.write(os.urandom(1 << 20))
job.save_results({{"mib": {BIG_MIB}}})
"""


@pytest.mark.fault(
    "F10-kernel-pull",
    asserts=(
        "a kernel SIGKILLed in the middle of '%pull' of a big file over SSH leaves no run; "
        "'%pull' in a new kernel resumes (only the bytes not yet landed cross the wire again), "
        "ends verified, and exactly one run appears, its file the job's to the byte"
    ),
    mutation=(
        "rgt_jupyter/run/pull/batch.py",
        "    if st.st_size > want.size:\n",
        "    if True:\n",
    ),
)
def test_kernel_killed_mid_pull(
    project: Path, box: Path, sshd: Any, tmp_path: Path, evidence: Evidence
) -> None:
    """``%pull`` in a real Jupyter kernel, over SSH through a throttled proxy, the kernel killed
    with SIGKILL a third of the way through the transfer.

    Protection: rgt_jupyter/run/pull/batch.py: ``prepare`` resumes from the ``.part`` an interrupted
    pull left (its bytes re-hashed, the stream asked for the rest from that offset); with every
    part discarded instead, the new kernel's pull sends every byte again.
    """
    with cutbox(sshd, box) as proxy:
        job = submit(
            LaunchRequest(program=BIG_JOB, name="big", profile="box", host="cutbox"), project
        )
        assert job.wait(180) == "finished", job.log()
        proxy.throttle(RATE)
        out = Path(job.spec.out_dir)  # the remote home is on this disk
        evidence.keep(out)
        total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        big = out / "big.bin"
        part = project / "runs" / f".partial-{job.id}" / "outputs" / "big.bin.part"
        env = {"RGT_SSH_CONFIG": os.environ["RGT_SSH_CONFIG"], "RGT_AUDIT_TORCH": "0"}
        ksm = _kernel_spec_manager(tmp_path)
        km1 = kc1 = km2 = kc2 = None
        try:
            km1, kc1 = _start_kernel(project, ksm, env)
            _execute(kc1, "%load_ext rgt_jupyter")
            send(kc1, "r = %pull big")
            deadline = time.monotonic() + 120
            size = 0
            while time.monotonic() < deadline:
                size = part.stat().st_size if part.exists() else 0
                if size >= big.stat().st_size // 3:
                    break
                time.sleep(0.005)
            kernel_pid = km1.provisioner.process.pid
            os.kill(kernel_pid, signal.SIGKILL)
            km1.provisioner.process.wait(timeout=10)
            _shutdown(km1, kc1)
            km1 = kc1 = None
            assert not pid_alive(kernel_pid)
            landed = part.stat().st_size
            assert big.stat().st_size // 3 <= landed < big.stat().st_size, (
                f"killed at {landed} of {big.stat().st_size} bytes: not in the middle of the pull"
            )
            time.sleep(0.5)  # the transfer's own ssh process notices its reader is gone
            landed = part.stat().st_size
            assert landed < big.stat().st_size

            # Nothing registered, no run folder: the interrupted pull is only its partial.
            assert Registry(project).runs(job.id) == []
            assert [p.name for p in (project / "runs").iterdir()] == [f".partial-{job.id}"]

            wire_before = proxy.bytes_down
            km2, kc2 = _start_kernel(project, ksm, env)
            _execute(kc2, "%load_ext rgt_jupyter")
            said = _execute(
                kc2,
                "r = %pull big\n"
                "v = r.verification\n"
                "print('PULLED', r.verified, v['bytes_sent'], v['bytes_total'], r.path)\n",
                timeout=180,
            )
            wire = proxy.bytes_down - wire_before
        finally:
            _shutdown(km1, kc1)
            _shutdown(km2, kc2)
    line = next(x for x in said.splitlines() if x.startswith("PULLED"))
    _, verified, sent, listed, path = line.split(maxsplit=4)
    assert verified == "True", said
    assert int(listed) == total
    assert int(sent) == total - landed, f"{sent} bytes sent, {total - landed} were missing"
    assert wire < total - landed + (4 << 20), f"{wire} bytes crossed the wire for {total - landed}"
    runs = Registry(project).runs(job.id)
    assert [r["path"] for r in runs] == [path] and runs[0]["verified"]
    assert [p.name for p in (project / "runs").iterdir()] == [Path(path).name]
    pulled = Path(path) / "outputs" / "big.bin"
    assert pulled.stat().st_size == big.stat().st_size and _sha(pulled) == _sha(big)
    assert evidence.account(path) == 0
