"""The backend interface: one object per way of starting, observing and stopping jobs.

A backend (a profile's ``launcher``) has template hooks in submitit's shape, each with a default
that is what the ``detached`` backend does:

- before the launch: :meth:`Backend.check_profile`, :meth:`Backend.check_request` (features it
  does not offer, with the reason, from :attr:`Backend.unsupported`), :meth:`Backend.host_alias`,
  :meth:`Backend.spec_extra` (the spec fields it adds) and :meth:`Backend.bundle_files` (files it
  adds to the launch bundle, such as a batch script);
- the launch: :meth:`Backend.render` (the argv that starts the job, the bundle on its stdin),
  :meth:`Backend.parse_submit`, :meth:`Backend.submit`, and :meth:`Backend.recover` for a launch
  whose reply was lost;
- afterwards: :meth:`Backend.observe` (a :class:`~rgt_jupyter.jobs.snapshot.Snapshot` from the
  scheduler and the agent's records), :meth:`Backend.follow` and :meth:`Backend.stop`.

What a backend can do is declared as data (:attr:`Backend.transports`, :attr:`Backend.arrays`,
:attr:`Backend.probed`, ...), so the generic code asks the backend instead of comparing names.
Backends are found by name in :mod:`rgt_jupyter.backends`, the one place that knows them all.
"""

from __future__ import annotations

import abc
import os
import shlex
import signal as signal_mod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import LaunchError, ProfileError, UsageError
from ..jobs.observe import agent_pid, observe_agent
from ..jobs.request import LaunchRequest
from ..jobs.snapshot import Snapshot
from ..jobs.spec import JobSpec
from ..machines.profiles import Profile
from ..transport import ExecResult, Transport

#: Exit status of a launch script when the interpreter is not there.
NO_INTERPRETER = 127
#: The slowest upload a launch waits for before giving up on the command.
MIN_UPLOAD_BYTES_PER_S = 50_000

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


def interpreter_check() -> str:
    """The sh lines that exit 127 (draining stdin) when ``$python`` is not there (they expect
    ``found=yes`` set before them)."""
    return _CHECK


@dataclass
class Recovered:
    """What a launch whose reply was lost found out on the host.

    ``started``: True when the job started (``record`` is what the reply would have said),
    False when it certainly did not, None when that cannot be told (yet)."""

    started: bool | None
    detail: str
    record: dict[str, Any] = field(default_factory=dict)


@dataclass
class Stopped:
    """What :meth:`Backend.stop` did: the ``stop_requested`` event's fields, and spec fields to
    record (a deletion time, say)."""

    event: dict[str, Any] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)


