"""The copy of a job's code kept in the project at launch: its program, its pushed files and its
serialized inputs, by the code hash they make, so that a resume on a *new* machine (the first
one gone with its disk) sends exactly the code the job ran, byte for byte, whatever changed in
the notebook or the pushed folders since.

``<project>/.rgt/code/<code hash>/`` holds ``code/`` (the program and each pushed file, as
they land in the job's code dir) and ``inputs/`` (private). It is written into a temporary
folder and renamed whole; a copy is read back only when every file matches the hash the job
recorded for it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from .fsutil import fsync_dir, sha256_file


@dataclass
class KeptCode:
    """A job's code as kept: where it is, the program's name, the pushed files (path in the
    copy, path in the job's code dir) and the inputs' bytes by file name."""

    root: Path
    program_name: str
    program: str
    pushed: list[tuple[Path, str]]
    inputs: dict[str, bytes]


def code_copy_dir(project: Path, code_hash: str) -> Path:
    """Where the code of hash ``code_hash`` is kept."""
    return project / ".rgt" / "code" / code_hash


def keep_code(
    project: Path,
    code_hash: str,
    files: dict[str, bytes],
    pushed: list[tuple[Path, str]],
) -> Path:
    """Keep a launch's code: ``files`` (its ``code/`` and ``inputs/`` members) and the
    ``pushed`` files (local path, path under ``code/``). A copy of the same hash is kept once."""
    dest = code_copy_dir(project, code_hash)
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{code_hash[:12]}-", dir=dest.parent))
    try:
        for name, data in files.items():
            if name.split("/", 1)[0] not in ("code", "inputs"):
                continue
            path = tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            if name.startswith("inputs/"):
                path.chmod(0o600)
        for local, rel in pushed:
            path = tmp / "code" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(local, path)
        for dirpath, _dirs, names in os.walk(tmp):
            for fname in names:
                with open(os.path.join(dirpath, fname), "rb") as fh:
                    os.fsync(fh.fileno())
        os.rename(tmp, dest)
        fsync_dir(dest.parent)
    except FileExistsError:
        shutil.rmtree(tmp, ignore_errors=True)  # another launch kept the same code first
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def kept_code(project: Path, code_hash: str, program: str, deployed: dict[str, str]) -> KeptCode:
    """The kept code of a job (its ``code_hash``, its program's path and its ``deployed``
    hashes), each file checked against the hash the job recorded; refused, saying what
    differs, when the copy is missing or changed."""
    root = code_copy_dir(project, code_hash)
    if not root.is_dir():
        raise UsageError(
            f"no copy of this job's code is kept in {root.parent} (it is kept at the launch of "
            "jobs on rented machines): re-run its cell (or `rgt run`) to launch it afresh"
        )
    wanted = {k: v for k, v in deployed.items() if k.split("/", 1)[0] in ("code", "inputs")}
    for name, sha in sorted(wanted.items()):
        path = root / name
        if not path.is_file() or sha256_file(path)[0] != sha:
            raise UsageError(
                f"the kept copy of this job's code differs from what it ran ({name}): "
                f"re-run its cell to launch it afresh (the copy is {root})"
            )
    program_name = program.rsplit("/", 1)[-1]
    program_rel = f"code/{program_name}"
    pushed = sorted(
        (root / name, name[len("code/") :])
        for name in wanted
        if name.startswith("code/") and name != program_rel
    )
    inputs = {
        name[len("inputs/") :]: (root / name).read_bytes()
        for name in wanted
        if name.startswith("inputs/")
    }
    text = (root / program_rel).read_bytes()
    if hashlib.sha256(text).hexdigest() != wanted.get(program_rel):
        raise UsageError(f"the kept copy in {root} lacks the job's program {program_name}")
    return KeptCode(root, program_name, text.decode(), pushed, inputs)
