"""Prepare, ship and start a job: smoke, versioned code dir, agent, registry, launcher."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .agent import sha256_file
from .errors import JobNotFound, LaunchError, SmokeFailed, UsageError
from .launcher import get_launcher
from .names import check_env_key, check_identifier, check_job_name
from .profiles import Profile, load_profile
from .registry import Registry
from .render import traceback_lines
from .status import observe
from .transport import Transport, get_transport

CELL_PROGRAM = "rgt_cell.py"
_HERE = Path(__file__).resolve().parent  # job.py and agent.py are shipped from here
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


def ship(
    transport: Transport,
    control: str,
    req: LaunchRequest,
    pushed: list[tuple[Path, str]],
    inputs: dict[str, bytes],
    python: str,
    objects: str,
) -> tuple[dict[str, str], dict[str, str]]:
    """Write the agent, program, pushed files (via the object store ``objects``), inputs and the
    job API under ``control``.

    Returns the paths and, for every file sent, its sha256 (``code/...``, ``lib/...``,
    ``inputs/...``): what the remote must hold for the launch to go ahead.
    """
    code, lib, inputs_dir = f"{control}/code", f"{control}/lib", f"{control}/inputs"
    sent: dict[str, str] = {}

    def write(prefix: str, rel: str, data: bytes, mode: int = 0o644) -> None:
        transport.write_bytes(f"{control}/{prefix}/{rel}", data, mode=mode)
        sent[f"{prefix}/{rel}"] = hashlib.sha256(data).hexdigest()

    def put(prefix: str, rel: str, local: Path) -> None:
        transport.put(local, f"{control}/{prefix}/{rel}")
        sent[f"{prefix}/{rel}"] = sha256_file(str(local))[0]

    transport.makedirs(code)
    transport.makedirs(inputs_dir)
    transport.put(_HERE / "agent.py", f"{control}/agent.py")
    write("code", req.program_name, req.program.encode())
    for rel, sha in push_files(transport, python, control, objects, pushed).items():
        sent[f"code/{rel}"] = sha
    for fname, data in inputs.items():
        write("inputs", fname, data, mode=0o600)
    write("lib", "rgt_jupyter/__init__.py", _LIB_INIT.encode())
    put("lib", "rgt_jupyter/job.py", _HERE / "job.py")
    paths = {
        "code_dir": code,
        "lib_dir": lib,
        "inputs_dir": inputs_dir,
        "program": f"{code}/{req.program_name}",
    }
    return paths, sent


def verify_deployed(
    transport: Transport,
    python: str,
    control: str,
    paths: dict[str, str],
    expected: dict[str, str],
) -> None:
    """Hash what is on the remote (one command through the agent) and compare it with what was
    sent: deployed must equal intended, or nothing is launched."""
    argv = [
        python,
        f"{control}/agent.py",
        "manifest",
        f"code={paths['code_dir']}",
        f"lib={paths['lib_dir']}",
        f"inputs={paths['inputs_dir']}",
    ]
    result = transport.exec(argv, timeout=600)
    if result.returncode != 0:
        raise LaunchError(
            f"could not run the agent with {python!r} on {transport.host} (exit "
            f"{result.returncode}): {result.stderr.decode(errors='replace')[-1000:]}\n"
            "The job needs Python 3.8+ there: pass --python PATH (or set `python` in the profile)."
        )
    found = {k: v["sha256"] for k, v in json.loads(result.stdout)["files"].items()}
    bad = sorted(k for k, sha in expected.items() if found.get(k) != sha)
    if bad:
        raise LaunchError(
            f"NOT DEPLOYED: {len(bad)} file(s) on {transport.host} differ from what was sent "
            f"({', '.join(bad[:5])}); nothing was launched. Launch again to re-send them."
        )


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


def send_secrets(transport: Transport, python: str, control: str, values: dict[str, str]) -> None:
    """Store secrets in ``<control>/secrets.json`` (0600) through the agent's stdin."""
    if not values:
        return
    argv = [python, f"{control}/agent.py", "secrets", f"{control}/secrets.json"]
    result = transport.exec(argv, stdin=json.dumps(values).encode(), timeout=60)
    if result.returncode != 0:
        raise LaunchError(
            f"could not store the secrets on {transport.host} (exit "
            f"{result.returncode}); nothing was launched"
        )


def audit_host(
    transport: Transport, python: str, control: str, profile: Profile, project: Path, home: str
) -> dict[str, Any]:
    """Phase-0 audit, once per host and project (cached in ``.rgt/audit/``), in one command.

    Findings are disclosed, not blocking, except a durable dir that cannot be written.
    """
    from .fsutil import atomic_write_bytes

    cache = project / ".rgt" / "audit" / f"{profile.name}-{transport.host}.json"
    if cache.exists():
        report: dict[str, Any] = json.loads(cache.read_text())
        return report
    dirs = [
        profile.expand(d, project, home)
        for d in (profile.durable_dir, profile.scratch_dir, profile.workdir)
    ]
    result = transport.exec([python, f"{control}/agent.py", "audit", *dirs], timeout=300)
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
    if not facts.get("torch_installed"):
        found.append(f"torch is not installed for {facts['executable']}")
    free = facts["disks"][durable].get("bytes_free")
    if free is not None:
        found.append(f"durable dir: {free / gib:.1f} GiB free")
    return found


