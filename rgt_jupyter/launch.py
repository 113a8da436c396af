"""Prepare, ship and start a job: smoke, versioned code dir, launch bundle, registry, launcher."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import re
import secrets
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .audit import audit_cache, audit_host
from .bundle import _HERE, CELL_PROGRAM, code_hash, job_files, job_paths, push_files, ship
from .durability import check as check_durability
from .durability import refusal_advice
from .errors import JobNotFound, LaunchError, TransportError, UsageError
from .launcher import Launcher, Recovered, get_launcher
from .names import check_env_key, check_identifier, check_job_name, parse_seeds
from .profiles import Profile, load_profile
from .registry import Registry
from .slurm import SlurmOptions, render_script
from .smoke import run_smoke
from .status import observe
from .transport import Transport, get_transport

_GPUS_RE = re.compile(r"all|none|\d+(,\d+)*")


@dataclass
class LaunchRequest:
    """Everything ``%%remote_run`` / ``rgt run`` pass to :func:`launch`."""

    program: str
    name: str | None = None
    profile: str = "local"
    program_name: str = CELL_PROGRAM
    label: str = "[remote_run]"
    line_offset: int = 1
    push: list[str] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    smoke: bool | None = None
    smoke_timeout: float = 120.0
    gpus: str | None = None
    host: str | None = None
    python: str | None = None
    fresh: bool = False
    grace_s: float | None = None
    secrets: list[str] = field(default_factory=list)
    #: Root of the checkpoint dir on the machine (default: the profile's durable_dir).
    ckpt_dir: str | None = None
    #: Launch although the checkpoint dir does not survive the meter-stop verb (recorded).
    allow_ephemeral_ckpt: bool = False
    #: Resume with another job's program, pushed files and inputs, byte-identical (its spec).
    reuse_code_of: dict[str, Any] | None = None
    #: One job per seed (``RGT_SEED``), grouped as one experiment; a Slurm job array on sbatch.
    seeds: list[int] = field(default_factory=list)
    #: Scheduler resources (sbatch): time limit, partition, nodes.
    time: str | None = None
    partition: str | None = None
    nodes: int | None = None


def request_from_args(args: Any, **fields: Any) -> LaunchRequest:
    """A :class:`LaunchRequest` from the shared ``RUN_ARGS`` (magic or CLI) plus ``fields``."""
    from .names import parse_env_pairs

    return LaunchRequest(
        push=args.push,
        env=parse_env_pairs(args.env),
        smoke=args.smoke,
        smoke_timeout=args.smoke_timeout,
        gpus=args.gpus,
        host=args.host,
        python=args.python,
        fresh=args.fresh,
        grace_s=args.grace,
        secrets=args.secret,
        ckpt_dir=args.ckpt_dir,
        allow_ephemeral_ckpt=args.allow_ephemeral_ckpt,
        seeds=parse_seeds(args.seeds) if args.seeds else [],
        time=args.time,
        partition=args.partition,
        nodes=args.nodes,
        **fields,
    )


def default_name(program: str) -> str:
    """A stable name for an unnamed cell: re-running the same cell finds the same job."""
    return "job-" + hashlib.sha256(program.encode()).hexdigest()[:8]


def stamp() -> str:
    """The UTC time as it appears in job ids and lineages (``20261130T095513``)."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime())


def _serialize_inputs(inputs: dict[str, Any]) -> dict[str, bytes]:
    """Notebook variables for ``--inputs``: JSON when it round-trips, else pickle (protocol 4)."""
    files: dict[str, bytes] = {}
    for name, value in inputs.items():
        check_identifier(name, "--inputs variable")
        try:
            text = json.dumps(value)
            if json.loads(text) == value:
                files[f"{name}.json"] = text.encode()
                continue
        except (TypeError, ValueError):
            pass
        try:
            files[f"{name}.pkl"] = pickle.dumps(value, protocol=4)
        except Exception as exc:  # noqa: BLE001 - turned into a message the user can act on
            raise UsageError(
                f"--inputs {name}: cannot ship this value ({exc}); save it to a "
                "file and use --push instead"
            ) from exc
    return files


