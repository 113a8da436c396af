"""Shared fixtures: a fresh project per test, an IPython shell with the extension loaded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from rgt_jupyter import submit
from rgt_jupyter.api import Job

from .s3server import bucket, s3_server  # noqa: F401 - a real S3 API server (moto) and a bucket
from .slurm_cluster import slurm  # noqa: F401 - a session fixture: the real one-node Slurm cluster
from .sshbox import box  # noqa: F401 - an ssh_config alias and a profile on the real sshd
from .sshd import sshd  # noqa: F401 - a session fixture: the real OpenSSH server


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty project dir, used by the API, the magics and the CLI.

    No other ``RGT_*`` variable leaks in from the environment, and job processes of the
    project that are still running at teardown are killed.
    """
    proj = tmp_path / "proj"
    proj.mkdir()
    for key in [k for k in os.environ if k.startswith("RGT_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("RGT_PROJECT", str(proj))
    monkeypatch.setenv("RGT_CACHE_DIR", str(tmp_path / "cache"))  # the hash record, per test
    # Importing torch in every new project's host audit would cost seconds a test; the audit
    # tests turn the probe back on.
    monkeypatch.setenv("RGT_AUDIT_TORCH", "0")
    monkeypatch.chdir(proj)
    try:
        yield proj
    finally:
        stop_leftovers(proj)


def stop_leftovers(project: Path) -> None:
    """Kill jobs of this project that are still running (only when a test failed midway)."""
    jobs = project / ".rgt" / "local" / "jobs"
    if not jobs.is_dir():
        return
    for control in jobs.iterdir():
        status_path = control / "status.json"
        if (control / "exit.json").exists() or not status_path.exists():
            continue
        status = json.loads(status_path.read_text())
        for key in ("job_pid", "agent_pid"):
            pid = status.get(key)
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except (OSError, TypeError):
                continue
            if str(control).encode() in cmdline:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def ip(project: Path) -> Iterator[Any]:
    """An IPython shell with ``%load_ext rgt_jupyter`` done; errors stay in the result."""
    shell = InteractiveShell.instance()
    assert shell is not None
    if "remote_run" not in shell.magics_manager.magics["cell"]:
        shell.run_line_magic("load_ext", "rgt_jupyter")
    shell.magics_manager.registry["RgtMagics"].last_job = None
    yield shell


def wait_for(predicate: Any, timeout: float = 60.0, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns a truthy value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def control_json(job: Job, name: str) -> dict[str, Any] | None:
    """A JSON file of the job's control dir, or None."""
    path = Path(job.spec.control_dir) / name
    return json.loads(path.read_text()) if path.exists() else None


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            data = fh.read()
    except OSError:
        return False
    return data[data.rindex(")") + 2] not in "ZX"


os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")


def run_cell(ip: Any, source: str) -> tuple[Any, str]:
    """Run a cell; return its result and everything it printed or displayed (as text)."""
    from IPython.utils.capture import capture_output

    with capture_output() as out:
        result = ip.run_cell(source)
    shown = "\n".join(str(o.data.get("text/plain", "")) for o in out.outputs)
    return result, out.stdout + out.stderr + shown


def rgt(
    *args: str,
    cwd: Path,
    check: bool = True,
    timeout: float = 300,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``rgt ARGS`` (``python -m rgt_jupyter``) in ``cwd``, finding the project from there
    (``RGT_PROJECT`` is left out of ``env``, this process's environment by default)."""
    proc = subprocess.run(
        [sys.executable, "-m", "rgt_jupyter", *args],
        cwd=cwd,
        env={k: v for k, v in (os.environ if env is None else env).items() if k != "RGT_PROJECT"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def running_job(project: Path, program: str, name: str, grace: float = 30.0) -> Job:
    """Launch ``program`` on the local profile and wait for its first progress record."""
    from rgt_jupyter.jobs.request import LaunchRequest

    job = submit(LaunchRequest(program=program, name=name, grace_s=grace), project)
    wait_for(lambda: job.snapshot().progress, 30, "the job's first progress record")
    return job


def sigkill_job_and_agent(status: dict[str, Any]) -> None:
    """SIGKILL the job and its agent named by a ``status.json`` record (a reboot, in effect)."""
    for key in ("job_pid", "agent_pid"):
        try:
            os.kill(int(status[key]), signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Mount small tmpfs file systems under the test's tmp dir; all are unmounted at the end."""
    mounted: list[Path] = []

    def mount(name: str, size: str = "64m", inodes: int | None = None) -> Path:
        target = tmp_path / name
        target.mkdir()
        opts = [f"size={size}", "mode=0755"] + ([f"nr_inodes={inodes}"] if inodes else [])
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", ",".join(opts), "rgt-fault", str(target)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, f"cannot mount a tmpfs (root is needed): {proc.stderr}"
        mounted.append(target)
        return target

    try:
        yield mount
    finally:
        for target in reversed(mounted):
            subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)
