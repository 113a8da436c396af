"""What a launch sends: the notebook variables of ``--inputs`` serialized, the files under the
``--push`` paths listed, the values of ``--secret`` read, the ``--gpus`` devices, and the job's
files staged with their hashes (pushed files go ahead through the host's object store)."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..jobs.bundle import job_files, job_paths, push_files
from ..jobs.request import CELL_PROGRAM, LaunchRequest
from ..store.names import check_env_key, check_identifier
from ..transport import Transport

_GPUS_RE = re.compile(r"all|none|\d+(,\d+)*")


def serialize_inputs(inputs: dict[str, Any]) -> dict[str, bytes]:
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


def push_entries(paths: list[str]) -> list[tuple[Path, str]]:
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


def gpus_env(gpus: str | None) -> dict[str, str]:
    """``CUDA_VISIBLE_DEVICES`` for ``--gpus`` on a machine the job has to itself."""
    if gpus is None or gpus == "all":
        return {}
    if not _GPUS_RE.fullmatch(gpus):
        raise UsageError(f"--gpus {gpus!r}: use device indices like 0 or 0,1, or 'all' / 'none'")
    return {"CUDA_VISIBLE_DEVICES": "" if gpus == "none" else gpus}


@dataclass
class Staged:
    """What a launch sends: the files of the bundle, where they go, and their hashes."""

    files: dict[str, bytes]
    paths: dict[str, str]
    deployed: dict[str, str]
    pushed: list[str]
    inputs: list[str]


def stage(
    transport: Transport,
    req: LaunchRequest,
    control: str,
    python: str,
    objects: str,
    pushed: list[tuple[Path, str]],
    inputs: dict[str, bytes],
    resolved: str | None = None,
) -> Staged:
    """The job's files, paths and ``deployed`` hashes; ``--push`` files go ahead through the
    object store (their commands run with ``resolved``, the audit's interpreter, where known).
    A resume that reuses another job's code sends none of it again."""
    reuse = req.reuse_code_of
    if reuse is not None:
        paths = {
            "code_dir": reuse.code_dir,
            "lib_dir": reuse.lib_dir,
            "inputs_dir": reuse.inputs_dir,
            "program": reuse.program,
        }
        return Staged({}, paths, dict(reuse.deployed), list(reuse.pushed), list(reuse.inputs))
    files = job_files(req, inputs)
    deployed = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    for rel, sha in push_files(transport, python, control, objects, pushed, resolved).items():
        deployed[f"code/{rel}"] = sha
    paths = job_paths(control, req.program_name)
    names = sorted(fname.rsplit(".", 1)[0] for fname in inputs)  # name.json, name.pkl
    return Staged(files, paths, deployed, [rel for _, rel in pushed], names)