def _push_entries(paths: list[str]) -> list[tuple[Path, str]]:
    """(local file, relative destination) for every file under the ``--push`` paths."""
    entries: list[tuple[Path, str]] = []
    seen: set[str] = set()
    for raw in paths:
        src = Path(raw).expanduser()
        if not src.exists():
            raise UsageError(f"--push {raw!r}: no such file or directory")
        base = src.resolve().name
        if base in seen or base in (CELL_PROGRAM,):
            raise UsageError(f"--push {raw!r}: another pushed item is already named {base!r}")
        seen.add(base)
        if src.is_dir():
            for dirpath, dirnames, filenames in os.walk(src):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                for fname in sorted(filenames):
                    full = Path(dirpath) / fname
                    if full.is_symlink():
                        continue
                    entries.append((full, f"{base}/{full.relative_to(src).as_posix()}"))
        else:
            entries.append((src, base))
    return entries


def read_secrets(names: list[str]) -> dict[str, str]:
    """The values of ``--secret NAME``: environment variables of this process."""
    values: dict[str, str] = {}
    for name in names:
        check_env_key(name)
        if name not in os.environ:
            raise UsageError(
                f"--secret {name}: there is no environment variable {name} in this kernel; set "
                f"it first (e.g. os.environ[{name!r}] = getpass.getpass())"
            )
        values[name] = os.environ[name]
    return values


def _gpus_env(gpus: str | None) -> dict[str, str]:
    if gpus is None or gpus == "all":
        return {}
    if not _GPUS_RE.fullmatch(gpus):
        raise UsageError(f"--gpus {gpus!r}: use device indices like 0 or 0,1, or 'all' / 'none'")
    return {"CUDA_VISIBLE_DEVICES": "" if gpus == "none" else gpus}


@dataclass
class _Staged:
    """What a launch sends: the files of the bundle, where they go, and their hashes."""

    files: dict[str, bytes]
    paths: dict[str, str]
    deployed: dict[str, str]
    pushed: list[str]
    inputs: list[str]


def _stage(
    transport: Transport,
    req: LaunchRequest,
    control: str,
    python: str,
    objects: str,
    pushed: list[tuple[Path, str]],
    inputs: dict[str, bytes],
) -> _Staged:
    """The job's files, paths and ``deployed`` hashes; ``--push`` files go ahead through the
    object store. A resume that reuses another job's code sends none of it again."""
    reuse = req.reuse_code_of
    if reuse is not None:
        paths = {k: reuse[k] for k in ("code_dir", "lib_dir", "inputs_dir", "program")}
        return _Staged({}, paths, dict(reuse["deployed"]), reuse["pushed"], reuse["inputs"])
    files = job_files(req, inputs)
    deployed = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    for rel, sha in push_files(transport, python, control, objects, pushed).items():
        deployed[f"code/{rel}"] = sha
    paths = job_paths(control, req.program_name)
    return _Staged(files, paths, deployed, [rel for _, rel in pushed], sorted(req.inputs))


def _previous(registry: Registry, transport: Transport, name: str) -> dict[str, Any] | None:
    """The job's previous row (its state refreshed), or None; refused while it still runs."""
    try:
        previous = registry.get(name)
    except JobNotFound:
        return None
    if previous["state"] == "failed" and previous["spec"].get("not_started"):
        return previous  # its launch established that nothing of it started
    prev_state = observe(transport, previous["spec"]).state
    registry.set_state(previous["id"], prev_state)
    if prev_state in ("queued", "running"):
        raise UsageError(
            f"job {name!r} is still {prev_state} ({previous['id']}): `%watch {name}` to follow "
            "it, or pick another --name"
        )
    previous["state"] = prev_state
    return previous


def _check_python(python: str) -> str:
    if not python or python.startswith("-"):
        raise UsageError(f"--python {python!r}: give the interpreter's name or path")
    return python


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

    spec: dict[str, Any]
    files: dict[str, bytes]
    secrets: dict[str, str]
    durability_ok: bool


