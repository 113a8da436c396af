"""The ``detached`` and ``tmux`` backends: the agent started in its own session.

The job's launch bundle (a zip: agent, program, inputs, ``launch.json``, secrets) travels as the
stdin of one POSIX ``sh`` command, which stores it in the control dir and starts the agent in its
own session (``setsid``), so the job outlives the kernel, the notebook and the terminal. The
command returns without waiting for the remote Python to start. ``tmux`` does the same and opens
a tmux session that shows the job's log live.

When the connection drops after the launch command was sent but before its reply came back,
:meth:`DetachedBackend.recover` finds out from the host whether the job started (its agent's
``status.json``; a bundle that arrived cut short or damaged, or no trace of the launch at all,
means it did not), so a lost reply neither reports a running job as failed nor invites a second
copy of it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ...errors import LaunchError, TransportError
from ...jobs.records import read_json
from ...remote.bundle_main import not_deployed_records
from ...transport import ExecResult, Transport
from ..base import Backend, Recovered, interpreter_check

#: Exit status of the tmux launch script when tmux is not there.
NO_TMUX = 126

#: How long a launch whose reply was lost looks on the host for the job's first record.
RECOVER_S = 10.0


#: With no trace of the launch in the control dir for this long, the command never ran.
ABSENT_S = 2.0


#: ``sh -c SCRIPT rgt-launch CONTROL_DIR PYTHON``: paths only ever arrive as positional
#: parameters. The bundle (stdin) lands 0600; the agent is started with all three standard fds
#: redirected, so the command (and an SSH exec channel) ends at once while the job runs on. The
#: loop waits (a few reads of /proc, no process started) until the agent has its own session, so
#: nothing that signals the launching process group afterwards can reach it. Without ``setsid``
#: the bundle's own ``spawn`` (a double fork) starts it and prints the same record.
_PREAMBLE = (
    "set -e\ncontrol=$1 python=$2 found=yes\n"
    + interpreter_check()
    + 'mkdir -p -- "$control"\n(umask 077; cat >"$control/bundle.zip")\n'
)


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


class DetachedBackend(Backend):
    """``sh -c LAUNCH_SCRIPT``: store the bundle, start the agent in its own session."""

    name = "detached"
    recovers = True

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

    def recover(
        self,
        transport: Transport,
        control_dir: str,
        bundle_size: int | None = None,
        wait_s: float = RECOVER_S,
    ) -> Recovered:
        """Look in the control dir, over a fresh connection, for up to ``wait_s`` seconds.

        The agent's ``status.json`` means the job started. It did not start when the unpacker
        refused the bundle (``NOT DEPLOYED``), when ``bundle.zip`` stays shorter than the
        ``bundle_size`` bytes sent (a zip cut short is no zip: nothing of it can run; it is
        deleted, as it may hold secrets), or when the launch left no trace at all, each for
        :data:`ABSENT_S` (the host may still be writing what it received)."""
        deadline = time.monotonic() + wait_s
        settled: tuple[str, float] | None = None  # an undecided look, and since when it holds
        why = "the host could not be read"
        while True:
            try:
                found, trace = self._look(transport, control_dir, bundle_size)
            except (TransportError, OSError) as exc:
                found, trace, settled = None, None, None
                why = f"the host could not be read ({exc})"
            if found is not None:
                return found
            now = time.monotonic()
            if trace is not None:
                why = trace
                if settled is None or settled[0] != trace:
                    settled = (trace, now)
                elif now - settled[1] >= ABSENT_S and not trace.startswith("the launch reached"):
                    return self._not_started(transport, control_dir, trace)
            if now >= deadline:
                return Recovered(None, why)
            time.sleep(0.3)

    @staticmethod
    def _not_started(transport: Transport, control: str, trace: str) -> Recovered:
        """The verdict "did not start": a bundle cut short is deleted (it may hold secrets and
        nothing will read it), and the control dir gets the unpacker's ``NOT DEPLOYED`` record,
        so every later look at the job says ``failed`` and why."""
        try:
            if "cut short" in trace:
                transport.exec(["rm", "-f", "--", f"{control}/bundle.zip"], timeout=30).check()
            message = f"NOT DEPLOYED: {trace}; nothing was run. Launch again."
            for name, record in not_deployed_records(message, time.time()).items():
                data = json.dumps(record, indent=1, sort_keys=True).encode()
                transport.write_bytes(f"{control}/{name}", data)
        except (TransportError, OSError) as exc:
            trace += f" (it could not be recorded in {control}: {exc})"
        return Recovered(False, trace)

    @staticmethod
    def _look(
        transport: Transport, control: str, bundle_size: int | None
    ) -> tuple[Recovered | None, str | None]:
        """One look: a verdict, or what was seen (a verdict once it holds for a while)."""
        status = read_json(transport, f"{control}/status.json")
        if status is not None and status.get("agent_pid") is not None:
            record = {"agent_pid": int(status["agent_pid"]), "boot_id": status.get("boot_id")}
            return Recovered(True, "its agent reported in status.json", record), None
        ended = read_json(transport, f"{control}/exit.json")
        if ended is not None:
            error = read_json(transport, f"{control}/error.json") or {}
            if error.get("kind") == "not_deployed":
                return Recovered(False, str(error.get("message") or "NOT DEPLOYED")), None
            return Recovered(True, "it already ended (exit.json)", {"agent_pid": None}), None
        bundle = transport.stat(f"{control}/bundle.zip")
        if bundle is not None and bundle_size is not None and bundle.size < bundle_size:
            return None, (
                f"the launch bundle arrived cut short ({bundle.size} of {bundle_size} bytes), "
                "so nothing of it ran"
            )
        if bundle is not None or transport.stat(f"{control}/agent.log") is not None:
            return None, f"the launch reached {control} but the agent has not reported yet"
        return None, f"the launch command left no trace in {control}"


class TmuxBackend(DetachedBackend):
    """Like ``detached``, plus a tmux session ``rgt-<job id>`` that shows the job's log live."""

    name = "tmux"

    @staticmethod
    def session(control_dir: str) -> str:
        """The tmux session of the job whose control dir this is (tmux forbids ``.`` and ``:``)."""
        return "rgt-" + control_dir.rstrip("/").rsplit("/", 1)[-1].replace(".", "_").replace(
            ":", "_"
        )

    def check_submitted(self, result: ExecResult, transport: Transport, python: str) -> None:
        if result.returncode == NO_TMUX:
            stderr = result.stderr.decode(errors="replace")[-1500:]
            raise LaunchError(
                f"{stderr.strip()} ({transport.host}); nothing was started. Install tmux there, "
                'or set launcher = "detached" in the profile.'
            )
        super().check_submitted(result, transport, python)

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
