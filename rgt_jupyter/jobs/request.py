"""What a launch is asked for (:class:`LaunchRequest`), where it goes (:class:`Target`) and a job
ready to submit (:class:`Prepared`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..machines.profiles import Profile
from ..store.names import parse_env_pairs, parse_seeds
from ..store.registry import Registry
from ..transport import Transport
from .spec import JobSpec

#: The file name a cell's program gets in the job's code dir.
CELL_PROGRAM = "rgt_cell.py"


@dataclass
class LaunchRequest:
    """Everything a launch is asked for: the program and every option of ``%%remote_run`` /
    ``rgt run`` (``rgt_jupyter.submit`` takes the same names)."""

    program: str
    name: str | None = None
    profile: str = "local"
    program_name: str = CELL_PROGRAM
    label: str = "[remote_run]"
    line_offset: int = 1
    push: list[str] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    #: Run the CPU smoke first (None: the profile's default); ``"overfit"``: the overfit one
    #: batch smoke (``--smoke=overfit``).
    smoke: bool | str | None = None
    smoke_timeout: float = 120.0
    gpus: str | None = None
    host: str | None = None
    python: str | None = None
    fresh: bool = False
    grace_s: float | None = None
    secrets: list[str] = field(default_factory=list)
    #: Root of the checkpoint dir on the machine (default: the profile's durable_dir).
    ckpt_dir: str | None = None
    #: ``--bucket``: an S3 URL for the checkpoints (else the profile's ``[bucket]``).
    bucket: str | None = None
    #: ``--budget``: USD at which the job is told to save and stop (every attempt counted).
    budget: float | None = None
    #: Launch although the checkpoint dir does not survive the meter-stop verb (recorded).
    allow_ephemeral_ckpt: bool = False
    #: Resume with another job's program, pushed files and inputs, byte-identical (its spec).
    reuse_code_of: JobSpec | None = None
    #: The same, sent again from the copy kept at that job's launch (a new machine: the code
    #: dir it ran from went with the old one).
    resend_code_of: JobSpec | None = None
    #: One job per seed (``RGT_SEED``), grouped as one experiment; a Slurm job array on sbatch.
    seeds: list[int] = field(default_factory=list)
    #: Scheduler resources (sbatch): time limit, partition, nodes.
    time: str | None = None
    partition: str | None = None
    nodes: int | None = None
    #: The notebook and cell that launch it (re-running that cell finds its job again), and a
    #: digest of the cell's options and text.
    notebook: str | None = None
    cell_id: str | None = None
    cell_digest: str | None = None


_FIELDS = frozenset(f.name for f in dataclasses.fields(LaunchRequest))


def make_request(program: str | LaunchRequest, **options: Any) -> LaunchRequest:
    """A :class:`LaunchRequest` for ``program`` with ``options`` (its field names). Options may
    come as a front door holds them: ``env`` as ``["K=V", ...]``, ``seeds`` as ``"0-4"``,
    ``push`` and ``secrets`` as one string. A request given whole is returned as it is, or
    with ``options`` replaced."""
    unknown = sorted(set(options) - _FIELDS)
    if unknown:
        raise UsageError(f"not options of a launch: {', '.join(unknown)}")
    env = options.get("env")
    if env is not None and not isinstance(env, Mapping):
        options["env"] = parse_env_pairs(list(env))
    seeds = options.get("seeds")
    if isinstance(seeds, str):
        options["seeds"] = parse_seeds(seeds)
    elif seeds is None:
        options.pop("seeds", None)
    for name in ("push", "secrets"):
        value = options.get(name)
        if isinstance(value, str):
            options[name] = [value]
        elif value is None:
            options.pop(name, None)
        elif isinstance(value, Sequence):
            options[name] = list(value)
    if isinstance(program, LaunchRequest):
        return dataclasses.replace(program, **options) if options else program
    return LaunchRequest(program=program, **options)


@dataclass
class Target:
    """Where a launch goes: the profile, the transport and the registry, resolved once."""

    profile: Profile
    project: Path
    host_alias: str | None
    python: str
    transport: Transport
    registry: Registry
    home: str


@dataclass
class Prepared:
    """One job, ready to submit: its spec and the bundle files that carry it."""

    spec: JobSpec
    files: dict[str, bytes]
    secrets: dict[str, str]
    durability_ok: bool
