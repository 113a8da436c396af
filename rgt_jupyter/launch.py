"""Prepare, ship and start a job: smoke, versioned code dir, launch bundle, registry, launcher."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import pickle
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .agent import sha256_file
from .durability import check as check_durability
from .durability import refusal_advice
from .errors import JobNotFound, LaunchError, SmokeFailed, UsageError
from .launcher import get_launcher
from .names import check_env_key, check_identifier, check_job_name
from .profiles import Profile, load_profile
from .registry import Registry
from .render import traceback_lines
from .slurm import SlurmOptions, render_script
from .status import observe
from .transport import Transport, get_transport

CELL_PROGRAM = "rgt_cell.py"
_HERE = Path(__file__).resolve().parent  # agent.py, job.py, bundle_main.py are shipped from here
_LIB_INIT = '"""rgt_jupyter, as shipped beside a job: only the job-side API (rgt_jupyter.job)."""\n'
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


def parse_seeds(text: str) -> list[int]:
    """``0-4`` / ``0,3,7`` / ``1-3,9`` as a sorted list of distinct seeds (at most 1000)."""
    seeds: set[int] = set()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise UsageError(f"--seeds {text!r}: use a range like 0-4, a list like 0,3,7, or both")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first or last - first >= 1000:
            raise UsageError(f"--seeds {text!r}: {part} is not an increasing range of <= 1000")
        seeds.update(range(first, last + 1))
    if len(seeds) > 1000:
        raise UsageError(f"--seeds {text!r}: at most 1000 seeds in one group")
    return sorted(seeds)


def default_name(program: str) -> str:
    """A stable name for an unnamed cell: re-running the same cell finds the same job."""
    return "job-" + hashlib.sha256(program.encode()).hexdigest()[:8]


def _stamp() -> str:
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


def code_hash(deployed: dict[str, str]) -> str:
    """sha256 over the program and every pushed file (relative path and content hash)."""
    code = sorted((k, v) for k, v in deployed.items() if k.startswith("code/"))
    return hashlib.sha256(json.dumps(code).encode()).hexdigest()


def push_files(
    transport: Transport,
    python: str,
    control: str,
    objects: str,
    pushed: list[tuple[Path, str]],
) -> dict[str, str]:
    """Push files content-addressed: only objects the remote store lacks are sent; the agent
    then copies them into ``<control>/code`` (a per-job dir: a live job's inputs never change).
    Returns ``{rel: sha256}``."""
    if not pushed:
        return {}
    wanted = {rel: sha256_file(str(local))[0] for local, rel in pushed}
    agent = f"{control}/agent.py"

    def agent_json(*args: str, payload: Any) -> Any:
        result = transport.exec(
            [python, agent, *args], stdin=json.dumps(payload).encode(), timeout=3600
        )
        if result.returncode != 0:
            raise LaunchError(
                f"the agent failed on {transport.host} ({' '.join(args[:1])}): "
                + result.stderr.decode(errors="replace")[-1000:]
            )
        return json.loads(result.stdout)

    local_of = {sha: local for (local, rel) in pushed for sha in [wanted[rel]]}
    missing = agent_json("have", objects, payload=sorted(set(wanted.values())))
    for _ in range(2):
        for sha in missing:
            transport.put(local_of[sha], f"{objects}/{sha[:2]}/{sha}")
        bad = agent_json("materialize", objects, f"{control}/code", payload=wanted)["bad"]
        if not bad:
            return wanted
        missing = bad  # a damaged object was dropped: send it again, once
    raise LaunchError(f"objects kept arriving damaged on {transport.host}: {missing[:3]}")


def job_files(req: LaunchRequest, inputs: dict[str, bytes]) -> dict[str, bytes]:
    """The files a job needs besides its pushed ones, named relative to its control dir: the
    program (``code/``), the serialized ``--inputs`` (``inputs/``) and the job API (``lib/``)."""
    files = {f"code/{req.program_name}": req.program.encode()}
    for fname, data in inputs.items():
        files[f"inputs/{fname}"] = data
    files["lib/rgt_jupyter/__init__.py"] = _LIB_INIT.encode()
    files["lib/rgt_jupyter/job.py"] = (_HERE / "job.py").read_bytes()
    return files


def job_paths(control: str, program_name: str) -> dict[str, str]:
    """Where a job's code, job API and inputs live under its control dir."""
    code = f"{control}/code"
    return {
        "code_dir": code,
        "lib_dir": f"{control}/lib",
        "inputs_dir": f"{control}/inputs",
        "program": f"{code}/{program_name}",
    }


def member_mode(name: str) -> int:
    """File mode of a bundle member where it lands: the inputs and the secrets are private."""
    parts = name.split("/")
    return 0o600 if parts[-1] == "secrets.json" or "inputs" in parts[:-1] else 0o644


def bundle_members(
    files: dict[str, bytes], spec: dict[str, Any], secret_values: dict[str, str]
) -> dict[str, bytes]:
    """What one job's control dir receives: ``agent.py``, its files, ``launch.json`` and, when
    there are secrets, ``secrets.json``."""
    members = {
        "agent.py": (_HERE / "agent.py").read_bytes(),
        **files,
        "launch.json": json.dumps(spec, indent=1).encode(),
    }
    if secret_values:
        members["secrets.json"] = json.dumps(secret_values).encode()
    return members


def zip_bundle(members: dict[str, bytes]) -> bytes:
    """The launch bundle: one zip (members stored, named relative to the control dir) with the
    unpacking ``__main__.py``. It travels as the stdin of the one launch command, so the
    secrets never show in a command line, an environment or a log."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        everything = {"__main__.py": (_HERE / "bundle_main.py").read_bytes(), **members}
        for name, data in everything.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | member_mode(name)) << 16
            zf.writestr(info, data)
    return buf.getvalue()


def ship(files: dict[str, bytes], spec: dict[str, Any], secret_values: dict[str, str]) -> bytes:
    """The launch bundle of one job (see :func:`zip_bundle`)."""
    return zip_bundle(bundle_members(files, spec, secret_values))


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


def audit_cache(profile: Profile, transport: Transport, project: Path) -> Path:
    """Where the audit of the profile's host is kept."""
    return project / ".rgt" / "audit" / f"{profile.name}-{transport.host}.json"


def audit_host(
    transport: Transport, python: str, control: str, profile: Profile, project: Path, home: str
) -> dict[str, Any]:
    """Phase-0 audit, once per host and project (cached in ``.rgt/audit/``), in one command
    (``<control>/agent.py`` must be in place unless it is cached).

    Findings are disclosed, not blocking, except a durable dir that cannot be written.
    """
    from .fsutil import atomic_write_bytes

    cache = audit_cache(profile, transport, project)
    if cache.exists():
        report: dict[str, Any] = json.loads(cache.read_text())
        return report
    dirs = [
        profile.expand(d, project, home)
        for d in (profile.durable_dir, profile.scratch_dir, profile.workdir)
    ]
    # Importing torch there can take seconds: RGT_AUDIT_TORCH=0 leaves it to the job's own record.
    probe = [] if os.environ.get("RGT_AUDIT_TORCH", "1").strip() in ("1", "") else ["--no-torch"]
    result = transport.exec([python, f"{control}/agent.py", "audit", *probe, *dirs], timeout=300)
    if result.returncode != 0:
        raise LaunchError(
            f"the audit of {transport.host} failed with {python!r} (exit {result.returncode}): "
            f"{result.stderr.decode(errors='replace')[-800:]}\nThe job needs Python 3.8+ "
            "there: pass --python PATH (or set `python` in the profile)."
        )
    facts = json.loads(result.stdout)
    durable = facts["disks"][dirs[0]]
    if not durable.get("writable"):
        raise LaunchError(
            f"the durable dir {dirs[0]} on {transport.host} is not writable "
            f"({durable.get('error', 'the write probe failed')}): checkpoints could not be kept. "
            "Fix its permissions or point the profile's durable_dir elsewhere."
        )
    report = {
        "facts": facts,
        "at": time.time(),
        "host": transport.host,
        "findings": audit_findings(facts, dirs[0]),
    }
    atomic_write_bytes(cache, json.dumps(report, indent=1).encode())
    return report


def audit_findings(facts: dict[str, Any], durable: str) -> list[str]:
    """What a researcher should know about the machine, in plain words."""
    found: list[str] = []
    gib = 1 << 30
    for path, disk in facts["disks"].items():
        if "bytes_free" not in disk:
            continue
        if disk["bytes_free"] < 5 * gib:
            found.append(f"{path}: only {disk['bytes_free'] / gib:.1f} GiB free")
        if disk["inodes_total"] and disk["inodes_free"] < 0.05 * disk["inodes_total"]:
            found.append(f"{path}: inodes nearly exhausted ({disk['inodes_free']} free)")
    mem = facts["cgroup"].get("memory_max")
    if mem and mem.isdigit() and int(mem) < (1 << 60):
        found.append(f"cgroup memory limit {int(mem) / gib:.1f} GiB (size num_workers to it)")
    if facts["cgroup"].get("oom_kill"):
        found.append(f"the cgroup has already had {facts['cgroup']['oom_kill']} OOM kill(s)")
    if facts.get("nvidia_smi") is None:
        found.append("no NVIDIA GPU visible (nvidia-smi is absent)")
    torch = facts.get("torch")
    if not facts.get("torch_installed"):
        found.append(f"torch is not installed for {facts['executable']}")
    elif torch is not None and not torch.get("imports"):
        found.append(f"torch does not import with {facts['executable']}: {torch.get('error')}")
    elif torch is not None and facts.get("nvidia_smi") is not None and not torch["cuda_available"]:
        found.append(
            f"torch {torch['version']} does not see CUDA although nvidia-smi sees a GPU "
            "(a CPU-only torch build, or a driver/CUDA mismatch)"
        )
    elif torch is not None:
        found.append(
            f"torch {torch['version']}, "
            + (
                f"CUDA {torch['cuda_version']}, {torch['device_count']} GPU(s)"
                if torch["cuda_available"]
                else "no CUDA"
            )
        )
    free = facts["disks"][durable].get("bytes_free")
    if free is not None:
        found.append(f"durable dir: {free / gib:.1f} GiB free")
    return found


def _write_locally(
    root: str, files: dict[str, bytes], pushed: list[tuple[Path, str]], secrets: dict[str, str]
) -> None:
    """Lay out a job's files under ``root`` on this machine (the smoke run's control dir)."""
    from .fsutil import atomic_write_bytes

    for name, data in files.items():
        atomic_write_bytes(f"{root}/{name}", data, member_mode(name))
    for local, rel in pushed:
        dest = Path(root, "code", rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, dest)
    if secrets:
        atomic_write_bytes(f"{root}/secrets.json", json.dumps(secrets).encode(), 0o600)


def run_smoke(
    req: LaunchRequest,
    files: dict[str, bytes],
    pushed: list[tuple[Path, str]],
    env: dict[str, str],
    secrets: dict[str, str],
) -> None:
    """Run the program on this machine with ``RGT_SMOKE=1`` under a time budget.

    Raises :class:`SmokeFailed` (with the traceback, in the cell's line numbers) when it fails.
    """
    with tempfile.TemporaryDirectory(prefix="rgt-smoke-") as tmp:
        paths = job_paths(tmp, req.program_name)
        _write_locally(tmp, files, pushed, secrets)
        run_env = dict(os.environ)
        run_env.update(env)
        for name in secrets:
            run_env.pop(name, None)
        run_env["RGT_SECRETS_FILE"] = f"{tmp}/secrets.json"
        run_env.update(
            {
                "RGT_SMOKE": "1",
                "RGT_JOB_ID": "smoke",
                "RGT_OUT": f"{tmp}/out",
                "RGT_CKPT_DIR": f"{tmp}/ckpt",
                "RGT_CONTROL_DIR": tmp,
                "RGT_INPUTS_DIR": paths["inputs_dir"],
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": paths["lib_dir"],
            }
        )
        run_env.pop("RGT_RESUME", None)
        argv = [sys.executable, str(_HERE / "agent.py"), "cell", paths["program"]]
        try:
            proc = subprocess.run(
                argv,
                cwd=paths["code_dir"],
                env=run_env,
                capture_output=True,
                timeout=req.smoke_timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise SmokeFailed(
                f"the smoke run exceeded its {req.smoke_timeout:g} s budget, so the launch was "
                "blocked",
                [
                    "Make the cell take a short path when rgt_jupyter.job.is_smoke() (RGT_SMOKE=1): "
                    "tiny shapes, one or two steps.",
                    "Or: --smoke-timeout S, or --no-smoke.",
                ],
            ) from exc
        if proc.returncode != 0:
            error_path = Path(tmp) / "error.json"
            if error_path.exists():
                error = json.loads(error_path.read_text())
                lines = traceback_lines(
                    error, paths["program"], req.line_offset, req.label, "smoke", "this machine"
                )
            else:
                lines = proc.stdout.decode(errors="replace").splitlines()[-30:]
            raise SmokeFailed(
                f"the CPU smoke run failed (exit {proc.returncode}); nothing was launched",
                [*lines, "(--no-smoke skips the smoke run)"],
            )


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
class _Target:
    """Where a launch goes: the profile, the transport and the registry, resolved once."""

    profile: Profile
    project: Path
    host_alias: str | None
    python: str
    transport: Transport
    registry: Registry
    home: str


@dataclass
class _Prepared:
    """One job, ready to submit: its spec and the bundle files that carry it."""

    spec: dict[str, Any]
    files: dict[str, bytes]
    secrets: dict[str, str]
    durability_ok: bool


def _target(req: LaunchRequest, project: Path) -> _Target:
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
    return _Target(profile, project, host_alias, python, transport, Registry(project), "")


def _prepare(
    req: LaunchRequest,
    tgt: _Target,
    *,
    control: str | None = None,
    smoke: bool | None = None,
    extra_spec: dict[str, Any] | None = None,
) -> _Prepared:
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
    lineage = previous["lineage"] if resume and previous else f"{_stamp()}-{secrets.token_hex(3)}"
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
    job_id = f"{name}-{_stamp()}-{secrets.token_hex(2)}"
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
    return _Prepared(spec, staged.files, secret_values, durability.ok)


def _register(tgt: _Target, prepared: _Prepared) -> None:
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


def _submit(
    tgt: _Target, members: list[_Prepared], bundle: bytes, control: str
) -> list[dict[str, Any]]:
    """Register the jobs, send the bundle and start them in one command; return their rows."""
    for prepared in members:
        _register(tgt, prepared)
    launcher = get_launcher(tgt.profile.launcher)
    ids = [p.spec["job_id"] for p in members]
    try:
        record = launcher.submit(tgt.transport, tgt.python, control, bundle)
    except Exception as exc:
        for job_id in ids:
            tgt.registry.set_state(job_id, "failed", reason=str(exc))
        raise
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
    rows[0]["notices"] = first_contact_notices(tgt.registry, tgt.profile)
    return rows


def _bundle_one(tgt: _Target, prepared: _Prepared, req: LaunchRequest) -> bytes:
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
        raise UsageError("a launch with --seeds gives several jobs: use launch_seeds()")
    tgt = _target(req, project)
    extra = _scheduler_spec(tgt.profile, req)
    prepared = _prepare(req, tgt, extra_spec=extra)
    bundle = _bundle_one(tgt, prepared, req)
    return _submit(tgt, [prepared], bundle, prepared.spec["control_dir"])[0]


def launch_seeds(req: LaunchRequest, project: Path) -> list[dict[str, Any]]:
    """One job per seed of ``req.seeds``, named ``<name>-s<seed>``, each with ``RGT_SEED``, grouped
    (``spec["group"]``) so pull and verify treat them as one experiment. The members' specs are
    checked to differ only in the seed. On Slurm they are one job array (one ``sbatch``); the
    smoke runs once, for the first seed."""
    if not req.seeds:
        return [launch(req, project)]
    tgt = _target(req, project)
    base = check_job_name(req.name if req.name is not None else default_name(req.program))
    check_job_name(f"{base}-s{max(req.seeds)}")
    group = {"id": f"{base}-{_stamp()}-{secrets.token_hex(2)}", "name": base, "seeds": req.seeds}
    array = tgt.profile.launcher == "sbatch"
    tgt.home = tgt.transport.home()
    group_dir = f"{tgt.profile.expand(tgt.profile.workdir, project, tgt.home)}/{group['id']}"
    members: list[_Prepared] = []
    for i, seed in enumerate(req.seeds):
        member = replace(req, name=f"{base}-s{seed}", env={**req.env, "RGT_SEED": str(seed)})
        member.seeds = []
        extra = {**_scheduler_spec(tgt.profile, req), "group": {**group, "seed": seed}}
        if array:
            extra["array_task"] = seed
        control = f"{group_dir}/{seed}" if array else None
        members.append(_prepare(member, tgt, control=control, smoke=i == 0, extra_spec=extra))
    differences = group_differences([m.spec for m in members])
    if differences:
        raise LaunchError(
            "the members of seed group "
            f"{base!r} differ in more than the seed ({', '.join(differences)}); nothing was "
            "launched. Re-run with --fresh to start every member over."
        )
    if not array:
        rows = []
        for prepared in members:
            bundle = ship(prepared.files, prepared.spec, prepared.secrets)
            rows += _submit(tgt, [prepared], bundle, prepared.spec["control_dir"])
        return rows
    files: dict[str, bytes] = {
        "job.sbatch": slurm_script(tgt.profile, req, base, tuple(req.seeds)).encode()
    }
    for prepared in members:
        for rel, data in bundle_members(prepared.files, prepared.spec, prepared.secrets).items():
            files[f"{prepared.spec['array_task']}/{rel}"] = data
    return _submit(tgt, members, zip_bundle(files), group_dir)


#: What the members of a seed group must share: everything that decides the result but the seed.
_GROUP_SAME = (
    "profile",
    "host",
    "python",
    "code_hash",
    "deployed",
    "pushed",
    "inputs",
    "grace_s",
    "ckpt_root",
    "slurm",
    "requeue",
    "distributed",
    "secret_names",
)


def group_differences(specs: list[dict[str, Any]]) -> list[str]:
    """The fields (besides the seed) in which the members of a group differ."""
    first = specs[0]
    out = []
    for key in _GROUP_SAME:
        if any(s.get(key) != first.get(key) for s in specs[1:]):
            out.append(key)
    env0 = {k: v for k, v in first.get("env", {}).items() if k != "RGT_SEED"}
    for s in specs[1:]:
        if {k: v for k, v in s.get("env", {}).items() if k != "RGT_SEED"} != env0:
            out.append("env")
            break
    return out


def _scheduler_spec(profile: Profile, req: LaunchRequest) -> dict[str, Any]:
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
    extra: dict[str, Any] = {"requeue": opts.requeue, "slurm": dataclasses.asdict(opts)}
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