def resolve_target(req: LaunchRequest, project: Path) -> Target:
    """The profile, host, interpreter, transport and registry a launch goes to."""
    profile: Profile = load_profile(req.profile, project)
    if profile.launcher == "k8s-job" or profile.transport == "kubernetes":
        from .k8s_launch import check_k8s_profile

        check_k8s_profile(profile)
    host_alias = req.host or profile.host or None
    if profile.transport == "kubernetes":
        host_alias = str(profile.kubernetes.get("namespace") or "default")  # where, in k8s words
    if profile.transport == "local":
        if host_alias not in (None, "localhost", "127.0.0.1"):
            raise UsageError(
                f"--host {host_alias!r}: profile {profile.name!r} runs on this machine; "
                "use an ssh profile (--profile ssh) to run elsewhere"
            )
        host_alias = None
    python = _check_python(req.python or profile.interpreter())
    transport = get_transport(profile.transport, host_alias, project)
    return Target(profile, project, host_alias, python, transport, Registry(project), "")


def prepare(
    req: LaunchRequest,
    tgt: Target,
    *,
    control: str | None = None,
    smoke: bool | None = None,
    extra_spec: dict[str, Any] | None = None,
) -> Prepared:
    """Every check (name, flags, paths, durability, smoke) and the job's spec and files; nothing
    is registered or started here."""
    profile, project, transport, registry = tgt.profile, tgt.project, tgt.transport, tgt.registry
    name = check_job_name(req.name if req.name is not None else default_name(req.program))
    scheduler = profile.launcher in ("sbatch", "k8s-job")
    env = {**req.env, **({} if scheduler else _gpus_env(req.gpus))}
    reuse = req.reuse_code_of
    pushed = _push_entries(req.push) if reuse is None else []
    inputs = _serialize_inputs(req.inputs) if reuse is None else {}
    secret_values = read_secrets(req.secrets)

    previous = _previous(registry, transport, name)
    resume = (
        previous is not None
        and previous["state"] in ("preempted", "failed", "lost")
        and not req.fresh
    )
    lineage = previous["lineage"] if resume and previous else f"{stamp()}-{secrets.token_hex(3)}"
    home = tgt.home or transport.home()
    tgt.home = home
    durable = f"{profile.expand(profile.durable_dir, project, home)}/{name}/{lineage}"
    ckpt_root = req.ckpt_dir or (previous["spec"].get("ckpt_root") if resume and previous else None)
    if ckpt_root is not None and not ckpt_root.startswith("/"):
        raise UsageError(f"--ckpt-dir {ckpt_root!r}: give an absolute path on the machine")
    ckpt_dir = f"{ckpt_root}/{name}/{lineage}/ckpt" if ckpt_root else f"{durable}/ckpt"
    durability = check_durability(profile, ckpt_dir, project, home)
    allow = req.allow_ephemeral_ckpt or bool(
        resume and previous and (previous["spec"].get("durability") or {}).get("overridden")
    )
    if not durability.ok and not allow:
        raise UsageError(refusal_advice(profile, durability))
    if not durability.ok:
        durability = replace(durability, overridden=True)

    smoke_run = profile.smoke_default if req.smoke is None else req.smoke
    if smoke is not None:
        smoke_run = smoke_run and smoke
    if smoke_run:
        files = job_files(req, inputs) if reuse is None else {}
        run_smoke(req, files, pushed, env, secret_values)

    attempt = previous["attempt"] + 1 if resume and previous else 1
    job_id = f"{name}-{stamp()}-{secrets.token_hex(2)}"
    workdir = profile.expand(profile.workdir, project, home)
    control = control or f"{workdir}/{job_id}"
    if transport.name != "kubernetes":
        if pushed or not audit_cache(profile, transport, project).exists():
            transport.put(_HERE / "agent.py", f"{control}/agent.py")  # for the audit, the push
        report = audit_host(transport, tgt.python, control, profile, project, home)
    else:
        report = {"findings": [], "facts": {"python": None}, "at": time.time()}
    staged = _stage(transport, req, control, tgt.python, f"{workdir}/.objects", pushed, inputs)
    hash_ = code_hash(staged.deployed)
    spec: dict[str, Any] = {
        "job_id": job_id,
        "name": name,
        "lineage": lineage,
        "attempt": attempt,
        "profile": profile.name,
        "host": transport.host,
        "host_alias": tgt.host_alias,
        "transport": profile.transport,
        "launcher": profile.launcher,
        "project": str(project),
        "control_dir": control,
        "out_dir": f"{durable}/out",
        "ckpt_dir": ckpt_dir,
        "ckpt_root": ckpt_root,
        "durability": durability.record(),
        "instance_id": instance_for(registry, profile.name, tgt.host_alias),
        "python": tgt.python,
        "cwd": staged.paths["code_dir"],
        "env": env,
        "resume": resume,
        "grace_s": req.grace_s if req.grace_s is not None else profile.grace_s,
        "heartbeat_s": profile.heartbeat_s,
        "line_offset": req.line_offset,
        "label": req.label,
        "code_hash": hash_,
        "deployed": staged.deployed,
        "secret_names": sorted(secret_values),
        "audit": {
            "findings": report["findings"],
            "python": report["facts"]["python"],
            "at": report["at"],
        },
        "pushed": staged.pushed,
        "inputs": staged.inputs,
        "smoke": smoke_run,
        "created_at": time.time(),
        "previous_job": previous["id"] if previous else None,
        "code_changed": bool(resume and previous and previous["spec"].get("code_hash") != hash_),
        **staged.paths,
        **(extra_spec or {}),
    }
    return Prepared(spec, staged.files, secret_values, durability.ok)


