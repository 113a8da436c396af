"""The built wheel works on its own: installed in a fresh virtual environment, away from the
checkout, its entry points, extension points, shipped profiles and notebooks all work, and
``rgt demo`` lands a verified run.

The fresh environment gets the wheel alone (``--no-deps``, nothing from the network); the
libraries it needs come from the environment the tests run in, added as a plain path (a ``.pth``
line), so its own editable install of this checkout is not seen: every import of
``rgt_jupyter`` there comes from the wheel, which the tests check.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _run(argv: list[str], cwd: Path, timeout: float = 600, **kw: object) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RGT_") and k != "PYTHONPATH"}
    proc = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"{argv}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(out), str(REPO)],
        cwd=out,
    )
    (built,) = out.glob("rgt_jupyter-*.whl")
    return built


@pytest.fixture(scope="module")
def fresh(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A new virtual environment with the wheel installed, and its python."""
    root = tmp_path_factory.mktemp("fresh")
    _run([sys.executable, "-m", "venv", str(root / "venv")], cwd=root)
    python = root / "venv" / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], root)
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root
    ).strip()
    deps = [p for p in [*site.getsitepackages(), sysconfig.get_paths()["purelib"]] if p]
    Path(purelib, "zz_test_deps.pth").write_text("\n".join(dict.fromkeys(deps)) + "\n")
    yield python


def test_the_wheel_ships_the_profiles_notebooks_and_server_config(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "rgt_jupyter/_profiles/local.toml" in names
    assert "rgt_jupyter/_example_notebooks/quickstart.ipynb" in names
    assert any(n.endswith("jupyter_server_config.d/rgt_jupyter.json") for n in names)
    # The prebuilt JupyterLab extension, where JupyterLab finds it once installed (no node, no
    # network at install), without the sources' node_modules.
    lab = "rgt_jupyter-0.1.0.data/data/share/jupyter/labextensions/rgt-jupyter/"
    assert lab + "package.json" in names
    assert any(n.startswith(lab + "static/remoteEntry.") for n in names)
    assert not [n for n in names if "node_modules" in n or n.startswith("labextension/")]
    assert {"rgt_jupyter/remote/agent.py", "rgt_jupyter/remote/job.py"} <= set(names)
    assert not [n for n in names if n.startswith(("tests/", "bench/"))]


def test_the_installed_wheel_is_what_runs(fresh: Path, tmp_path: Path) -> None:
    """Imports, the entry points, the magics and the server extension point, from the wheel."""
    code = (
        "import json, rgt_jupyter, rgt_jupyter.job, rgt_jupyter.server_ext\n"
        "from rgt_jupyter.machines.profiles import available\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "shell.run_cell('%load_ext rgt_jupyter').raise_error()\n"
        "print(json.dumps({'file': rgt_jupyter.__file__,\n"
        "  'job': rgt_jupyter.job.__file__,\n"
        "  'points': rgt_jupyter._jupyter_server_extension_points(),\n"
        "  'magics': sorted(shell.magics_manager.magics['cell']),\n"
        "  'profiles': sorted(available())}))\n"
    )
    found = json.loads(_run([str(fresh), "-c", code], cwd=tmp_path).strip().splitlines()[-1])
    venv = str(fresh.parent.parent)
    assert found["file"].startswith(venv) and found["job"].startswith(venv), found
    assert found["points"] == [{"module": "rgt_jupyter.server_ext"}]
    assert "remote_run" in found["magics"]
    assert {"local", "ssh", "slurm", "runpod", "k8s"} <= set(found["profiles"])
    assert "rgt run" in _run([str(fresh), "-m", "rgt_jupyter", "run", "--help"], cwd=tmp_path)
    rgt = fresh.parent / "rgt"
    assert "demo" in _run([str(rgt), "--help"], cwd=tmp_path)


def test_rgt_demo_from_the_wheel_lands_a_verified_run(fresh: Path, tmp_path: Path) -> None:
    project = tmp_path / "demo"
    out = _run(
        [str(fresh.parent / "rgt"), "demo", "--dir", str(project), "--timeout", "400"],
        cwd=tmp_path,
        timeout=500,
    )
    runs = [p for p in (project / "runs").iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(runs) == 1 and str(runs[0]) in out, out
    assert json.loads((runs[0] / "verification.json").read_text())["verified"] is True
    # The job ran the job API the wheel ships, not the checkout's.
    control = json.loads((runs[0] / "run.json").read_text())["job_id"]
    shipped = next((project / ".rgt").rglob(f"{control}/lib/rgt_jupyter/job.py"))
    installed = fresh.parent.parent.glob("lib/python*/site-packages/rgt_jupyter/remote/job.py")
    assert shipped.read_bytes() == next(installed).read_bytes()
