"""Hostile names and paths: refused by the documented allowlist before anything runs, or handled
exactly (never interpreted by a shell)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from rgt_jupyter import submit
from rgt_jupyter.errors import UsageError as RgtUsageError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.store.names import JOB_NAME_RULE, check_job_name
from rgt_jupyter.store.registry import Registry

from .evidence import Evidence

ALLOWLIST = (
    "rgt_jupyter/store/names.py",
    'if not isinstance(name, str) or not JOB_NAME_RE.fullmatch(name) or ".." in name:',
    "if not isinstance(name, str):",
)

HOSTILE_NAMES = [
    "a b",
    "it's",
    'say"hi',
    "a;b",
    "$(touch pwned)",
    "`touch pwned`",
    "a\nb",
    "-rf",
    "--fresh",
    "../escape",
    "a/b",
    ".hidden",
    "x" * 65,
    "",
    "a..b",
    "tab\there",
    "uni\u00e9",
]
# Names and contents of files the job must see exactly as given.
HOSTILE_FILES = [
    "my data.txt",
    "it's.txt",
    'q"uote.txt',
    "semi;colon.txt",
    "$(touch pwned).txt",
    "`touch pwned`.txt",
    "-leading.txt",
    "new\nline.txt",
    "back\\slash.txt",
]


def _no_pwned(*roots: Path) -> None:
    for root in roots:
        assert not list(root.rglob("pwned")), f"a shell ran something under {root}"


@pytest.mark.fault(
    "B-names",
    asserts="each hostile name is refused with the rule before anything is created: no job, no "
    "control dir, no shell ran, the sentinel beside the project untouched",
    mutation=ALLOWLIST,
)
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_job_names_are_refused_before_anything_runs(
    project: Path, name: str, evidence: Evidence
) -> None:
    """A hostile ``--name`` through the API.

    Protection: rgt_jupyter/store/names.py ``check_job_name``: the allowlist regex and the '..' rule;
    removed, the name reaches paths and command lines and the case fails.
    """
    evidence.sentinel(project.parent / "beside")
    with pytest.raises(RgtUsageError) as info:
        submit(LaunchRequest(program="open('ran', 'w').write('x')\n", name=name), project)
    assert JOB_NAME_RULE in str(info.value)
    assert Registry(project).jobs() == []
    assert not (project / ".rgt" / "local").exists()
    _no_pwned(project)
    assert evidence.account(project.parent / "beside") == 0


@pytest.mark.fault(
    "B-names",
    asserts="each hostile --name given to %%remote_run is a UsageError naming the rule; no job "
    "is registered and the sentinel beside the project is untouched",
    mutation=ALLOWLIST,
)
@pytest.mark.parametrize("name", [n for n in HOSTILE_NAMES if "\n" not in n and n])
def test_hostile_names_through_the_magic(
    ip: Any, project: Path, name: str, evidence: Evidence
) -> None:
    """A hostile ``--name`` through the cell magic.

    Protection: rgt_jupyter/store/names.py ``check_job_name``: the allowlist; removed, the magic
    launches a job under that name and the case fails.
    """
    evidence.sentinel(project.parent / "beside")
    with capture_output():
        result = ip.run_cell(f"%%remote_run --name={shlex.quote(name)}\nprint(1)\n")
    assert isinstance(result.error_in_exec, UsageError)
    assert "not allowed" in str(result.error_in_exec)
    assert Registry(project).jobs() == []
    _no_pwned(project)
    assert evidence.account(project.parent / "beside") == 0


def test_allowlist_accepts_ordinary_names() -> None:
    for name in ("resnet50", "run-1", "ablation_lr.0.1", "A1", "9lives"):
        assert check_job_name(name) == name


@pytest.mark.fault(
    "B-names",
    asserts="a project, pushed files and an env value full of shell syntax reach the job "
    "byte for byte; no shell interprets them; the sources and a sentinel stay untouched",
    mutation=(
        "rgt_jupyter/backends/detached/launcher.py",
        'setsid "$python" -u "$control/bundle.zip" run "$control"',
        'setsid "$python" -u $control/bundle.zip run $control',
    ),
)
def test_hostile_paths_are_handled_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, evidence: Evidence
) -> None:
    """Hostile paths (spaces, quotes, ``$(...)``, backticks, newlines, a leading '-').

    Protection: rgt_jupyter/backends/detached/launcher.py: the launch script quotes every path it is given
    (``"$control"``) and receives them as positional parameters; unquoted where it starts the
    agent, the control dir of a project under such a path splits into words, the job never
    starts and the case fails.
    """
    # The project itself lives under a hostile path; so do the pushed files.
    project = tmp_path / "proj $(touch pwned) 'q' \"d\" ;x\n-y"
    project.mkdir()
    monkeypatch.setenv("RGT_PROJECT", str(project))
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "in $(touch pwned)"
    src.mkdir()
    evidence.sentinel(tmp_path / "beside")
    folder = src / "dir ;with `odd` names"
    folder.mkdir()
    for i, fname in enumerate(HOSTILE_FILES):
        (src / fname).write_text(f"content {i}")
        (folder / fname).write_text(f"nested {i}")
    evidence.keep(src)
    program = (
        "import os\nimport rgt_jupyter.job as job\n"
        "out = {}\n"
        "for root, dirs, files in os.walk('.'):\n"
        "    for f in files:\n"
        "        p = os.path.join(root, f)\n"
        "        if f != 'rgt_cell.py':\n"
        "            out[p] = open(p).read()\n"
        "job.save_results({'files': out, 'env': os.environ['TRICKY']})\n"
    )
    tricky = "$(touch pwned); `touch pwned` 'x' \"y\" \\n"
    job = submit(
        LaunchRequest(
            program=program,
            name="hostile",
            push=[str(src / f) for f in HOSTILE_FILES] + [str(folder)],
            env={"TRICKY": tricky},
        ),
        project,
    )
    assert job.wait(60) == "finished", job.log()
    results = job.result()
    expected = {f"./{f}": f"content {i}" for i, f in enumerate(HOSTILE_FILES)}
    expected.update({f"./{folder.name}/{f}": f"nested {i}" for i, f in enumerate(HOSTILE_FILES)})
    assert results["files"] == expected
    assert results["env"] == tricky
    run = job.pull()
    assert run.verified
    assert run.path.parent == project / "runs"
    _no_pwned(tmp_path)
    assert evidence.account(src, tmp_path / "beside") == 0
