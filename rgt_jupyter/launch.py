"""Prepare, ship and start a job: smoke, versioned code dir, launch bundle, registry, launcher."""

from __future__ import annotations

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
        **fields,
    )


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
    return 0o600 if name.startswith("inputs/") or name == "secrets.json" else 0o644


def ship(files: dict[str, bytes], spec: dict[str, Any], secret_values: dict[str, str]) -> bytes:
    """The launch bundle: one zip (members stored, named relative to the control dir) with the
    unpacking ``__main__.py``, ``agent.py``, ``files``, ``launch.json`` (``spec``) and, when there
    are secrets, ``secrets.json``. It travels as the stdin of the one launch command, so the
    secrets never show in a command line, an environment or a log."""
    members = {
        "__main__.py": (_HERE / "bundle_main.py").read_bytes(),
        "agent.py": (_HERE / "agent.py").read_bytes(),
        **files,
        "launch.json": json.dumps(spec, indent=1).encode(),
    }
    if secret_values:
        members["secrets.json"] = json.dumps(secret_values).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | member_mode(name)) << 16
            zf.writestr(info, data)
    return buf.getvalue()


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


def launch(req: LaunchRequest, project: Path) -> dict[str, Any]:
    """Launch (or resume) a job; return its registry row. Nothing is created before every check
    (name, profile, flags, paths, smoke) has passed.

    Without ``--push`` (and once the host's audit is cached) the remote sees one command: the
    launch bundle on its stdin, the agent started detached, no wait for the remote Python.
    """
    profile: Profile = load_profile(req.profile, project)
    if profile.launcher not in ("detached", "tmux") or profile.transport not in ("local", "ssh"):
        raise UsageError(
            f"profile {profile.name!r} launches through {profile.launcher!r} on "
            f"{profile.transport!r}, which this version cannot drive yet; its platform facts "
            f"still apply (`rgt profiles show {profile.name}`)"
        )
    name = check_job_name(req.name if req.name is not None else default_name(req.program))
    host_alias = req.host or profile.host or None
    if profile.transport == "local":
        if host_alias not in (None, "localhost", "127.0.0.1"):
            raise UsageError(
                f"--host {host_alias!r}: profile {profile.name!r} runs on this machine; "
                "use an ssh profile (--profile ssh) to run elsewhere"
            )
        host_alias = None
    env = {**req.env, **_gpus_env(req.gpus)}
    reuse = req.reuse_code_of
    python = _check_python(req.python or profile.interpreter())
    pushed = _push_entries(req.push) if reuse is None else []
    inputs = _serialize_inputs(req.inputs) if reuse is None else {}
    secret_values = read_secrets(req.secrets)
    registry = Registry(project)
    transport = get_transport(profile.transport, host_alias, project)

    previous = _previous(registry, transport, name)
    resume = (
        previous is not None
        and previous["state"] in ("preempted", "failed", "lost")
        and not req.fresh
    )

    lineage = previous["lineage"] if resume and previous else f"{_stamp()}-{secrets.token_hex(3)}"
    home = transport.home()
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

    smoke = profile.smoke_default if req.smoke is None else req.smoke
    if smoke:
        files = job_files(req, inputs) if reuse is None else {}
        run_smoke(req, files, pushed, env, secret_values)

    attempt = previous["attempt"] + 1 if resume and previous else 1
    job_id = f"{name}-{_stamp()}-{secrets.token_hex(2)}"
    workdir = profile.expand(profile.workdir, project, home)
    control = f"{workdir}/{job_id}"
    if pushed or not audit_cache(profile, transport, project).exists():
        transport.put(_HERE / "agent.py", f"{control}/agent.py")  # for the audit, the push
    report = audit_host(transport, python, control, profile, project, home)
    staged = _stage(transport, req, control, python, f"{workdir}/.objects", pushed, inputs)
    hash_ = code_hash(staged.deployed)
    spec: dict[str, Any] = {
        "job_id": job_id,
        "name": name,
        "lineage": lineage,
        "attempt": attempt,
        "profile": profile.name,
        "host": transport.host,
        "host_alias": host_alias,
        "transport": profile.transport,
        "launcher": profile.launcher,
        "project": str(project),
        "control_dir": control,
        "out_dir": f"{durable}/out",
        "ckpt_dir": ckpt_dir,
        "ckpt_root": ckpt_root,
        "durability": durability.record(),
        "instance_id": instance_for(registry, profile.name, host_alias),
        "python": python,
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
        "smoke": smoke,
        "created_at": time.time(),
        "previous_job": previous["id"] if previous else None,
        "code_changed": bool(resume and previous and previous["spec"].get("code_hash") != hash_),
        **staged.paths,
    }
    bundle = ship(staged.files, spec, secret_values)
    registry.add_job(job_id, name, lineage, attempt, profile.name, transport.host, spec)
    if not durability.ok:
        registry.event(job_id, "durability_overridden", **durability.record())
    launcher = get_launcher(profile.launcher)
    try:
        record = launcher.submit(transport, python, control, bundle)
    except Exception as exc:
        registry.set_state(job_id, "failed", reason=str(exc))
        raise
    registry.update_spec(job_id, launched_at=time.time(), **record)
    registry.event(
        job_id,
        "launched",
        resume=resume,
        attempt=attempt,
        launch_line=launcher.launch_line(python, control),
        **record,
    )
    row = registry.get(job_id)
    row["notices"] = first_contact_notices(registry, profile)
    return row


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
