"""Launchers: how a prepared job is started on a transport.

A launcher has template hooks (submitit's shape): :meth:`Launcher.render` gives the argv that
starts the job, :meth:`Launcher.parse_submit` reads what it printed. The ``detached`` launcher
sends the job's launch bundle (a zip: agent, program, inputs, ``launch.json``, secrets) as the
stdin of one POSIX ``sh`` command, which stores it in the control dir and starts the agent in its
own session (``setsid``), so the job outlives the kernel, the notebook and the terminal. The
command returns without waiting for the remote Python to start. Schedulers (sbatch, a k8s Job)
plug in here the same way.
"""

from __future__ import annotations

import abc
import json
import shlex
from typing import Any

from .errors import LaunchError
from .transport import Transport

#: Exit status of the launch script when the interpreter is not there.
NO_INTERPRETER = 127
#: Exit status of the tmux launch script when tmux is not there.
NO_TMUX = 126
#: The slowest upload a launch waits for before giving up on the command.
MIN_UPLOAD_BYTES_PER_S = 50_000

#: ``sh -c SCRIPT rgt-launch CONTROL_DIR PYTHON``: paths only ever arrive as positional
#: parameters. The bundle (stdin) lands 0600; the agent is started with all three standard fds
#: redirected, so the command (and an SSH exec channel) ends at once while the job runs on. The
#: loop waits (a few reads of /proc, no process started) until the agent has its own session, so
#: nothing that signals the launching process group afterwards can reach it. Without ``setsid``
#: the bundle's own ``spawn`` (a double fork) starts it and prints the same record.
_CHECK = """\
case $python in
*/*) [ -f "$python" ] && [ -x "$python" ] || found=no ;;
*) command -v "$python" >/dev/null 2>&1 || found=no ;;
esac
if [ $found = no ]; then
  cat >/dev/null
  printf "rgt: no interpreter %s on this machine (not found or not executable)\\n" "$python" >&2
  exit 127
fi
"""
_PREAMBLE = (
    "set -e\ncontrol=$1 python=$2 found=yes\n"
    + _CHECK
    + 'mkdir -p -- "$control"\n(umask 077; cat >"$control/bundle.zip")\n'
)


def interpreter_check() -> str:
    """The sh lines that exit 127 (draining stdin) when ``$python`` is not there (they expect
    ``found=yes`` set before them)."""
    return _CHECK


_START = """\
if command -v setsid >/dev/null 2>&1; then
  setsid "$python" -u "$control/bundle.zip" run "$control" </dev/null >>"$control/agent.log" 2>&1 &
  pid=$!
  n=0
  while [ $n -lt 100000 ] && { read -r stat </proc/$pid/stat; } 2>/dev/null; do
    set -f -- ${stat##*) }
    if [ "$1" = Z ] || [ "$4" = "$pid" ]; then break; fi
    n=$((n + 1))
  done
  boot=
  { read -r boot </proc/sys/kernel/random/boot_id; } 2>/dev/null || boot=
@VIEW@
  echo "{\\"agent_pid\\": $pid, \\"boot_id\\": \\"$boot\\"}"
  exit 0
fi
exec "$python" -u "$control/bundle.zip" spawn "$control"
"""

#: tmux: checked before anything is stored; after the start, a tmux session ``$3`` shows the
#: job's log live (``tmux attach -t NAME``) for as long as the agent runs. The job does not
#: depend on it: closing the session or the tmux server leaves the job running.
_TMUX_CHECK = """\
if ! command -v tmux >/dev/null 2>&1; then
  cat >/dev/null
  echo "rgt: tmux is not installed on this machine: install it or use launcher = detached" >&2
  exit 126
fi
"""
_TMUX_VIEW = """\
  tmux new-session -d -s "$session" -- sh -c \\
    'tail -n +1 -F "$1/log" 2>/dev/null & t=$!; while kill -0 "$2" 2>/dev/null; do sleep 1; done; kill "$t"' \\
    rgt-view "$control" "$pid" || echo "rgt: could not open tmux session $session" >&2
"""

