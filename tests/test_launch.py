"""Launch: the rendered launch line (golden), versioned inputs, registry, resume, CLI twins."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from rgt_jupyter.api import Job
from rgt_jupyter.launch import LaunchRequest, launch
from rgt_jupyter.launcher import DetachedLauncher
from rgt_jupyter.profiles import ProfileError, load_profile, parse_profile

GOLDEN = Path(__file__).parent / "golden"


def rgt(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RGT_PROJECT"}
    proc = subprocess.run(
        [sys.executable, "-m", "rgt_jupyter", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_launch_line_golden() -> None:
    """The exact line an SSH transport would send: every part quoted."""
    line = DetachedLauncher().launch_line("/usr/bin/python3", "/srv/rgt jobs/it's $(x)")
    assert line + "\n" == (GOLDEN / "launch_line.txt").read_text()


def test_pushed_inputs_are_versioned_per_job(project: Path) -> None:
    data = project / "data.txt"
    data.write_text("v1")
    program = "import time\ntime.sleep(2)\nprint(open('data.txt').read())\n"
    first = Job(
        launch(LaunchRequest(program=program, name="v", push=[str(data)]), project), project
    )
    data.write_text("v2")
    second = Job(
        launch(LaunchRequest(program=program, name="w", push=[str(data)]), project), project
    )
    assert first.spec["code_dir"] != second.spec["code_dir"]
    assert first.wait(60) == "finished" and second.wait(60) == "finished"
    assert first.log().strip() == "v1" and second.log().strip() == "v2"
    assert (Path(first.spec["code_dir"]) / "data.txt").read_text() == "v1"
    assert first.spec["code_hash"] != second.spec["code_hash"]


def test_registry_is_wal_and_shared(project: Path) -> None:
    job = Job(launch(LaunchRequest(program="print('x')\n", name="reg"), project), project)
    db = sqlite3.connect(project / ".rgt" / "registry.sqlite3")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
    assert job.wait(60) == "finished"
    # Another process (the CLI) sees the same job, by name and by id.
    out = rgt("jobs", cwd=project).stdout
    assert job.id in out and "finished" in out
    assert Job.from_registry("reg", project).id == job.id
    assert Job.from_registry(job.id, project).name == "reg"


FLAKY = """\
import os, rgt_jupyter.job as job
state = job.load_latest()
start = state["step"] if state else 0
print("resume", os.environ.get("RGT_RESUME"), "from", start)
for step in range(start + 1, 6):
    job.save_checkpoint({"step": step}, step=step)
    if step == 3 and os.path.exists(os.environ["FAIL_MARKER"]):
        raise RuntimeError("transient failure")