def _register(tgt: Target, prepared: Prepared) -> None:
    spec = prepared.spec
    tgt.registry.add_job(
        spec["job_id"],
        spec["name"],
        spec["lineage"],
        spec["attempt"],
        tgt.profile.name,
        tgt.transport.host,
        spec,
    )
    if not prepared.durability_ok:
        tgt.registry.event(spec["job_id"], "durability_overridden", **spec["durability"])


def submit_prepared(
    tgt: Target, members: list[Prepared], bundle: bytes, control: str
) -> list[dict[str, Any]]:
    """Register the jobs, send the bundle and start them in one command; return their rows.

    A connection that drops after the command was sent may have taken the reply with it while
    the job started: the host is asked (:meth:`~.launcher.Launcher.recover`) before anything is
    called failed, and a job that started is returned as launched, with a notice."""
    for prepared in members:
        _register(tgt, prepared)
    launcher = get_launcher(tgt.profile.launcher)
    ids = [p.spec["job_id"] for p in members]
    notices: list[str] = []
    try:
        record = launcher.submit(tgt.transport, tgt.python, control, bundle)
    except Exception as exc:
        # Only a connection that broke (an SSH error says whether the command was sent) leaves
        # the outcome open; any other failure is the host's or the scheduler's own answer.
        if not isinstance(exc, TransportError) or getattr(exc, "maybe_ran", None) is None:
            for job_id in ids:
                tgt.registry.set_state(job_id, "failed", reason=str(exc))
            raise
        record = _reply_lost(tgt, launcher, members, control, len(bundle), exc)
        notices.append(
            f"The connection to {tgt.transport.host} dropped before the launch's reply came "
            f"back ({exc}); the job had started there (its agent reported), so it was not "
            "launched again."
        )
    line = launcher.launch_line(tgt.python, control)
    rows = []
    for prepared in members:
        job_id = prepared.spec["job_id"]
        mine = dict(record)
        if "slurm_job_id" in mine and prepared.spec.get("array_task") is not None:
            mine["slurm_job_id"] = f"{mine['slurm_job_id']}_{prepared.spec['array_task']}"
        tgt.registry.update_spec(job_id, launched_at=time.time(), **mine)
        tgt.registry.event(
            job_id,
            "launched",
            resume=prepared.spec["resume"],
            attempt=prepared.spec["attempt"],
            launch_line=line,
            **mine,
        )
        rows.append(tgt.registry.get(job_id))
    rows[0]["notices"] = notices + first_contact_notices(tgt.registry, tgt.profile)
    return rows