LAUNCH_SCRIPT = _PREAMBLE + _START.replace("@VIEW@\n", "")
TMUX_LAUNCH_SCRIPT = (
    "session=$3\n" + _TMUX_CHECK + _PREAMBLE + _START.replace("@VIEW@\n", _TMUX_VIEW)
)


class Launcher(abc.ABC):
    """Starts a job from its launch bundle."""

    name = "abstract"

    @abc.abstractmethod
    def render(self, python: str, control_dir: str) -> list[str]:
        """The argv that starts the job (the bundle goes to its stdin)."""

    @abc.abstractmethod
    def parse_submit(self, stdout: bytes) -> dict[str, Any]:
        """What the launch printed, as a dict (pid or scheduler id)."""

    def launch_line(self, python: str, control_dir: str) -> str:
        """The launch argv as one quoted shell line (what an SSH transport sends)."""
        return shlex.join(self.render(python, control_dir))

    def submit(
        self, transport: Transport, python: str, control_dir: str, bundle: bytes
    ) -> dict[str, Any]:
        """Send the bundle and start the job, in one command; return the launch record."""
        timeout = 120.0 + len(bundle) / MIN_UPLOAD_BYTES_PER_S
        result = transport.exec(self.render(python, control_dir), stdin=bundle, timeout=timeout)
        stderr = result.stderr.decode(errors="replace")[-1500:]
        if result.returncode == NO_INTERPRETER:
            raise LaunchError(
                f"there is no interpreter {python!r} on {transport.host}: {stderr.strip()}\n"
                "Pass --python PATH (or set `python` in the profile) to a Python 3.8+ there; "
                "nothing was started."
            )
        if result.returncode == NO_TMUX:
            raise LaunchError(
                f"{stderr.strip()} ({transport.host}); nothing was started. Install tmux there, "
                'or set launcher = "detached" in the profile.'
            )
        if result.returncode != 0:
            raise LaunchError(
                f"the job did not start on {transport.host} (exit {result.returncode}): "
                + stderr
                + f"\nCheck that {python!r} runs there (--python PATH picks another interpreter)."
            )
        return self.parse_submit(result.stdout)


class DetachedLauncher(Launcher):
    """``sh -c LAUNCH_SCRIPT``: store the bundle, start the agent in its own session."""

    name = "detached"

    def render(self, python: str, control_dir: str) -> list[str]:
        return ["sh", "-c", LAUNCH_SCRIPT, "rgt-launch", control_dir, python]

    def parse_submit(self, stdout: bytes) -> dict[str, Any]:
        try:
            record = json.loads(stdout.decode().strip().splitlines()[-1])
            return {"agent_pid": int(record["agent_pid"]), "boot_id": record.get("boot_id") or None}
        except (ValueError, KeyError, IndexError) as exc:
            raise LaunchError(
                f"unexpected output from the job's start: {stdout[:500]!r}; see agent.log in "
                "the job's control dir"
            ) from exc


class TmuxLauncher(DetachedLauncher):
    """Like ``detached``, plus a tmux session ``rgt-<job id>`` that shows the job's log live."""

    name = "tmux"

    @staticmethod
    def session(control_dir: str) -> str:
        """The tmux session of the job whose control dir this is (tmux forbids ``.`` and ``:``)."""
        return "rgt-" + control_dir.rstrip("/").rsplit("/", 1)[-1].replace(".", "_").replace(
            ":", "_"
        )

    def render(self, python: str, control_dir: str) -> list[str]:
        return [
            "sh",
            "-c",
            TMUX_LAUNCH_SCRIPT,
            "rgt-launch",
            control_dir,
            python,
            self.session(control_dir),
        ]


def get_launcher(name: str) -> Launcher:
    """The launcher a profile names."""
    if name == "detached":
        return DetachedLauncher()
    if name == "tmux":
        return TmuxLauncher()
    if name == "sbatch":
        from .slurm import SlurmLauncher

        return SlurmLauncher()
    if name == "k8s-job":
        from .k8s_launch import K8sLauncher

        return K8sLauncher()
    raise LaunchError(f"launcher {name!r} is not available")