job.save_results({"started_from": start})
"""


def test_resume_from_cli_and_api(project: Path) -> None:
    marker = project / "fail-once"
    marker.write_text("")
    program = project / "flaky.py"
    program.write_text(FLAKY)
    rgt("run", "flaky.py", "--name", "flaky", "--env", f"FAIL_MARKER={marker}", cwd=project)
    first = Job.from_registry("flaky", project)
    assert first.wait(60) == "failed"
    marker.unlink()
    out = rgt("resume", "flaky", cwd=project).stdout
    second = Job.from_registry("flaky", project)
    assert second.id != first.id and second.id in out
    assert second.wait(60) == "finished"
    assert second.spec["resume"] and second.spec["attempt"] == 2
    assert second.spec["ckpt_dir"] == first.spec["ckpt_dir"]
    assert second.result() == {"started_from": 3}
    assert "resume 1 from 3" in second.log()
    # --fresh starts over in a new checkpoint dir.
    third = second.resume(fresh=True)
    assert third.wait(60) == "finished"
    assert third.spec["ckpt_dir"] != second.spec["ckpt_dir"] and not third.spec["resume"]
    assert third.result() == {"started_from": 0}
    # A finished job has nothing to resume: said so, nothing launched.
    refused = rgt("resume", "flaky", cwd=project, check=False)
    assert refused.returncode == 2 and "nothing to resume" in refused.stderr
    assert Job.from_registry("flaky", project).id == third.id


def test_cli_run_watch_pull(project: Path) -> None:
    (project / "train.py").write_text(
        "import rgt_jupyter.job as job\nfor i in range(3):\n    job.progress(i + 1, 3)\n"
        "job.save_results({'done': True})\n"
    )
    rgt("run", "train.py", "--name", "cli", cwd=project)
    watched = rgt("watch", "cli", "--wait", "--timeout", "120", cwd=project)
    assert "finished" in watched.stdout
    pulled = rgt("pull", "cli", cwd=project)
    assert "verified: yes" in pulled.stdout
    assert list((project / "runs").glob("cli-*-r1/results.json"))


def test_cli_failure_exit_codes(project: Path) -> None:
    (project / "bad.py").write_text("x = 1\nraise ValueError('nope')\n")
    rgt("run", "bad.py", "--name", "bad", cwd=project)
    watched = rgt("watch", "bad", "--wait", cwd=project, check=False)
    assert watched.returncode == 1
    assert "Cell bad.py, line 2" in watched.stdout and "ValueError: nope" in watched.stdout
    missing = rgt("watch", "nosuch", cwd=project, check=False)
    assert missing.returncode == 2 and "rgt jobs" in missing.stderr
    bad_name = rgt("run", "bad.py", "--name", "a;b", cwd=project, check=False)
    assert bad_name.returncode == 2 and "not allowed" in bad_name.stderr


@pytest.mark.parametrize("cmd", ["run", "watch", "pull", "resume", "jobs", "profiles", "demo"])
def test_cli_help(project: Path, cmd: str) -> None:
    out = rgt(cmd, "--help", cwd=project).stdout
    assert out.startswith("usage: rgt") and cmd in out


def test_console_script_and_module_agree(project: Path) -> None:
    script = Path(sys.executable).parent / "rgt"
    assert script.exists()
    a = subprocess.run([str(script), "--help"], capture_output=True, text=True, check=True)
    b = rgt("--help", cwd=project)
    assert a.stdout.replace(str(script), "rgt") == b.stdout


def test_profiles(project: Path, tmp_path: Path) -> None:
    assert "local" in rgt("profiles", cwd=project).stdout
    prof = load_profile("local", project)
    assert prof.transport == "local" and not prof.smoke_default
    bad = tmp_path / "broken.toml"
    bad.write_text('name = "broken"\nkind = 3\n')
    with pytest.raises(ProfileError, match="broken.toml"):
        parse_profile(bad)
    user = project / ".rgt" / "profiles"
    user.mkdir(parents=True)
    (user / "mine.toml").write_text(
        (Path(prof.source).read_text())
        .replace('name = "local"', 'name = "mine"')
        .replace("smoke_default = false", "smoke_default = true")
    )
    assert load_profile("mine", project).smoke_default


def test_deployed_must_equal_intended(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What lands different from what was sent blocks the launch; nothing is registered."""
    from rgt_jupyter.errors import LaunchError
    from rgt_jupyter.registry import Registry
    from rgt_jupyter.transport.local import LocalTransport

    data = project / "weights.bin"
    data.write_bytes(b"\x00" * 4096)
    real_put, real_write = LocalTransport.put, LocalTransport.write_bytes

    def torn_put(self: LocalTransport, local: Path, remote: str) -> None:
        real_put(self, local, remote)
        if "/.objects/" in remote:
            with open(remote, "r+b") as fh:  # every upload of the object arrives short
                fh.truncate(1000)

    def torn_write(self: LocalTransport, path: str, data: bytes, mode: int = 0o644) -> None:
        real_write(self, path, data[:-3] if path.endswith("rgt_cell.py") else data, mode)

    request = LaunchRequest(program="print(1)\n", name="torn", push=[str(data)])
    monkeypatch.setattr(LocalTransport, "put", torn_put)
    with pytest.raises(LaunchError, match="damaged"):
        launch(request, project)
    monkeypatch.setattr(LocalTransport, "put", real_put)
    monkeypatch.setattr(LocalTransport, "write_bytes", torn_write)
    with pytest.raises(LaunchError, match="NOT DEPLOYED.*code/rgt_cell.py"):
        launch(request, project)
    assert Registry(project).jobs() == []
    monkeypatch.setattr(LocalTransport, "write_bytes", real_write)
    job = Job(launch(request, project), project)
    assert job.wait(60) == "finished"
    assert job.spec["deployed"]["code/weights.bin"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert set(job.spec["deployed"]) >= {
        "code/rgt_cell.py",
        "code/weights.bin",
        "lib/rgt_jupyter/job.py",
    }


def test_phase0_audit_is_recorded_once_and_disclosed(project: Path) -> None:
    program = "import rgt_jupyter.job as job\njob.save_results({'a': 1})\n"
    first = Job(launch(LaunchRequest(program=program, name="a1"), project), project)
    cache = project / ".rgt" / "audit" / f"local-{first.spec['host']}.json"
    assert cache.exists()
    facts = json.loads(cache.read_text())["facts"]
    assert facts["python"] == sys.version.split()[0]
    assert set(facts["disks"]) == {
        f"{project}/.rgt/local/durable",
        f"{project}/.rgt/local/scratch",
        f"{project}/.rgt/local/jobs",
    }
    assert all(d["writable"] and d["inodes_total"] > 0 for d in facts["disks"].values())
    assert "cgroup" in facts and "torch_installed" in facts
    findings = first.spec["audit"]["findings"]
    assert any(f.startswith("durable dir:") for f in findings)
    stamp = cache.stat().st_mtime_ns
    second = Job(launch(LaunchRequest(program="print(2)\n", name="a2"), project), project)
    assert cache.stat().st_mtime_ns == stamp  # once per host
    assert second.spec["audit"] == first.spec["audit"]
    assert first.wait(60) == "finished"
    assert "machine: " in first._repr_mimebundle_()["text/plain"]
    assert first.pull().provenance["audit"]["findings"] == findings


def test_unwritable_durable_dir_blocks_the_launch(project: Path) -> None:
    from rgt_jupyter.errors import LaunchError
    from rgt_jupyter.registry import Registry

    (project / "blocker").write_text("a file where the durable dir should be")
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True)
    local = load_profile("local", project)
    (profiles / "blocked.toml").write_text(
        Path(local.source)
        .read_text()
        .replace('name = "local"', 'name = "blocked"')
        .replace(
            'durable_dir = "{project}/.rgt/local/durable"',
            'durable_dir = "{project}/blocker/durable"',
        )
    )
    with pytest.raises(LaunchError, match="not writable"):
        launch(LaunchRequest(program="print(1)\n", name="b", profile="blocked"), project)
    assert Registry(project).jobs() == []
