"""The ``sbatch`` backend: Slurm jobs submitted on the login node.

A Slurm job is submitted in one command on the login node (local, or over SSH): the launch
bundle arrives on stdin, is unpacked into the job's control dir on the shared filesystem, and
``sbatch --parsable`` submits the rendered batch script (:mod:`.script`). With ``--requeue`` a
requeued job runs the same script again in the same control dir; the agent sees the earlier
attempt's records and resumes (``RGT_RESUME=1``). A seed group is one job array. Its state comes
from Slurm first (:mod:`.observe`, one batched ``squeue`` per poll: :mod:`.queue`), and a stop
is ``scancel --signal``: the agent forwards the signal and the job saves before Slurm's
``KillWait`` ends it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ...errors import LaunchError, UsageError
from ...jobs.request import LaunchRequest
from ...jobs.snapshot import Snapshot
from ...jobs.spec import JobSpec
from ...machines.profiles import Profile
from ...transport import Transport
from ..base import NO_INTERPRETER, Backend, Stopped, interpreter_check
from .observe import observe_slurm
from .queue import slurm_queue
from .script import slurm_options, slurm_script

#: Exit status of the submit script when sbatch is not on the login node's PATH.
NO_SBATCH = 125
#: ``sh -c SCRIPT rgt-submit CONTROL PYTHON SBATCH-ARGS...``: store and unpack the bundle (stdin)
#: on the login node, then ``exec sbatch --parsable`` with the rest of the arguments.
SUBMIT_SCRIPT = (
    "set -e\ncontrol=$1 python=$2 found=yes\n"
    + "if ! command -v sbatch >/dev/null 2>&1; then\n  cat >/dev/null\n"
    + '  echo "rgt: sbatch is not on the PATH of this machine: is it a Slurm login node?" >&2\n'
    + f"  exit {NO_SBATCH}\nfi\n"
    + "@CHECK@"
    + 'mkdir -p -- "$control"\n(umask 077; cat >"$control/bundle.zip")\n'
    + '"$python" -u "$control/bundle.zip" unpack "$control" >&2\n'
    + 'shift 2\nexec sbatch --parsable "$@"\n'
)


class SlurmBackend(Backend):
    """``sbatch``: the job (or a seed array) runs when Slurm schedules it, on a compute node."""

    name = "sbatch"
    arrays = True
    schedules_gpus = True

    def spec_extra(self, profile: Profile, req: LaunchRequest) -> dict[str, Any]:
        """What the agent needs to know about the scheduler it runs under."""
        opts = slurm_options(profile, req, "x")
        extra: dict[str, Any] = {
            "requeue": opts.requeue,
            "slurm": {
                **dataclasses.asdict(opts),
                "timeout_requeues": int(profile.sbatch.get("timeout_requeues", 0)),
            },
        }
        if opts.nodes > 1:
            extra["distributed"] = {
                "nodes": opts.nodes,
                "nproc_per_node": opts.nproc_per_node,
                "pg_timeout_s": int(profile.sbatch.get("pg_timeout_s", 600)),
            }
        return extra

    def bundle_files(
        self, profile: Profile, req: LaunchRequest, name: str, array: tuple[int, ...] = ()
    ) -> dict[str, bytes]:
        """The batch script (one for a whole job array)."""
        return {"job.sbatch": slurm_script(profile, req, name, array).encode()}

    def render(self, python: str, control_dir: str) -> list[str]:
        script = SUBMIT_SCRIPT.replace("@CHECK@", interpreter_check())
        batch = f"{control_dir}/job.sbatch"
        return ["sh", "-c", script, "rgt-submit", control_dir, python, batch, control_dir, python]

    def submit(
        self,
        transport: Transport,
        python: str,
        control_dir: str,
        bundle: bytes,
        unset: Sequence[str] = (),
    ) -> dict[str, Any]:
        argv = self.command(python, control_dir, unset)  # sbatch exports this environment
        result = transport.exec(argv, stdin=bundle, timeout=300)
        stderr = result.stderr.decode(errors="replace")[-1500:].strip()
        if result.returncode == NO_SBATCH:
            raise LaunchError(f"{stderr} ({transport.host}); nothing was submitted.")
        if result.returncode == NO_INTERPRETER:
            raise LaunchError(
                f"there is no interpreter {python!r} on {transport.host}: {stderr}\nPass "
                "--python PATH (a Python 3.8+ that the compute nodes see too); nothing was "
                "submitted."
            )
        if result.returncode != 0:
            raise LaunchError(
                f"sbatch refused the job on {transport.host} (exit {result.returncode}): "
                f"{stderr}\nCheck --partition, --time and --gpus against `sinfo` there."
            )
        return self.parse_submit(result.stdout)

    def parse_submit(self, stdout: bytes) -> dict[str, Any]:
        text = stdout.decode(errors="replace").strip().splitlines()
        first = text[-1].split(";")[0] if text else ""
        if not first.isdigit():
            raise LaunchError(f"unexpected output from sbatch --parsable: {stdout[:300]!r}")
        return {"slurm_job_id": first}

    def member_record(self, record: dict[str, Any], spec: JobSpec) -> dict[str, Any]:
        """An array task's own Slurm id (``1234_7``)."""
        mine = dict(record)
        if "slurm_job_id" in mine and spec.array_task is not None:
            mine["slurm_job_id"] = f"{mine['slurm_job_id']}_{spec.array_task}"
        return mine

    def may_run_again(self, spec: JobSpec, snap: Snapshot) -> bool:
        """A preempted job with ``--requeue``: Slurm runs it again in the same control dir."""
        return spec.requeue and snap.state == "preempted"

    def follow(self, spec: JobSpec) -> None:
        if spec.slurm_job_id:
            slurm_queue().follow(spec.host, spec.slurm_job_id)

    def observe(self, transport: Transport, spec: JobSpec, log_lines: int = 12) -> Snapshot:
        return observe_slurm(transport, spec, log_lines)

    def stop(self, transport: Transport, spec: JobSpec, sig: str = "SIGTERM") -> Stopped:
        """``scancel --signal=SIG --full``: Slurm signals the batch shell (the agent) and the
        steps, then SIGKILL after its ``KillWait``; the agent forwards the signal and the job
        saves first."""
        if self.observe(transport, spec, log_lines=0).terminal:
            raise UsageError(f"job {spec.job_id} has already ended")
        if not spec.slurm_job_id:
            raise UsageError(f"job {spec.job_id} has no Slurm job id: it was never submitted")
        argv = ["scancel", f"--signal={sig.removeprefix('SIG')}", "--full", spec.slurm_job_id]
        transport.exec(argv).check()
        return Stopped({"signal": sig, "via": "scancel"})