def run_smoke(
    req: LaunchRequest,
    pushed: list[tuple[Path, str]],
    inputs: dict[str, bytes],
    env: dict[str, str],
    secrets: dict[str, str],
) -> None:
    """Run the program on this machine with ``RGT_SMOKE=1`` under a time budget.

    Raises :class:`SmokeFailed` (with the traceback, in the cell's line numbers) when it fails.
    """
    from .transport.local import LocalTransport

    with tempfile.TemporaryDirectory(prefix="rgt-smoke-") as tmp:
        paths, _ = ship(
            LocalTransport(), tmp, req, pushed, inputs, sys.executable, f"{tmp}/.objects"
        )
        send_secrets(LocalTransport(), sys.executable, tmp, secrets)
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
        argv = [sys.executable, f"{tmp}/agent.py", "cell", paths["program"]]
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


def launch(req: LaunchRequest, project: Path) -> dict[str, Any]:
    """Launch (or resume) a job; return its registry row. Nothing is created before every check
    (name, profile, flags, paths, smoke) has passed."""
    profile: Profile = load_profile(req.profile, project)
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
    pushed = _push_entries(req.push) if reuse is None else []
    inputs = _serialize_inputs(req.inputs) if reuse is None else {}
    secret_values = read_secrets(req.secrets)
    registry = Registry(project)
    transport = get_transport(profile.transport, host_alias, project)

    previous: dict[str, Any] | None
    try:
        previous = registry.get(name)
    except JobNotFound:
        previous = None
    resume = False
    if previous is not None:
        prev_state = observe(transport, previous["spec"]).state
        registry.set_state(previous["id"], prev_state)
        if prev_state in ("queued", "running"):
            raise UsageError(
                f"job {name!r} is still {prev_state} ({previous['id']}): `%watch {name}` to follow "
                "it, or pick another --name"
            )
        resume = prev_state in ("preempted", "failed", "lost") and not req.fresh

    smoke = profile.smoke_default if req.smoke is None else req.smoke
    if smoke:
        run_smoke(req, pushed, inputs, env, secret_values)

    project_str = str(project)
    lineage = previous["lineage"] if resume and previous else f"{_stamp()}-{secrets.token_hex(3)}"
    attempt = previous["attempt"] + 1 if resume and previous else 1
    job_id = f"{name}-{_stamp()}-{secrets.token_hex(2)}"
    home = transport.home()
    control = f"{profile.expand(profile.workdir, project, home)}/{job_id}"
    durable = f"{profile.expand(profile.durable_dir, project, home)}/{name}/{lineage}"
    python = req.python or profile.interpreter()
    if reuse is None:
        objects = f"{profile.expand(profile.workdir, project, home)}/.objects"
        paths, deployed = ship(transport, control, req, pushed, inputs, python, objects)
        pushed_names, input_names = [rel for _, rel in pushed], sorted(req.inputs)
    else:
        deployed, pushed_names, input_names = reuse["deployed"], reuse["pushed"], reuse["inputs"]
        paths = {k: reuse[k] for k in ("code_dir", "lib_dir", "inputs_dir", "program")}
        transport.put(_HERE / "agent.py", f"{control}/agent.py")
    report = audit_host(transport, python, control, profile, project, home)
    verify_deployed(transport, python, control, paths, deployed)
    send_secrets(transport, python, control, secret_values)
    hash_ = code_hash(deployed)
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
        "project": project_str,
        "control_dir": control,
        "out_dir": f"{durable}/out",
        "ckpt_dir": f"{durable}/ckpt",
        "python": python,
        "cwd": paths["code_dir"],
        "env": env,
        "resume": resume,
        "grace_s": req.grace_s if req.grace_s is not None else profile.grace_s,
        "heartbeat_s": profile.heartbeat_s,
        "line_offset": req.line_offset,
        "label": req.label,
        "code_hash": hash_,
        "deployed": deployed,
        "secret_names": sorted(secret_values),
        "audit": {
            "findings": report["findings"],
            "python": report["facts"]["python"],
            "at": report["at"],
        },
        "pushed": pushed_names,
        "inputs": input_names,
        "smoke": smoke,
        "created_at": time.time(),
        "previous_job": previous["id"] if previous else None,
        "code_changed": bool(resume and previous and previous["spec"].get("code_hash") != hash_),
        **paths,
    }
    transport.write_bytes(f"{control}/launch.json", json.dumps(spec, indent=1).encode())
    registry.add_job(job_id, name, lineage, attempt, profile.name, transport.host, spec)
    launcher = get_launcher(profile.launcher)
    try:
        record = launcher.submit(transport, python, control)
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
    return registry.get(job_id)
