"""Slurm: the sbatch launcher and the meaning of Slurm's job states.

A Slurm job is submitted in one command on the login node (local, or over SSH): the launch
bundle arrives on stdin, is unpacked into the job's control dir on the shared filesystem, and
``sbatch --parsable`` submits the rendered batch script (pinned by a golden file). The batch
script only redirects its output and ``exec``s the agent, so the agent *is* the batch shell:
``--signal=B:USR2@<lead>`` reaches it, and it forwards the warning to the job, which saves at its
next step boundary. With ``--requeue`` a requeued job runs the same script again in the same
control dir; the agent sees the earlier attempt's records and resumes (``RGT_RESUME=1``).

Paths and the interpreter travel as the batch script's arguments (``$1``, ``$2``), never inside
``#SBATCH`` lines, so hostile paths are passed exactly; directive values are checked against
Slurm's own syntax and refused otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .errors import LaunchError, UsageError
from .launcher import NO_INTERPRETER, Launcher, interpreter_check
from .transport import Transport

#: Exit status of the submit script when sbatch is not on the login node's PATH.
NO_SBATCH = 125
_TIME_RE = re.compile(r"\d+(:\d{1,2}){0,2}|\d+-\d+(:\d{1,2}){0,2}")
_WORD = r"[A-Za-z0-9_.-]+"
_LIST_RE = re.compile(rf"{_WORD}(,{_WORD})*")
_GPUS_RE = re.compile(rf"({_WORD}:)?[1-9][0-9]*")
_DIRECTIVE_RE = re.compile(r"--[a-z][a-z-]*(=[A-Za-z0-9_.,:=@%+/-]+)?")
#: Options whose values rgt sets itself (a profile's extra directives cannot change them).
_OWN = ("--output", "--error", "--array", "--signal", "--job-name", "--open-mode", "--requeue")


@dataclass(frozen=True)
class SlurmOptions:
    """What the batch script asks Slurm for."""

    job_name: str
    time: str = ""
    partition: str = ""
    nodes: int = 1
    gpus: str = ""
    cpus_per_task: int = 0
    account: str = ""
    qos: str = ""
    requeue: bool = True
    signal_lead_s: int = 120
    array: tuple[int, ...] = ()
    nproc_per_node: int = 1
    directives: tuple[str, ...] = ()

    def check(self) -> SlurmOptions:
        """Refuse values Slurm would misread; return self."""
        if self.time and not _TIME_RE.fullmatch(self.time):
            raise UsageError(
                f"--time {self.time!r}: use Slurm's forms MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM "
                "or D-HH:MM:SS (e.g. --time 2:00:00)"
            )
        for flag, value in (("partition", self.partition), ("account", self.account)):
            if value and not _LIST_RE.fullmatch(value):
                raise UsageError(f"--{flag} {value!r}: letters, digits, '.', '_', '-' (and ',')")
        if self.qos and not _LIST_RE.fullmatch(self.qos):
            raise UsageError(f"qos {self.qos!r}: letters, digits, '.', '_', '-'")
        if self.gpus and not _GPUS_RE.fullmatch(self.gpus):
            raise UsageError(
                f"--gpus {self.gpus!r}: on Slurm give GPUs per node as N or TYPE:N "
                "(e.g. --gpus 2 or --gpus a100:2)"
            )
        if not 1 <= self.nodes <= 4096:
            raise UsageError(f"--nodes {self.nodes}: give 1 or more")
        if not 1 <= self.signal_lead_s <= 65535:
            raise UsageError(f"signal lead {self.signal_lead_s} s: Slurm takes 1..65535 seconds")
        seconds = time_seconds(self.time) if self.time else None
        if seconds is not None and self.signal_lead_s >= seconds:
            raise UsageError(
                f"--time {self.time} is not longer than the {self.signal_lead_s} s warning "
                "before it: the job would be warned at its start. Ask for more time."
            )
        for item in self.directives:
            name = item.split("=", 1)[0]
            if not _DIRECTIVE_RE.fullmatch(item) or name in _OWN:
                raise UsageError(
                    f"sbatch directive {item!r} is refused: give --option or --option=value "
                    f"(no spaces or quotes), and not one of {', '.join(_OWN)}, which rgt sets"
                )
        return self


def time_seconds(value: str) -> int:
    """Seconds of a Slurm time limit (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``)."""
    days = 0
    if "-" in value:
        d, value = value.split("-", 1)
        days = int(d)
        parts = [int(p) for p in value.split(":")] + [0, 0]
        return days * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]
    parts = [int(p) for p in value.split(":")]
    if len(parts) == 1:
        return parts[0] * 60
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return parts[0] * 3600 + parts[1] * 60 + parts[2]


def array_spec(seeds: tuple[int, ...]) -> str:
    """``--array`` value for these task ids: ranges where they run consecutively."""
    out: list[str] = []
    start = prev = seeds[0]
    for s in seeds[1:] + (-2,):
        if s == prev + 1:
            prev = s
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = s
    return ",".join(out)


_HEAD = "#!/bin/sh\n# rgt-jupyter batch script: the agent supervises the job (see control/log).\n"
#: Multi-node: the rendezvous comes from Slurm's own variables; the agent starts one torchrun
#: per node with srun and records the NCCL settings it ran with.
_RDZV = """\
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
MASTER_PORT=$((29500 + SLURM_JOB_ID % 1000))
export MASTER_ADDR MASTER_PORT
"""
#: An early warning must not kill the agent before its handler is in place: ignored here, the
#: signal stays ignored across ``exec`` until the agent installs its own handler.
_BODY = """\
trap '' USR2
exec >>"$control/agent.log" 2>&1 </dev/null
exec "$python" -u "$control/agent.py" run "$control"
"""


def render_script(opts: SlurmOptions) -> str:
    """The batch script (``$1`` = control dir or, for an array, the group dir; ``$2`` = python)."""
    opts.check()
    lines = [f"--job-name={opts.job_name}", "--output=/dev/null", "--open-mode=append"]
    lines.append("--requeue" if opts.requeue else "--no-requeue")
    lines.append(f"--signal=B:USR2@{opts.signal_lead_s}")
    optional = {
        "array": array_spec(opts.array) if opts.array else "",
        "time": opts.time,
        "partition": opts.partition,
        "account": opts.account,
        "qos": opts.qos,
    }
    lines += [f"--{key}={value}" for key, value in optional.items() if value]
    lines += [f"--nodes={opts.nodes}", "--ntasks-per-node=1"]
    if opts.cpus_per_task:
        lines.append(f"--cpus-per-task={opts.cpus_per_task}")
    if opts.gpus:
        lines.append(f"--gres=gpu:{opts.gpus}")
    lines += list(opts.directives)
    script = _HEAD + "".join(f"#SBATCH {line}\n" for line in lines)
    if opts.array:
        script += "control=$1/$SLURM_ARRAY_TASK_ID python=$2\n"
    else:
        script += "control=$1 python=$2\n"
    if opts.nodes > 1:
        script += _RDZV
    return script + _BODY


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


class SlurmLauncher(Launcher):
    """``sbatch``: the job (or a seed array) runs when Slurm schedules it, on a compute node."""

    name = "sbatch"

    def render(self, python: str, control_dir: str) -> list[str]:
        script = SUBMIT_SCRIPT.replace("@CHECK@", interpreter_check())
        batch = f"{control_dir}/job.sbatch"
        return ["sh", "-c", script, "rgt-submit", control_dir, python, batch, control_dir, python]

    def submit(
        self, transport: Transport, python: str, control_dir: str, bundle: bytes
    ) -> dict[str, Any]:
        result = transport.exec(self.render(python, control_dir), stdin=bundle, timeout=300)
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


# -- states -----------------------------------------------------------------------------------

#: Slurm states in which the job has not started (again) yet.
WAITING = frozenset(
    {
        "PENDING",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESV_DEL_HOLD",
        "CONFIGURING",
        "SPECIAL_EXIT",
        "SUSPENDED",
        "STOPPED",
        "RESIZING",
        "SIGNALING",
    }
)
ALIVE = frozenset({"RUNNING", "COMPLETING", "STAGE_OUT"})
#: Terminal states that say why on their own (the agent's record adds the checkpoint part).
VERDICTS: dict[str, tuple[str, str]] = {
    "TIMEOUT": ("failed", "walltime (TIMEOUT): the job ran past its --time limit"),
    "OUT_OF_MEMORY": (
        "failed",
        "out of memory (OUT_OF_MEMORY): the job used more RAM than it asked Slurm for; ask "
        "for more with --mem (a profile directive) or lower the batch size / num_workers",
    ),
    "NODE_FAIL": (
        "failed",
        "node failure (NODE_FAIL): the compute node went down under the job; re-run the cell "
        "to resume from its latest checkpoint",
    ),
    "BOOT_FAIL": ("failed", "the node failed to boot (BOOT_FAIL); re-run the cell"),
    "DEADLINE": ("failed", "the job's --deadline passed (DEADLINE)"),
    "PREEMPTED": (
        "preempted",
        "preempted (PREEMPTED): a higher-priority job took the node; re-run the cell to "
        "resume from its latest checkpoint",
    ),
}


def waiting_diagnosis(raw: str, reason: str) -> str:
    """Why a job that has not started is waiting, in Slurm's words and ours."""
    why = {
        "Resources": "waiting for free resources",
        "Priority": "waiting behind higher-priority jobs",
        "BeginTime": "held until its begin time (Slurm delays a requeued job briefly)",
        "JobHeldUser": "held by the user (scontrol release to let it run)",
        "JobHeldAdmin": "held by an administrator",
        "PartitionTimeLimit": "its --time exceeds the partition's limit: it will never start",
        "ReqNodeNotAvail": "the nodes it needs are not available",
        "QOSMaxJobsPerUserLimit": "your QOS job limit is reached",
    }.get(reason, "")
    words = f"{raw.lower()} ({reason})" if reason and reason != "None" else raw.lower()
    return f"Slurm: {words}" + (f": {why}" if why else "")
