"""The magics' manners: tab completion of names and flags, ``%watch`` saying which job it
chose, re-attach without a cell id, ``%remote_run --help``, launch phases, the traits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from IPython.core.completer import provisionalcompleter
from IPython.core.error import UsageError

from rgt_jupyter import submit
from rgt_jupyter.store.registry import Registry

from .conftest import run_cell, wait_for

SLEEPS = "import time\nfrom rgt_jupyter import job\njob.progress(1, 100)\ntime.sleep(600)\n"


def _complete(ip: Any, line: str) -> list[str]:
    """What a kernel offers at the end of ``line`` (ipykernel asks ``Completer.completions``)."""
    with provisionalcompleter():
        return sorted({c.text for c in ip.Completer.completions(line, len(line))})


def test_tab_completes_job_group_and_profile_names_and_flags(ip: Any, project: Path) -> None:
    (project / "slides.txt").write_text("a file that must not be offered for a job name")
    single = submit("print(1)\n", project, name="slowpoke")
    group = submit("print(1)\n", project, name="sweep", seeds="0-1")
    wait_for(lambda: single.state == "finished", 120, "the job")
    wait_for(lambda: set(group.states().values()) == {"finished"}, 120, "the group")

    assert _complete(ip, "%watch sl") == ["slowpoke"]
    assert "sweep" in _complete(ip, "%pull sw")
    assert "sweep-s0" in _complete(ip, "%teardown sweep-")
    assert _complete(ip, "%watch --wait slo") == ["slowpoke"]
    assert _complete(ip, "%%remote_run --pro") == ["--profile"]
    assert _complete(ip, "%%remote_run --name x --profile ss") == ["ssh"]
    assert "--timeout" in _complete(ip, "%watch --t")
    assert all(m.startswith("--") for m in _complete(ip, "%pull --"))


def test_watch_without_a_name_says_which_job_and_why(ip: Any, project: Path) -> None:
    job = submit("print(1)\n", project, name="first")
    wait_for(lambda: job.state == "finished", 120, "the job")
    _, text = run_cell(ip, "%watch")
    assert f"%watch: {job.id} (the project's newest job; name another: %watch NAME)" in text
    _, text = run_cell(ip, "%watch")
    assert f"%watch: {job.id} (the last job used in this kernel" in text
    _, text = run_cell(ip, "%watch first")
    assert "name another" not in text


def test_a_rerun_without_cell_id_reattaches_to_the_running_job(ip: Any, project: Path) -> None:
    """A frontend that sends no cell id (nbclient, nbconvert): the same cell text and options
    re-bind to the job still running instead of being refused or launched twice."""
    cell = f"%%remote_run --name headless --grace 2\n{SLEEPS}"
    first, _ = run_cell(ip, cell)
    job = first.result
    wait_for(lambda: job.snapshot().progress, 120, "the job's progress")
    again, text = run_cell(ip, cell)
    assert again.error_in_exec is None, again.error_in_exec
    assert again.result.id == job.id
    assert "the job of a cell with this same text" in text and "still running" in text, text
    assert len(Registry(project).jobs()) == 1
    other, _ = run_cell(ip, cell.replace("time.sleep(600)", "time.sleep(601)"))
    assert isinstance(other.error_in_exec, UsageError), "another text under a running name"
    job.stop()
    wait_for(lambda: job.state in ("preempted", "finished", "failed"), 120, "the stop")


def test_line_form_help_and_an_empty_cell(ip: Any, project: Path) -> None:
    result, text = run_cell(ip, "%remote_run --help")
    assert result.error_in_exec is None and "usage: %%remote_run" in text and "--push" in text
    result, _ = run_cell(ip, "%remote_run --name x")
    assert isinstance(result.error_in_exec, UsageError)
    assert "write `%%remote_run FLAGS` as the cell's first line" in str(result.error_in_exec)
    result, _ = run_cell(ip, "%%remote_run --help\n")
    error = result.error_in_exec or result.error_before_exec
    assert "%remote_run" in str(error), error
    assert Registry(project).jobs() == []


def test_smoke_trait_and_the_launch_phases_in_the_cell(ip: Any, project: Path) -> None:
    ip.run_line_magic("config", "RgtMagics.smoke = True")
    try:
        result, text = run_cell(ip, "%%remote_run --name phased\nprint('hello')\n")
    finally:
        ip.run_line_magic("config", "RgtMagics.smoke = None")
    assert result.error_in_exec is None, result.error_in_exec
    job = result.result
    assert job.spec.smoke is True
    lines = text.splitlines()
    assert any(line.startswith("%%remote_run: smoke run") and "passed in" in line for line in lines)
    assert any(line.startswith("%%remote_run: auditing") for line in lines), text
    result, text = run_cell(ip, "%%remote_run --name unsmoked\nprint('hello')\n")
    assert result.result.spec.smoke is False and "smoke run" not in text
