"""The phase-0 audit of a host: disks, cgroup, GPU, interpreter, in one command, cached."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from ..errors import LaunchError
from ..machines.profiles import Profile
from ..store.fsutil import atomic_write_bytes
from ..transport import Transport


def audit_cache(
    profile: Profile, transport: Transport, project: Path, ckpt_root: str | None = None
) -> Path:
    """Where the audit of the profile's host is kept (one per checkpoint root given with
    ``--ckpt-dir``: its disk is the one the checkpoints fill)."""
    extra = f"-ckpt-{hashlib.sha256(ckpt_root.encode()).hexdigest()[:10]}" if ckpt_root else ""
    return project / ".rgt" / "audit" / f"{profile.name}-{transport.host}{extra}.json"


def resolved_python(report: dict[str, Any]) -> str | None:
    """The interpreter the audit found the profile's ``python`` to be (its ``sys.executable``),
    for rgt's own short commands there: a name that is a shim (pyenv's, asdf's) starts a shell
    script before Python on each call. None where the audit did not run (a local backend)."""
    executable = (report.get("facts") or {}).get("executable")
    return executable if isinstance(executable, str) and executable.startswith("/") else None


def audit_host(
    transport: Transport,
    python: str,
    control: str,
    profile: Profile,
    project: Path,
    home: str,
    ckpt_root: str | None = None,
) -> dict[str, Any]:
    """Phase-0 audit, once per host and project (cached in ``.rgt/audit/``), in one command
    (``<control>/agent.py`` must be in place unless it is cached). The disk facts are those of
    the dir the checkpoints go to: ``ckpt_root`` (``--ckpt-dir``) when given, else the
    profile's durable dir.

    Findings are disclosed, not blocking, except a durable dir that cannot be written.
    """

    cache = audit_cache(profile, transport, project, ckpt_root)
    if cache.exists():
        report: dict[str, Any] = json.loads(cache.read_text())
        return report
    durable_dir = ckpt_root or profile.expand(profile.durable_dir, project, home)
    dirs = [durable_dir] + [
        profile.expand(d, project, home) for d in (profile.scratch_dir, profile.workdir)
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
        "findings": audit_findings(facts, dirs[0], "checkpoint dir" if ckpt_root else ""),
    }
    atomic_write_bytes(cache, json.dumps(report, indent=1).encode())
    return report


def audit_findings(facts: dict[str, Any], durable: str, label: str = "") -> list[str]:
    """What a researcher should know about the machine, in plain words."""
    found: list[str] = []
    gib = 1 << 30
    for path, disk in facts["disks"].items():
        if "bytes_free" not in disk:
            continue
        if disk["bytes_free"] < 5 * gib:
            found.append(f"{path}: only {_size(disk['bytes_free'])} free")
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
        where = f"{label} {durable}" if label else "durable dir"
        found.append(f"{where}: {_size(free)} free")
    return found


def _size(nbytes: int) -> str:
    """Bytes as a person reads them: GiB, MiB or KiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}"
    return f"{nbytes} bytes"
