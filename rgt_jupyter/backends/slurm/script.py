"""The batch script of a Slurm job: its options, checked against Slurm's own syntax, and how it
is rendered (pinned by a golden file).

The batch script only redirects its output and ``exec``s the agent, so the agent *is* the batch
shell: ``--signal=B:USR2@<lead>`` reaches it, and it forwards the warning to the job, which saves
at its next step boundary. Paths and the interpreter travel as the script's arguments (``$1``,
``$2``), never inside ``#SBATCH`` lines, so hostile paths are passed exactly; directive values
are checked and refused when Slurm would misread them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import UsageError
from ...jobs.request import LaunchRequest
from ...machines.profiles import Profile

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


def slurm_options(
    profile: Profile, req: LaunchRequest, name: str, array: tuple[int, ...] = ()
) -> SlurmOptions:
    """The batch script's resources: the flags, else the profile's ``[sbatch]`` table."""
    conf = profile.sbatch
    gpus = req.gpus if req.gpus not in (None, "none", "0") else ""
    nproc = int(gpus.rsplit(":", 1)[-1]) if gpus else 1
    return SlurmOptions(
        job_name=name,
        time=req.time or str(conf.get("time", "")),
        partition=req.partition or str(conf.get("partition", "")),
        nodes=req.nodes or 1,
        gpus=gpus,
        cpus_per_task=int(conf.get("cpus_per_task", 0)),
        account=str(conf.get("account", "")),
        qos=str(conf.get("qos", "")),
        requeue=bool(conf.get("requeue", True)),
        signal_lead_s=int(conf.get("signal_lead_s", 120)),
        array=array,
        nproc_per_node=nproc,
        directives=tuple(conf.get("directives", [])),
    ).check()


def slurm_script(
    profile: Profile, req: LaunchRequest, name: str, array: tuple[int, ...] = ()
) -> str:
    """The rendered batch script of a launch."""
    return render_script(slurm_options(profile, req, name, array))
