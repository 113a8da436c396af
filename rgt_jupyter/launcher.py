"""Launchers: how a prepared job is started on a transport.

A launcher has template hooks (submitit's shape): :meth:`Launcher.render` gives the argv that
starts the job, :meth:`Launcher.parse_submit` reads what it printed. The ``detached`` launcher
starts the shipped agent in its own session (double fork + ``setsid``), so the job outlives the
kernel, the notebook and the terminal. Schedulers (sbatch, a k8s Job) plug in here the same way.
"""

from __future__ import annotations

import abc
import json
import shlex
from typing import Any

from .errors import LaunchError
from .transport import Transport


class Launcher(abc.ABC):
    """Starts a job whose control dir (with ``launch.json`` and ``agent.py``) is in place."""

    name = "abstract"

    @abc.abstractmethod
    def render(self, python: str, control_dir: str) -> list[str]:
        """The argv that starts the job."""

    @abc.abstractmethod
    def parse_submit(self, stdout: bytes) -> dict[str, Any]:
        """What the launch printed, as a dict (pid or scheduler id)."""

    def launch_line(self, python: str, control_dir: str) -> str:
        """The launch argv as one quoted shell line (what an SSH transport sends)."""
        return shlex.join(self.render(python, control_dir))

    def submit(self, transport: Transport, python: str, control_dir: str) -> dict[str, Any]:
        """Start the job and return the launch record."""
        result = transport.exec(self.render(python, control_dir), timeout=60)
        if result.returncode != 0:
            raise LaunchError(
                f"the agent did not start on {transport.host} (exit {result.returncode}): "
                + result.stderr.decode(errors="replace")[-1500:]
                + f"\nCheck that {python!r} runs there (--python PATH picks another interpreter)."
            )
        return self.parse_submit(result.stdout)


class DetachedLauncher(Launcher):
    """``python agent.py spawn CONTROL_DIR``: the agent double-forks into its own session."""

    name = "detached"

    def render(self, python: str, control_dir: str) -> list[str]:
        return [python, f"{control_dir}/agent.py", "spawn", control_dir]

    def parse_submit(self, stdout: bytes) -> dict[str, Any]:
        try:
            record = json.loads(stdout.decode().strip().splitlines()[-1])
            return {"agent_pid": int(record["agent_pid"]), "boot_id": record.get("boot_id")}
        except (ValueError, KeyError, IndexError) as exc:
            raise LaunchError(
                f"unexpected output from the agent's spawn: {stdout[:500]!r}"
            ) from exc


def get_launcher(name: str) -> Launcher:
    """The launcher a profile names."""
    if name == "detached":
        return DetachedLauncher()
    raise LaunchError(f"launcher {name!r} is not available")