class Backend(abc.ABC):
    """Starts jobs from their launch bundle, observes and stops them (see the module docstring)."""

    #: The name a profile's ``launcher`` gives.
    name: ClassVar[str] = "abstract"
    #: The transports (a profile's ``transport``) it runs over.
    transports: ClassVar[tuple[str, ...]] = ("local", "ssh")
    #: The watcher's batched probe reads its jobs' control dirs through the transport.
    probed: ClassVar[bool] = True
    #: A seed group is submitted as one job array (one bundle, one submission).
    arrays: ClassVar[bool] = False
    #: The scheduler places the job's GPUs: ``--gpus`` is a request to it, not a device list.
    schedules_gpus: ClassVar[bool] = False
    #: The machine gets the phase-0 host audit before the launch (it has a shell to audit).
    audits_host: ClassVar[bool] = True
    #: A launch whose reply was lost can be settled by looking on the host (:meth:`recover`).
    recovers: ClassVar[bool] = False
    #: Request features it does not offer (``push``), each with what to do instead.
    unsupported: ClassVar[Mapping[str, str]] = {}

    # -- before the launch ----------------------------------------------------------------

    def check_profile(self, profile: Profile) -> None:
        """Refuse a profile this backend cannot run (by default: one whose transport it does
        not run over)."""
        if profile.transport not in self.transports:
            raise ProfileError(
                f"profile {profile.name!r}: launcher {self.name!r} runs over "
                f"{' or '.join(self.transports)}, not transport {profile.transport!r}"
            )

    def check_request(self, profile: Profile, req: LaunchRequest) -> None:
        """Refuse the request's features this backend does not offer (:attr:`unsupported`)."""
        if req.push and "push" in self.unsupported:
            raise UsageError(
                f"--push is not available on {profile.name!r}: {self.unsupported['push']}"
            )

    def host_alias(self, profile: Profile, requested: str | None) -> str | None:
        """Where the job goes in the transport's words: the ``--host`` alias, else the
        profile's ``host``."""
        return requested or profile.host or None

    def spec_extra(self, profile: Profile, req: LaunchRequest) -> dict[str, Any]:
        """The spec fields this backend adds to every job it launches."""
        return {}

    def bundle_files(
        self, profile: Profile, req: LaunchRequest, name: str, array: tuple[int, ...] = ()
    ) -> dict[str, bytes]:
        """Files this backend adds to the launch bundle (``array``: a job array's task ids)."""
        return {}

    # -- the launch -----------------------------------------------------------------------

    @abc.abstractmethod
    def render(self, python: str, control_dir: str) -> list[str]:
        """The argv that starts the job (the bundle goes to its stdin)."""

    @abc.abstractmethod
    def parse_submit(self, stdout: bytes) -> dict[str, Any]:
        """What the launch printed, as spec fields (a pid, a scheduler's id)."""

    def launch_line(self, python: str, control_dir: str) -> str:
        """The launch argv as one quoted shell line (what an SSH transport sends)."""
        return shlex.join(self.render(python, control_dir))

    def command(self, python: str, control_dir: str, unset: Sequence[str] = ()) -> list[str]:
        """The launch argv as it is run: :meth:`render`'s, started without the environment
        variables ``unset`` (the secrets: their values travel in the bundle, never in the
        environment the agent or a scheduler would inherit from this process)."""
        argv = self.render(python, control_dir)
        if not unset:
            return argv
        return ["env", *[a for name in sorted(unset) for a in ("-u", name)], *argv]

    def submit(
        self,
        transport: Transport,
        python: str,
        control_dir: str,
        bundle: bytes,
        unset: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Send the bundle and start the job, in one command; return the launch record."""
        timeout = 120.0 + len(bundle) / MIN_UPLOAD_BYTES_PER_S
        argv = self.command(python, control_dir, unset)
        result = transport.exec(argv, stdin=bundle, timeout=timeout)
        self.check_submitted(result, transport, python)
        return self.parse_submit(result.stdout)

    def check_submitted(self, result: ExecResult, transport: Transport, python: str) -> None:
        """Raise a :class:`LaunchError` that says what to do when the launch command failed."""
        stderr = result.stderr.decode(errors="replace")[-1500:]
        if result.returncode == NO_INTERPRETER:
            raise LaunchError(
                f"there is no interpreter {python!r} on {transport.host}: {stderr.strip()}\n"
                "Pass --python PATH (or set `python` in the profile) to a Python 3.8+ there; "
                "nothing was started."
            )
        if result.returncode != 0:
            raise LaunchError(
                f"the job did not start on {transport.host} (exit {result.returncode}): "
                + stderr
                + f"\nCheck that {python!r} runs there (--python PATH picks another interpreter)."
            )

    def member_record(self, record: dict[str, Any], spec: JobSpec) -> dict[str, Any]:
        """The launch record of one member of a submission that started several jobs."""
        return dict(record)

    def recover(
        self, transport: Transport, control_dir: str, bundle_size: int | None = None
    ) -> Recovered:
        """Whether the job whose launch reply was lost (``bundle_size`` bytes sent) started. A
        scheduler's backend cannot tell from the host: None (see :attr:`recovers`)."""
        return Recovered(
            None, f"a {self.name} launch leaves no record on {transport.host} to check"
        )

    # -- afterwards -----------------------------------------------------------------------

    def may_run_again(self, spec: JobSpec, snap: Snapshot) -> bool:
        """Whether the scheduler may run this ended job's control dir again by itself (then its
        secrets file stays for that attempt)."""
        return False

    def follow(self, spec: JobSpec) -> None:  # noqa: B027 - a hook that most backends leave as is
        """Start following a job that has not ended (a scheduler's batched queue reads)."""

    def observe(self, transport: Transport, spec: JobSpec, log_lines: int = 12) -> Snapshot:
        """One look at the job (by default: its agent's records through the transport)."""
        return observe_agent(transport, spec, log_lines)

    def stop(self, transport: Transport, spec: JobSpec, sig: str = "SIGTERM") -> Stopped:
        """Ask the job to stop: its agent (only the verified agent, whatever ``status.json``
        says) gets ``sig``, forwards it, and the job saves and ends ``preempted``. A job whose
        agent is gone (``agent lost``) gets ``sig`` itself, in its whole process group."""
        if not hasattr(signal_mod, sig) or not sig.startswith("SIG"):
            raise UsageError(f"--signal {sig!r}: give a signal name such as SIGTERM or SIGKILL")
        pid = agent_pid(transport, spec)
        snap = self.observe(transport, spec, log_lines=0)
        if snap.terminal or (pid is None and snap.orphan_pid is None):
            raise UsageError(f"job {spec.job_id} is not running")
        if pid is None:
            assert snap.orphan_pid is not None
            send_signal(transport, snap.orphan_pid, sig, group=True)
            return Stopped({"signal": sig, "orphan_pid": snap.orphan_pid})
        send_signal(transport, pid, sig)
        return Stopped({"signal": sig})


def send_signal(transport: Transport, pid: int, sig: str, group: bool = False) -> None:
    """Send ``sig`` to ``pid`` (``group``: to its process group) where the job runs: by the
    system call here, by ``kill`` over a transport with a shell."""
    number = getattr(signal_mod, sig)
    if transport.name == "local":
        os.killpg(pid, number) if group else os.kill(pid, number)
        return
    target = f"-{pid}" if group else str(pid)
    transport.exec(["kill", "-s", sig.removeprefix("SIG"), "--", target], timeout=60).check()
