"""The agent: stdlib only on Python 3.8+, signal forwarding with a grace period, states from the
process table (a vanished agent is ``lost``, never ``running`` forever)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import rgt_jupyter
import rgt_jupyter.remote
from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.jobs.request import LaunchRequest

from .conftest import control_json, running_job

REMOTE = Path(rgt_jupyter.remote.__file__).parent
#: Every file of the folder that travels to the job's machine.
TRAVELLING = sorted(p.name for p in REMOTE.glob("*.py"))


def python38() -> str:
    """A Python 3.8 interpreter (pyenv's on these machines); the test fails loudly without one."""
    candidates = sorted(str(p) for p in Path("/root/.pyenv/versions").glob("3.8*/bin/python"))
    candidates.append(shutil.which("python3.8"))  # may be a shim that refuses to run
    for c in candidates:
        if c and Path(c).exists():
            return c
    raise AssertionError("no Python 3.8 found: the agent's 3.8 compatibility cannot be checked")


def test_every_file_of_the_travelling_folder_is_declared() -> None:
    """A file added to ``remote/`` travels only once ``SHIPPED`` names it (and is then held to the
    rules below); ``__init__`` is the folder's own face, read here only."""
    assert sorted([*rgt_jupyter.remote.SHIPPED, "__init__.py"]) == TRAVELLING


@pytest.mark.parametrize("name", TRAVELLING)
def test_travelling_files_are_stdlib_only_and_parse_as_python38(name: str) -> None:
    """Standard library only, Python 3.8 syntax, and no import of rgt_jupyter: not even a
    relative one (each file runs alone on the job's machine)."""
    source = (REMOTE / name).read_text()
    tree = ast.parse(source, feature_version=(3, 8))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [(node.module or "").split(".")[0]] if node.level == 0 else ["<relative>"]
        else:
            continue
        for mod in mods:
            assert mod in sys.stdlib_module_names or mod == "__future__", f"{name} imports {mod}"


def test_the_public_job_module_is_the_travelling_one() -> None:
    """``import rgt_jupyter.job`` gives the very module that travels (one module object), and
    the job receives that file's bytes as ``rgt_jupyter/job.py``."""
    import rgt_jupyter.job
    import rgt_jupyter.remote.job
    from rgt_jupyter.jobs.bundle import job_files
    from rgt_jupyter.jobs.request import LaunchRequest

    assert rgt_jupyter.job is rgt_jupyter.remote.job
    shipped = job_files(LaunchRequest(program="pass\n"), {})["lib/rgt_jupyter/job.py"]
    assert shipped == (REMOTE / "job.py").read_bytes()


def test_job_runs_on_python38_with_nothing_installed(project: Path) -> None:
    py38 = python38()
    program = (
        "import sys, rgt_jupyter.job as job\n"
        "state = job.load_latest()\n"
        "start = state['step'] if state else 0\n"
        "for step in range(start + 1, 4):\n"
        "    job.progress(step, 3, loss=1.0 / step)\n"
        "    job.save_checkpoint({'w': [step] * 3}, step=step, keep=2)\n"
        "job.save_results({'python': sys.version.split()[0], 'resumed_from': start})\n"
    )
    job = submit(LaunchRequest(program=program, name="py38", python=py38), project)
    assert job.wait(60) == "finished", job.log()
    results = job.result()
    assert results["python"].startswith("3.8") and results["resumed_from"] == 0
    ckpts = sorted(os.listdir(job.spec.ckpt_dir))
    assert ckpts == [
        "ckpt-0000000002.json",
        "ckpt-0000000002.json.sha256",
        "ckpt-0000000003.json",
        "ckpt-0000000003.json.sha256",
    ]
    run = job.pull()
    assert run.verified, run.text()
    assert run.provenance["python"].startswith("3.8")


def test_grace_period_then_kill(project: Path) -> None:
    program = (
        "import signal, time, rgt_jupyter.job as job\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "for i in range(10**6):\n"
        "    job.progress(i)\n"
        "    time.sleep(0.05)\n"
    )
    job = running_job(project, program, "stubborn", grace=1.0)
    job.stop()
    assert job.wait(30) == "preempted"
    exit_rec = control_json(job, "exit.json")
    assert exit_rec is not None and exit_rec["signal"] == "SIGKILL"


def test_job_survives_its_launcher_session(project: Path) -> None:
    """The agent runs in its own session: killing the launching process group leaves it alone."""
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from rgt_jupyter import submit\n"
        "job = submit('import time\\ntime.sleep(3)\\n"
        'import rgt_jupyter.job as j\\nj.save_results({"ok": 1})\\n\', Path(sys.argv[1]),'
        " name='orphan')\n"
        "print(job.id, flush=True)\n"
        "os.killpg(0, 9)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(project)],
        capture_output=True,
        text=True,
        start_new_session=True,
        check=False,
    )
    assert proc.returncode == -9
    job = Job.from_registry(proc.stdout.strip(), project)
    assert job.wait(60) == "finished"
    assert job.result() == {"ok": 1}


def test_import_is_cheap() -> None:
    code = (
        "import sys, rgt_jupyter\n"
        "heavy = [m for m in ('paramiko', 'ipywidgets', 'torch', 'IPython', 'numpy') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "import rgt_jupyter.job, rgt_jupyter.api\n"
        "heavy = [m for m in ('paramiko', 'ipywidgets', 'torch') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_job_module_leaves_the_kernels_signal_handlers_alone() -> None:
    code = (
        "import signal, rgt_jupyter.job\n"
        "assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RGT_")}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
