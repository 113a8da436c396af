"""The ``rgt`` command's manners: ``--help`` everywhere, ``--version``, ``--json``, exit codes
that hold without ``--wait``, pipe-safe output, ``NO_COLOR``, ``-v``, XDG config, phase lines."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rgt_jupyter import __version__, submit
from rgt_jupyter.cli import _parser, main
from rgt_jupyter.machines.profiles import available, load_profile

from .conftest import rgt, wait_for

FINISHED = (
    "from rgt_jupyter import job\njob.progress(1, 1, loss=0.5)\njob.save_results({'acc': 0.9})\n"
)
FAILED = "raise ValueError('the data loader found no files')\n"
RUNNING = (
    "import time\nfrom rgt_jupyter import job\njob.progress(1, 100, loss=1.0)\ntime.sleep(600)\n"
)


def _subcommands() -> list[list[str]]:
    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands = [[name] for name in sub.choices]
    return commands + [["profiles", "show"]]


def test_every_subcommand_answers_help_with_exit_0() -> None:
    commands = _subcommands()
    assert {"check-numbers", "reconcile", "jobs", "watch", "down"} <= {c[0] for c in commands}
    for command in commands:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
            main([*command, "--help"])
        assert exit_.value.code == 0, command
        assert out.getvalue().startswith("usage: rgt "), (command, out.getvalue())


def test_help_and_version_from_the_console(tmp_path: Path) -> None:
    for args in (["check-numbers", "--help"], ["reconcile", "--help"], ["--help"]):
        proc = rgt(*args, cwd=tmp_path)
        assert "usage: rgt" in proc.stdout
        assert proc.stderr == ""
    proc = rgt("--version", cwd=tmp_path)
    assert proc.stdout.strip() == f"rgt-jupyter {__version__}"


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """The reader of stdout is gone before ``rgt`` writes: no traceback, the usual code."""
    read, write = os.pipe()
    os.close(read)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RGT_")}
    proc = subprocess.run(
        [sys.executable, "-m", "rgt_jupyter", "profiles"],
        cwd=tmp_path,
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_jobs_states_json_exit_codes_colour_and_pipes(project: Path) -> None:
    done = submit(FINISHED, project, name="done")
    bad = submit(FAILED, project, name="bad")
    live = submit(RUNNING, project, name="live", grace_s=2.0)
    wait_for(lambda: done.state == "finished", 120, "the finished job")
    wait_for(lambda: bad.state == "failed", 120, "the failed job")
    wait_for(lambda: live.snapshot().progress, 120, "the running job's progress")

    # Exit codes hold without --wait: 0 finished, 1 failed, 0 running and healthy; 2 no job.
    assert rgt("watch", "done", cwd=project, check=False).returncode == 0
    failed = rgt("watch", "bad", cwd=project, check=False)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "\x1b[" not in failed.stdout, "no colour into a pipe"
    assert rgt("watch", "live", cwd=project, check=False).returncode == 0
    missing = rgt("watch", "nosuch", cwd=project, check=False)
    assert missing.returncode == 2 and missing.stderr.startswith("rgt: "), missing.stderr
    assert "Traceback" not in missing.stderr
    timed_out = rgt("watch", "live", "--wait", "--timeout", "1", cwd=project, check=False)
    assert timed_out.returncode == 124, timed_out.stdout + timed_out.stderr

    # --json parses, with the same facts the text shows.
    listed = json.loads(rgt("jobs", "--json", cwd=project).stdout)
    states = {row["name"]: row["state"] for row in listed["jobs"]}
    assert states == {"done": "finished", "bad": "failed", "live": "running"}, listed
    assert all(row["observed"] for row in listed["jobs"])
    watched = json.loads(rgt("watch", "bad", "--json", cwd=project, check=False).stdout)
    assert watched["state"] == "failed" and watched["terminal"] is True
    assert any("no files" in line for line in watched["traceback"]), watched["traceback"]
    pulled = json.loads(rgt("pull", "done", "--json", cwd=project).stdout)
    assert pulled["verified"] is True and pulled["results"] == {"acc": 0.9}
    assert Path(pulled["path"], "run.json").is_file()
    assert "results.json" in json.dumps(pulled["files"]), "each file's verdict is listed"
    down = rgt("down", "done", "--json", cwd=project, check=False)
    assert "rgt: checking 1 job(s) on this machine (" in down.stderr, down.stderr
    assert "for the teardown gate… done in" in down.stderr, down.stderr
    gate = json.loads(down.stdout)
    assert gate["gate"]["profile"] == "local" and "passed" in gate["gate"]
    assert any(line.startswith("Nothing done") for line in gate["said"])
    assert json.loads(rgt("instances", "--json", cwd=project).stdout) == {"instances": []}

    # Colour: only when asked for a pipe (FORCE_COLOR), never with NO_COLOR.
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    plain = rgt("jobs", cwd=project, env=env).stdout
    assert "\x1b[" not in plain
    coloured = rgt("jobs", cwd=project, env={**env, "FORCE_COLOR": "1"}).stdout
    assert "\x1b[31mfailed\x1b[0m" in coloured, coloured
    assert (
        "\x1b["
        not in rgt("jobs", cwd=project, env={**env, "FORCE_COLOR": "1", "NO_COLOR": "1"}).stdout
    )

    # `rgt jobs | head -1`: the header, and nothing on stderr.
    env = {k: v for k, v in os.environ.items() if k != "RGT_PROJECT"}
    piped = subprocess.run(
        f"{sys.executable} -m rgt_jupyter jobs | head -1",
        shell=True,
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert piped.returncode == 0 and piped.stdout.startswith("ID "), piped.stdout
    assert piped.stderr == "", piped.stderr
    live.stop()


def test_verbose_shows_the_traceback_of_an_error_and_the_commands(project: Path) -> None:
    quiet = rgt("watch", "nosuch", cwd=project, check=False)
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr
    loud = rgt("-v", "watch", "nosuch", cwd=project, check=False)
    assert loud.returncode == 2 and "Traceback" in loud.stderr, loud.stderr
    assert loud.stderr.rstrip().splitlines()[-1].startswith("rgt: ")
    (project / "t.py").write_text(FINISHED)
    traced = rgt("-vv", "run", "t.py", "--name", "traced", cwd=project)
    sent = [line for line in traced.stderr.splitlines() if "$ " in line]
    assert any("agent.py" in line for line in sent), traced.stderr
    assert all("\n" not in line and len(line) < 400 for line in sent)
    assert "$ " not in rgt("-v", "jobs", cwd=project).stderr, "-v alone does not list commands"


def test_a_run_says_its_phases_and_the_smoke_result(project: Path) -> None:
    program = project / "train.py"
    program.write_text(FINISHED)
    proc = rgt("run", "train.py", "--name", "smoked", "--smoke", cwd=project)
    lines = proc.stderr.splitlines()
    assert any(line.startswith("rgt: smoke run") and line.endswith("…") for line in lines), lines
    assert any("smoke run" in line and "passed in" in line for line in lines), lines
    assert "launched smoked-" in proc.stdout


def test_user_profiles_follow_xdg_config_home(tmp_path: Path) -> None:
    config = tmp_path / "xdg"
    (config / "rgt" / "profiles").mkdir(parents=True)
    (config / "rgt" / "profiles" / "mybox.toml").write_text(
        'extends = "ssh"\ndescription = "my own box"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RGT_")}
    env["XDG_CONFIG_HOME"] = str(config)
    listed = json.loads(rgt("profiles", "--json", cwd=tmp_path, env=env).stdout)
    mine = [p for p in listed["profiles"] if p["name"] == "mybox"]
    assert mine and mine[0]["description"] == "my own box", listed
    assert str(config) in mine[0]["source"]
    env["XDG_CONFIG_HOME"] = str(tmp_path / "elsewhere")
    listed = json.loads(rgt("profiles", "--json", cwd=tmp_path, env=env).stdout)
    assert "mybox" not in {p["name"] for p in listed["profiles"]}


def test_profiles_list_cuts_with_an_ellipsis_and_keeps_irreversible(tmp_path: Path) -> None:
    out = rgt("profiles", cwd=tmp_path).stdout.splitlines()
    for name in sorted(available(None)):
        prof = load_profile(name, None)
        line = next(row for row in out if row.split()[0] == name)
        verb = prof.meter_stop.verb
        if verb not in line:
            head = verb.split(" ")[0]
            assert head in line and "…" in line, line
        assert ("(irreversible)" in line) == prof.meter_stop.irreversible, line


def test_a_pull_says_the_checkpoint_check_apart_from_the_transfer(project: Path) -> None:
    program = (
        "import os, torch\nfrom rgt_jupyter import job\n"
        "torch.save({'w': torch.zeros(4)}, os.path.join(job.ckpt_dir(), 'ckpt-1.pt'))\n"
    )
    saved = submit(program, project, name="saves")
    wait_for(lambda: saved.state == "finished", 180, "the job")
    proc = rgt("pull", "saves", cwd=project)
    lines = proc.stderr.splitlines()
    assert "rgt: checking that 1 checkpoint(s) load (a separate process)…" in lines, lines
    assert any(line.startswith("rgt: checking that 1") and "done in" in line for line in lines)
    assert "verified: yes" in proc.stdout
