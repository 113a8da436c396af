"""The launch bundle's ``__main__.py``: unpack the bundle into the job's control dir, then hand
over to the agent. Stdlib only; Python 3.8+ (older Pythons get a clear failure record).

Run as ``python -u bundle.zip run CONTROL_DIR`` (or ``spawn CONTROL_DIR``; ``unpack CONTROL_DIR``
only unpacks, for a scheduler that starts the agent later). Every member but this
one is written under CONTROL_DIR: ``secrets.json`` and the members stored as private (the inputs)
are created 0600, the others 0644. Names that are absolute, hold ``..`` or resolve outside
CONTROL_DIR are refused. Every member is read (CRC-checked) before anything is written, so a
damaged bundle unpacks nothing: it ends the job ``failed`` with a ``NOT DEPLOYED`` record. The
bundle is deleted once read (it may hold secrets); then ``agent.py CMD CONTROL_DIR`` runs in this
process with ``__file__`` set to the unpacked agent.
"""

import json
import os
import runpy
import sys
import time
import zipfile
import zlib
from typing import Any, Dict, List, Tuple

DAMAGED = "NOT DEPLOYED: the launch bundle arrived damaged"
PRIVATE = ("secrets.json",)


class NotDeployed(Exception):
    """The bundle cannot be unpacked as sent; the message says what to do."""


def write_json_atomic(path: str, obj: Any) -> None:
    """The agent's JSON record format and write: temporary file, fsync, rename, fsync of the
    directory (the agent's own copy of this; a test holds the two to the same behaviour)."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, ".%s.tmp-%d" % (os.path.basename(path), os.getpid()))
    with open(tmp, "w") as fh:
        fh.write(json.dumps(obj, indent=1, sort_keys=True, default=str))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def not_deployed_records(message: str, now: float) -> Dict[str, Dict[str, Any]]:
    """``error.json`` and ``exit.json`` of a job that was not started (the agent's format), by
    file name."""
    return {
        "error.json": {
            "type": "NotDeployed",
            "kind": "not_deployed",
            "message": message,
            "program": None,
            "frames": [],
            "formatted": message + "\n",
        },
        "exit.json": {
            "exit_code": None,
            "signal": None,
            "state": "failed",
            "agent_signals": [],
            "started_at": now,
            "ended_at": now,
        },
    }


def record_not_deployed(control: str, message: str) -> None:
    """Write the records of a job that was not started into its control dir."""
    for name, record in not_deployed_records(message, time.time()).items():
        write_json_atomic(os.path.join(control, name), record)


def target_path(control: str, name: str) -> str:
    """Where member ``name`` goes under ``control``; NotDeployed for an unsafe name."""
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise NotDeployed("%s: it holds an unsafe path %r" % (DAMAGED, name))
    target = os.path.join(control, *parts)
    root = os.path.realpath(control)
    parent = os.path.realpath(os.path.dirname(target))
    if parent != root and not parent.startswith(root + os.sep):
        raise NotDeployed("%s: %r resolves outside the control dir" % (DAMAGED, name))
    return target


def read_members(bundle: str) -> List[Tuple[str, bytes, int]]:
    """(name, data, mode) of every member but this one, each checked against its CRC."""
    members = []
    try:
        with zipfile.ZipFile(bundle) as zf:
            for info in zf.infolist():
                if info.filename == "__main__.py" or info.is_dir():
                    continue
                shared = (info.external_attr >> 16) & 0o044
                private = info.filename in PRIVATE or not shared
                members.append((info.filename, zf.read(info), 0o600 if private else 0o644))
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, NotImplementedError) as exc:
        raise NotDeployed(
            "%s (%s); nothing was run. Launch again to re-send it." % (DAMAGED, exc)
        ) from exc
    return members


def write_member(control: str, name: str, data: bytes, mode: int) -> None:
    """Write one member atomically, created with ``mode``."""
    target = target_path(control, name)
    directory = os.path.dirname(target)
    os.makedirs(directory, exist_ok=True)
    target = target_path(control, name)  # again: the dirs now exist and resolve for real
    tmp = os.path.join(directory, ".%s.tmp-%d" % (os.path.basename(target), os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, target)


def unpack(bundle: str, control: str) -> None:
    """Write every member under ``control``; nothing is written unless all of it is intact."""
    members = read_members(bundle)
    written: List[str] = []
    try:
        for name, _data, _mode in members:
            target_path(control, name)
        for name, data, mode in members:
            write_member(control, name, data, mode)
            written.append(name)
    except OSError as exc:
        if "secrets.json" in written:
            os.unlink(os.path.join(control, "secrets.json"))
        raise NotDeployed(
            "NOT DEPLOYED: the launch bundle could not be unpacked into %s (%s); nothing was "
            "run. Free space or fix permissions there, then launch again." % (control, exc)
        ) from exc


def fail(control: str, cmd: str, message: str) -> int:
    """Record the failure for the watcher; ``spawn`` also says it on stderr (the launcher's)."""
    try:
        record_not_deployed(control, message)
    except OSError as exc:
        sys.stderr.write("rgt: could not record the failure in %s: %s\n" % (control, exc))
    sys.stderr.write("rgt: %s\n" % message)
    return 0 if cmd == "run" else 1


def main(argv: List[str]) -> int:
    """``bundle.zip run|spawn CONTROL_DIR``: unpack, delete the bundle, run the agent."""
    if len(argv) != 3 or argv[1] not in ("run", "spawn", "unpack"):
        sys.stderr.write("usage: python bundle.zip run|spawn|unpack CONTROL_DIR\n")
        return 2
    bundle, cmd, control = os.path.abspath(argv[0]), argv[1], os.path.abspath(argv[2])
    try:
        if sys.version_info < (3, 8):
            raise NotDeployed(
                "NOT DEPLOYED: %s is Python %d.%d; the agent needs Python 3.8+. Launch again "
                "with --python PATH (or set `python` in the profile)."
                % (sys.executable, sys.version_info[0], sys.version_info[1])
            )
        unpack(bundle, control)
    except NotDeployed as exc:
        return fail(control, cmd, str(exc))
    finally:
        try:
            os.unlink(bundle)  # it may hold secrets
        except OSError:
            pass  # a read-only mount (a Kubernetes Secret): it goes with the Job
    if cmd == "unpack":
        return 0
    agent = os.path.join(control, "agent.py")
    sys.argv = [agent, cmd, control]
    sys.path[0] = control
    runpy.run_path(agent, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