def _reply_lost(
    tgt: Target,
    launcher: Launcher,
    members: list[Prepared],
    control: str,
    bundle_size: int,
    exc: TransportError,
) -> dict[str, Any]:
    """The launch record of jobs whose launch command lost its connection: found on the host
    when they started; otherwise a :class:`LaunchError` that says whether they did not start
    (they are ``failed``) or whether that cannot be told (they stay ``queued`` until a look at
    the host decides: running, or lost once the start grace has passed)."""
    ids = [p.spec["job_id"] for p in members]
    host = tgt.transport.host
    names = ", ".join(p.spec["name"] for p in members)

    def failed(why: str, certain: bool = True) -> LaunchError:
        for job_id in ids:
            if certain:  # nothing of it runs: a launch again need not wait for a look
                tgt.registry.update_spec(job_id, not_started=why)
            tgt.registry.set_state(job_id, "failed", reason=why)
        return LaunchError(why)

    if not getattr(exc, "maybe_ran", False):
        raise failed(
            f"the launch of {names} never reached {host} ({exc}); nothing was started there. "
            "Launch again once the host answers."
        ) from exc
    single = len(members) == 1 and members[0].spec["control_dir"] == control
    found = (
        launcher.recover(tgt.transport, control, bundle_size)
        if single
        else Recovered(None, f"{len(members)} jobs were started by one command")
    )
    for job_id in ids:
        tgt.registry.event(job_id, "launch_reply_lost", error=str(exc), found=found.detail)
    if found.started:
        return found.record
    if found.started is False:
        raise failed(
            f"the connection to {host} dropped during the launch of {names} ({exc}), and the "
            f"job did not start: {found.detail}. Nothing runs there: launch it again."
        ) from exc
    if launcher.name not in ("detached", "tmux") or not single:
        raise failed(
            f"the connection to {host} dropped during the launch of {names} ({exc}); whether "
            f"the {launcher.name} launch was taken cannot be told from here ({found.detail}). "
            "Check the scheduler's queue there before launching again.",
            certain=False,
        ) from exc
    raise LaunchError(
        f"the connection to {host} dropped during the launch of {names} ({exc}), and whether "
        f"the job started could not be told ({found.detail}): it may be running. "
        f"`%watch {members[0].spec['name']}` tells within a minute (`lost` if it never "
        "started); launching it again is refused until then."
    ) from exc


def _bundle_one(tgt: Target, prepared: Prepared, req: LaunchRequest) -> bytes:
    files = dict(prepared.files)
    if tgt.profile.launcher == "sbatch":
        files["job.sbatch"] = slurm_script(tgt.profile, req, prepared.spec["name"]).encode()
    return ship(files, prepared.spec, prepared.secrets)


def launch(req: LaunchRequest, project: Path) -> dict[str, Any]:
    """Launch (or resume) a job; return its registry row. Nothing is created before every check
    (name, profile, flags, paths, smoke) has passed.

    Without ``--push`` (and once the host's audit is cached) the remote sees one command: the
    launch bundle on its stdin, the agent started detached (or the batch script submitted), no
    wait for the remote Python.
    """
    if req.seeds:
        raise UsageError("a launch with --seeds gives several jobs: use launch_group.launch_seeds")
    tgt = resolve_target(req, project)
    extra = scheduler_spec(tgt.profile, req)
    prepared = prepare(req, tgt, extra_spec=extra)
    bundle = _bundle_one(tgt, prepared, req)
    return submit_prepared(tgt, [prepared], bundle, prepared.spec["control_dir"])[0]


def scheduler_spec(profile: Profile, req: LaunchRequest) -> dict[str, Any]:
    """What the agent needs to know about the scheduler it runs under."""
    if profile.launcher == "k8s-job":
        if req.push:
            raise UsageError(
                f"--push is not available on {profile.name!r}: a Kubernetes job runs the code "
                "baked into its image; add the files to the image and pin its new digest"
            )
        return {"gpus_request": req.gpus or "0", "kubernetes": dict(profile.kubernetes)}
    if profile.launcher != "sbatch":
        return {}
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


def instance_for(registry: Registry, profile: str, host_alias: str | None) -> str | None:
    """The live machine (from ``rgt up``) a job on this profile and host runs on, if any."""
    for inst in reversed(registry.instances(live_only=True)):
        if inst["profile"] == profile and inst["host_alias"] in ("", host_alias or ""):
            return str(inst["id"])
    return None


def first_contact_notices(registry: Registry, profile: Profile) -> list[str]:
    """The profile's danger clocks and billing traps, shown on its first launch in this project
    only (the acknowledgement is recorded); later launches return nothing."""
    if not (profile.danger_clocks or profile.billing_traps):
        return []
    lines = [f"First launch on {profile.platform or profile.name}: what can cost data or money"]
    lines += [f"  clock: {n.text}" for n in profile.danger_clocks]
    lines += [f"  billing: {n.text}" for n in profile.billing_traps]
    lines.append(f"  (shown once; `rgt profiles show {profile.name}` shows them again)")
    if not registry.ack(profile.name, "danger_clocks", how="shown at first launch", text=lines):
        return []
    return lines
