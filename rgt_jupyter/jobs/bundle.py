"""What a job is shipped as: its files, their hashes, and the launch bundle (one zip that travels
as the stdin of the launch command)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import stat
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import integrations, remote
from ..errors import LaunchError, TransportError
from ..remote import ship_argv
from ..remote.ship import HELLO
from ..store.hashcache import HashCache
from ..transport import Transport
from .request import LaunchRequest
from .spec import JobSpec

_LIB_INIT = '"""rgt_jupyter, as shipped beside a job: only the job-side API (rgt_jupyter.job)."""\n'


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
    resolved: str | None = None,
) -> dict[str, str]:
    """Push files content-addressed into ``<control>/code`` (a per-job dir: a live job's inputs
    never change): the agent copies there every object the remote store holds, in one command,
    and only the objects it lacks are sent, then placed. Returns ``{rel: sha256}``.

    ``resolved``: the interpreter the audit found ``python`` to be
    (:func:`rgt_jupyter.run.audit.resolved_python`). The push's own commands run with it, so a
    shim (pyenv's, asdf's: a shell script) is not started on each; where it is gone (an audit
    kept from an earlier machine), ``python`` runs them.

    Each object travels under a temporary name and gets its own (its sha256) only once whole,
    and the agent hashes each copy unless the object's stamp says it is unchanged since it was
    hashed and matched (:func:`rgt_jupyter.remote.agent.place`): a push cut short leaves nothing
    that a later launch would take for sent, and a damaged object is deleted and sent again."""
    if not pushed:
        return {}
    sent: list[str] = []
    try:
        return _push(transport, (resolved or python, python), control, objects, pushed, sent)
    except TransportError as exc:
        raise LaunchError(
            f"the push to {transport.host} was interrupted after {len(sent)} new file(s) "
            f"({exc}). Nothing was started. Files that arrived whole stay in {objects} and are "
            "not sent again; a file cut short there was never given its name and is not used. "
            "Launch again once the host answers."
        ) from exc


def _push(
    transport: Transport,
    pythons: tuple[str, str],
    control: str,
    objects: str,
    pushed: list[tuple[Path, str]],
    sent: list[str],
) -> dict[str, str]:
    """:func:`push_files` itself, ``pythons`` the resolved interpreter and the configured one;
    ``sent`` collects the objects sent so far."""
    store = f"{transport.host}:{objects}"
    with HashCache() as cache:  # an unchanged tree is not read again
        wanted = {rel: cache.sha256(local) for local, rel in pushed}
        held = cache.held(store, wanted.values())  # the store held them all last time
    agent = f"{control}/agent.py"
    python = pythons[0]

    def agent_json(*args: str, payload: Any) -> Any:
        nonlocal python
        stdin = json.dumps(payload).encode()
        # -S: the agent is stdlib only, and site's start (every .pth file) is not paid per call
        result = transport.exec([python, "-S", agent, *args], stdin=stdin, timeout=3600)
        if result.returncode == 127 and python != pythons[1]:  # gone: the configured name
            python = pythons[1]
            result = transport.exec([python, "-S", agent, *args], stdin=stdin, timeout=3600)
        if result.returncode != 0:
            raise LaunchError(
                f"the agent failed on {transport.host} ({' '.join(args[:1])}): "
                + result.stderr.decode(errors="replace")[-1000:]
            )
        return json.loads(result.stdout)

    local_of = {sha: local for (local, rel) in pushed for sha in [wanted[rel]]}
    todo = dict(wanted)  # what is still to be placed in the job's code dir
    # The stream that would carry new objects starts now, its handshake overlapping the look,
    # unless the store held every object last time (then it is started only if asked for).
    warm = transport.bulk and not held
    recv = ship_argv(python, "recv", objects)
    with transport.warm_stream(recv) if warm else contextlib.nullcontext():
        missing = agent_json("place", objects, f"{control}/code", payload=todo)["missing"]
        recv[0] = python  # the interpreter that answered (the stream ahead is dropped if not it)
        for attempt in range(3):  # held objects are placed at once; the missing ones are sent
            if not missing:
                if not held:  # what the hint says now (a write only when it changes)
                    with HashCache() as cache:
                        cache.note_held(store, wanted.values())
                return wanted
            if attempt == 2:
                break
            todo = {rel: sha for rel, sha in wanted.items() if sha in set(missing)}
            items = [(s, local_of[s]) for s in missing]
            if transport.bulk:  # sent, then placed by the same command
                place = {"agent": agent, "dest": f"{control}/code", "entries": todo}
                missing = _send_objects(transport, recv, items, sent, place)
                continue
            for sha, local in items:
                transport.put(local, f"{objects}/{sha[:2]}/{sha}")
                sent.append(sha)
            missing = agent_json("place", objects, f"{control}/code", payload=todo)["missing"]
    raise LaunchError(f"objects kept arriving damaged on {transport.host}: {missing[:3]}")


def _object_bytes(items: list[tuple[str, int, Path]], place: Any) -> Iterator[bytes]:
    """The stream :mod:`rgt_jupyter.remote.ship` ``recv`` reads: the request, then each object's
    bytes. Exactly the listed size is sent: a file that changed since it was hashed arrives with
    other bytes and is refused by its hash there, never mistaken for it."""
    request = {"objects": [[sha, size] for sha, size, _ in items], "place": place}
    header = json.dumps(request).encode()
    yield struct.pack(">I", len(header)) + header
    for _, size, local in items:
        left = size
        with open(local, "rb") as fh:
            while left:
                chunk = fh.read(min(left, 4 << 20))
                if not chunk:
                    chunk = bytes(min(left, 4 << 20))
                yield chunk
                left -= len(chunk)


def _send_objects(
    transport: Transport,
    argv: list[str],
    todo: list[tuple[str, Path]],
    sent: list[str],
    place: dict[str, Any],
) -> list[str]:
    """Send objects over one stream (the bulk path), then have the same command place
    ``place``'s entries; ``sent`` gets those stored whole there. Returns what could not be
    placed."""
    items = [(sha, local.stat().st_size, local) for sha, local in todo]
    try:
        size = sum(size for _, size, _ in items)
        source = _object_bytes(items, place)
        with transport.exec_stream(argv, source, "a push", size, hello=HELLO) as answer:
            reply = _read_all(answer)
    except (FileNotFoundError, PermissionError) as exc:
        raise LaunchError(f"the push to {transport.host} failed: {exc}") from exc
    except OSError as exc:
        raise TransportError(f"the push stream broke off: {exc}") from exc
    try:
        answer_json = json.loads(reply)
        stored, missing = answer_json["stored"], answer_json["missing"]
    except (ValueError, KeyError, TypeError) as exc:
        raise TransportError(f"the push got no answer from {transport.host}") from exc
    sent.extend(stored)
    return [str(sha) for sha in missing]


def _read_all(stream: Any) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = stream.read(1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def job_files(req: LaunchRequest, inputs: dict[str, bytes]) -> dict[str, bytes]:
    """The files a job needs besides its pushed ones, named relative to its control dir: the
    program (``code/``), the serialized ``--inputs`` (``inputs/``) and the job API with the
    framework integrations beside it (``lib/``)."""
    files = {f"code/{req.program_name}": req.program.encode()}
    for fname, data in inputs.items():
        files[f"inputs/{fname}"] = data
    files["lib/rgt_jupyter/__init__.py"] = _LIB_INIT.encode()
    files["lib/rgt_jupyter/job.py"] = remote.source("job.py")
    for name, data in integrations.sources().items():
        files[f"lib/rgt_jupyter/integrations/{name}"] = data
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
    files: dict[str, bytes], spec: JobSpec, secret_values: dict[str, str]
) -> dict[str, bytes]:
    """What one job's control dir receives: ``agent.py``, its files, ``launch.json`` and, when
    there are secrets, ``secrets.json``."""
    members = {
        "agent.py": remote.source("agent.py"),
        **files,
        "launch.json": json.dumps(spec.to_dict(), indent=1).encode(),
    }
    if secret_values:
        members["secrets.json"] = json.dumps(secret_values).encode()
    return members


def zip_bundle(members: dict[str, bytes]) -> bytes:
    """The launch bundle: one zip (members deflated, named relative to the control dir) with the
    unpacking ``__main__.py``. It travels as the stdin of the one launch command, so the
    secrets never show in a command line, an environment or a log."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        everything = {"__main__.py": remote.source("bundle_main.py"), **members}
        for name, data in everything.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | member_mode(name)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data, compresslevel=6)
    return buf.getvalue()


def ship(files: dict[str, bytes], spec: JobSpec, secret_values: dict[str, str]) -> bytes:
    """The launch bundle of one job (see :func:`zip_bundle`)."""
    return zip_bundle(bundle_members(files, spec, secret_values))
