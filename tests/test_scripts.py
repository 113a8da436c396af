"""The repository's scripts: ``scripts/test-under-load.sh`` loads the machine and cleans up."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _session_members(sid: int) -> dict[int, tuple[str, int]]:
    """Processes of session ``sid``: pid → (command name, CPU ticks used so far)."""
    members: dict[int, tuple[str, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        # After the name: state, ppid, pgrp, session, ..., utime is field 14 of stat (index 11).
        if int(fields[3]) == sid:
            members[int(entry.name)] = (name, int(fields[11]) + int(fields[12]))
    return members


def test_the_under_load_script_burns_two_cores_beside_the_suite_and_stops_them() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RGT_")}
    proc = subprocess.Popen(
        [
            "bash",
            "scripts/test-under-load.sh",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_layers.py::test_every_part_of_the_package_has_a_layer",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    sid = proc.pid
    first: dict[int, int] = {}
    burning: set[int] = set()
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline and len(burning) < 2:
        time.sleep(1.0)
        now = _session_members(sid)
        for pid, (_, ticks) in now.items():
            first.setdefault(pid, ticks)
        # A burner is a bash process that keeps using CPU while the suite runs.
        burning = {
            pid for pid, (name, ticks) in now.items() if name == "bash" and ticks - first[pid] >= 50
        }
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out
    assert "1 passed" in out, out
    assert len(burning) >= 2, f"two CPU burners should run beside the suite, saw {burning}\n{out}"
    deadline = time.monotonic() + 30
    while _session_members(sid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _session_members(sid), "the burners must end with the suite"
