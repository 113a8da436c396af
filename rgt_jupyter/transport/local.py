"""The local transport: this machine, plain files and subprocesses."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import socket
import subprocess
from pathlib import Path

from ..store.fsutil import atomic_write_bytes, fsync_dir
from .base import ExecResult, FileStat, ReadStream, Transport

_log = logging.getLogger(__name__)


class LocalTransport(Transport):
    """Runs commands with :mod:`subprocess` (argv lists, never a shell) and reads files directly."""

    name = "local"

    def __init__(self) -> None:
        self.host = socket.gethostname()

    def exec(
        self, argv: list[str], *, stdin: bytes | None = None, timeout: float | None = 60.0
    ) -> ExecResult:
        _log.debug("%s$ %s", self.host, " ".join(shlex.join(argv).split())[:300])
        proc = subprocess.run(
            argv,
            input=stdin if stdin is not None else b"",
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        return ExecResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr)

    def read_bytes(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read() if length is None else fh.read(length)

    def write_bytes(self, path: str, data: bytes, mode: int = 0o644) -> None:
        atomic_write_bytes(path, data, mode)

    def put(self, local: Path, remote: str) -> None:
        directory = os.path.dirname(os.path.abspath(remote))
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{os.path.basename(remote)}.tmp-{os.getpid()}")
        try:
            shutil.copy2(local, tmp)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, remote)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        fsync_dir(directory)

    def open_read(self, path: str, offset: int = 0) -> ReadStream:
        fh = open(path, "rb")  # noqa: SIM115 - the caller closes it
        fh.seek(offset)
        return fh

    def stat(self, path: str) -> FileStat | None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return FileStat(st.st_size, st.st_mtime, os.path.isdir(path))

    def makedirs(self, path: str, mode: int = 0o755) -> None:
        os.makedirs(path, mode=mode, exist_ok=True)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def home(self) -> str:
        return os.path.expanduser("~")
